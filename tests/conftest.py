"""Shared fixtures: a small sample of the real MEDLINE corpus, and CLI helpers."""
from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from collections import Counter
from functools import lru_cache
from pathlib import Path

import pyarrow as pa
import pytest

ROOT = Path(__file__).resolve().parents[1]
RAW = ROOT / "data/raw/pubmed21n1298.xml.gz"
REFERENCE = ROOT / "data/raw/pubmed20n0014.xml.gz"


# `make test` runs the suite on 2 pytest-xdist workers (--dist loadgroup). A worker builds its
# own session and module fixtures, so the tests that share an expensive one stay together, and
# the tests that start a 2-CPU Ray instance run one after another on one worker (two Ray
# instances on 2 cores contend: measured, the Ray chain fixture took 585 s instead of 231 s).
# The two longest groups are handed out first.
FIRST_GROUPS = ("ray", "tiny_run")


def _xdist_group(item) -> str | None:
    if item.get_closest_marker("ray"):
        return "ray"
    if "tiny_run" in item.fixturenames:
        return "tiny_run"
    if _module_scoped_fixtures(str(item.path)) & set(item.fixturenames):
        return item.module.__name__           # a module-scoped fixture is built once
    return None


@lru_cache(maxsize=None)
def _module_scoped_fixtures(path: str) -> frozenset[str]:
    """The module-scoped fixtures a test module defines, read from its source (pytest has no
    public way to ask a collected item for its fixtures' scopes)."""
    names = set()
    for node in ast.walk(ast.parse(Path(path).read_text(encoding="utf-8"))):
        if not isinstance(node, ast.FunctionDef):
            continue
        for decorator in node.decorator_list:
            keywords = {k.arg: k.value for k in getattr(decorator, "keywords", [])}
            if isinstance(keywords.get("scope"), ast.Constant) and keywords["scope"].value == "module":
                name = keywords.get("name")
                names.add(name.value if isinstance(name, ast.Constant) else node.name)
    return frozenset(names)


@pytest.hookimpl(wrapper=True)
def pytest_collection_modifyitems(config, items):
    if not hasattr(config, "workerinput"):    # not an xdist worker: nothing to share out
        return (yield)
    for item in items:
        group = _xdist_group(item)
        if group:
            item.add_marker(pytest.mark.xdist_group(group))
    # Stable: every worker collects the same order (xdist checks), modules stay contiguous.
    rank = {g: i for i, g in enumerate(FIRST_GROUPS)}
    items.sort(key=lambda item: rank.get(_xdist_group(item), len(rank)))
    result = yield                            # xdist names each group by renaming its node ids
    lost = [item.nodeid for item in items if item.get_closest_marker("xdist_group") and "@" not in item.nodeid]
    if config.getvalue("loadgroup") and lost:
        raise pytest.UsageError(f"--dist loadgroup did not group {lost[0]} (pytest {pytest.__version__}); "
                                "use pytest < 9.2 (pyproject.toml) or run without -n")
    return result


@pytest.fixture(scope="session")
def real_docs() -> list[dict]:
    """Normalized real documents from the default corpus: the first 400 English abstracts and
    every non-English OtherAbstract (German, Spanish, Italian, ...)."""
    from pipeline.config import InputConfig
    from pipeline.readers import read_documents
    from pipeline.stages.normalize import Normalize, NormalizeConfig

    assert RAW.exists(), "data/raw is missing: `make test` fetches it (make data)"
    norm = Normalize(NormalizeConfig(), None)
    english, foreign = [], []
    for batch in read_documents(InputConfig(paths=[str(RAW)]), 1000):
        for row in norm.process(batch.table).to_pylist():
            if row["abstract_type"] != "abstract" and row["language"] not in ("eng", ""):
                foreign.append(row)
            elif row["language"] == "eng" and row["abstract_type"] == "abstract" and len(english) < 400:
                english.append(row)
    return english + foreign


@pytest.fixture(scope="session")
def english_texts(real_docs) -> list[str]:
    return [d["text"] for d in real_docs if d["language"] == "eng"]


@pytest.fixture(scope="session")
def tiny_run(tmp_path_factory) -> Path:
    """One run of configs/tiny.yaml (the whole chain on 300 real abstracts), shared by the tests
    that read a finished run: accounting, the packed round trip, the report, and the reference
    bytes that other runs (num_proc 2, killed and resumed, keep: final) must reproduce."""
    out = tmp_path_factory.mktemp("tiny") / "run"
    run_cli("-m", "pipeline", "run", "--config", str(ROOT / "configs/tiny.yaml"), "--output", str(out))
    return out


@pytest.fixture(scope="session")
def ray_instance():
    """One local Ray instance (2 CPUs) in the test process, for the tests that drive the Ray
    executor directly: started once per session (each start costs seconds)."""
    from pipeline.executor import RayExecutor
    executor = RayExecutor(num_cpus=2)
    executor.start()
    yield executor
    executor.close()


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    with open(path, "w", encoding="utf-8") as fh:
        for r in rows:
            fh.write(json.dumps(r, ensure_ascii=False) + "\n")
    return path


def as_from_a_terminal() -> None:
    """A child's Ctrl-C as a terminal gives it (Popen's preexec_fn): the default SIGINT, not the
    ignored one a test worker's process may pass on (a job started in the background has it)."""
    import signal
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def run_cli(*args, check=True, cwd=ROOT, timeout=900):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(f"{args} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return proc


def run_in_process(*args) -> tuple[int, str, str]:
    """`python -m pipeline ARGS` in this process (no interpreter start-up): exit code, stdout, stderr."""
    import contextlib
    import io

    from pipeline.__main__ import main
    out, err, code = io.StringIO(), io.StringIO(), 0
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            main([str(a) for a in args])
        except SystemExit as exc:
            code = exc.code
    return code, out.getvalue(), err.getvalue()


def read_arrow_dir(folder: Path) -> pa.Table | None:
    """A stage's data/ or removed/ folder as one table, through the store's one reader."""
    from pipeline.shards import read_table
    folder = Path(folder)
    return read_table(folder.parent, folder.name)


def shard_inputs(table: pa.Table, folder: Path, batch_size: int):
    """A table as a stage's input: one shard on disk, as the source is cut into shards."""
    from pipeline.inputs import StageInputs
    from pipeline.runpath import RunPath
    from pipeline.shards import ShardWriter
    from pipeline.tasks import InputShard
    writer = ShardWriter(folder, None, max(table.num_rows, 1))
    writer.write(table)
    writer.close()
    return StageInputs([InputShard("00000", RunPath.of(folder / "00000.arrow"), table.num_rows)],
                       batch_size=batch_size)


def write_config(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def notes_by_patient(per_patient: int) -> list[dict]:
    """Up to `per_patient` real dev notes of every patient (ids are PATIENT-NOTE)."""
    taken: Counter = Counter()
    out = []
    for line in (ROOT / "data/deid-dev/notes.jsonl").read_text().splitlines():
        note = json.loads(line)
        patient = note["id"].split("-")[0]
        if taken[patient] < per_patient:
            taken[patient] += 1
            out.append({"id": note["id"], "patient_id": patient, "text": note["text"]})
    return out
