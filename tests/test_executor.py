"""The shard contract under both executors: the local one and Ray (a local Ray instance with
2 CPUs, the real engine) give byte-identical data/, removed/, tokenizer and final/ files, and a
stage interrupted midway resumes with the shards it had not finished, to the same bytes."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import RAW, ROOT, run_cli, write_config, write_jsonl
from pipeline.tasks import TaskOwner, shard_task

# Every stage of the default chain, on 300 real abstracts cut into 3 shards.
CHAIN = """input: {{paths: [{raw}], limit: 300}}
output_dir: {out}
seed: 7
num_proc: {num_proc}
batch_size: 50
shard_size: 100
executor: {{kind: {kind}, num_cpus: 2}}
stages:
  - normalize: {{}}
  - langid: {{}}
  - heuristics: {{min_words: 20}}
  - phi: {{profile: literature}}
  - dedup_exact: {{}}
  - dedup_minhash: {{}}
  - decontaminate: {{mode: cut, benchmarks: [{{name: sections, path: {bench}, fields: [question, contexts]}}]}}
  - split: {{validation_fraction: 0.1}}
  - tokenizer: {{vocab_size: 1000}}
  - pack: {{seq_len: 256, batch_size: 4, formats: [datasets, megatron]}}
"""


def _sections_benchmark(path: Path) -> Path:
    """A benchmark whose items are sections of every 20th abstract of the chain's input (JSONL,
    a list field), so decontaminate cuts passages out of documents under both executors."""
    from pipeline.config import InputConfig
    from pipeline.readers import read_documents
    rows = []
    for batch in read_documents(InputConfig(paths=[str(RAW)], limit=300), 300):
        texts = batch.table["text"].to_pylist()
        rows += [{"id": f"s{i}", "question": "Is it?", "contexts": t.split("\n\n")[-1:]} for i, t in enumerate(texts)
                 if i % 20 == 0 and "\n\n" in t]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def _files(run: Path) -> dict[str, bytes]:
    """Every output file whose bytes are part of the contract (stats.json holds timings; the
    dataset card, like the manifest, quotes the config: executor, num_proc, output folder)."""
    out = {}
    for path in sorted(run.rglob("*")):
        rel = path.relative_to(run).as_posix()
        if (
            path.is_file()
            and not rel.endswith(("stats.json", "manifest.json", "report.html", "final/README.md", ".png"))
            and "/shards/" not in rel
            and not rel.startswith("plots/")
        ):
            out[rel] = path.read_bytes()
    return out


@pytest.fixture(scope="module")
def local_and_ray(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("executors")
    bench = _sections_benchmark(tmp / "sections.jsonl")
    runs = {}
    for kind, num_proc in (("local", 2), ("ray", 1)):
        cfg = write_config(
            tmp / f"{kind}.yaml", CHAIN.format(raw=RAW, out=tmp / kind, num_proc=num_proc, kind=kind, bench=bench)
        )
        proc = run_cli(
            "-m",
            "pipeline",
            "run",
            "--config",
            str(cfg),
            "--log-format",
            "json",
            "--progress-every",
            "0.1",
            timeout=900,
        )
        runs[kind] = tmp / kind
        runs[f"{kind}_log"] = proc.stderr
    return runs


@pytest.mark.slow
@pytest.mark.ray
def test_progress_reaches_the_driver_under_both_executors(local_and_ray):
    """JSON progress lines (off a terminal) from the shard tasks, under local worker processes
    and under Ray: counts that move within a stage, and each stage's last line at its total."""
    for kind in ("local", "ray"):
        events = [json.loads(line) for line in local_and_ray[f"{kind}_log"].splitlines() if line.startswith("{")]
        progress = [e for e in events if e.get("event") == "progress"]
        assert any(e["unit"] == "doc" and 0 < e["done"] < e["total"] for e in progress), kind
        ends = {e["stage"] for e in events if e.get("event") == "stage_end"}
        last = {e["stage"]: e for e in progress}  # each stage's last line: its last phase, done
        assert ends and ends <= set(last) and all(last[s]["done"] == last[s]["total"] for s in ends), kind
        assert all(set(e) >= {"stage", "done", "total", "rate", "elapsed", "workers"} for e in progress)


@pytest.mark.slow
@pytest.mark.ray
def test_ray_and_local_executors_write_the_same_bytes(local_and_ray):
    local, ray = _files(local_and_ray["local"]), _files(local_and_ray["ray"])
    assert sorted(local) == sorted(ray)
    differing = [name for name in local if local[name] != ray[name]]
    assert not differing, differing
    # The contract's files are all there: three shards through the document stages, the
    # tokenizer, the packed sequences in both formats.
    assert {
        "stages/02_langid/data/00000.arrow",
        "stages/02_langid/data/00002.arrow",
        "stages/08_split/removed/00001.arrow",
        "tokenizer/tokenizer.json",
        "final/megatron/train_text_document.bin",
    } <= set(local)
    assert any(name.startswith("final/train/") and name.endswith(".arrow") for name in local)
    # decontaminate cut the benchmark's sections out of the abstracts they come from (those the
    # filters kept); an abstract of one section keeps only its title, too short to stay.
    cut = json.loads((local_and_ray["local"] / "stages/07_decontaminate/stats.json").read_text())
    found, cut = cut["benchmarks"]["sections"], cut["by_source"]["all"]
    assert found["items_found"] == found["documents"] == cut["cut_documents"] >= 5
    assert 0 < cut["removed"] < cut["cut_documents"]


@pytest.mark.slow
@pytest.mark.ray
def test_the_tokenizer_stage_run_alone_under_ray_writes_the_same_tokenizer(local_and_ray, tmp_path):
    """Run alone (`stage tokenizer`), the stage asks the Ray executor for its workers (its
    driver threads) before any map has started Ray: Ray starts then, and the stage writes the
    tokenizer the whole chain wrote."""
    import shutil

    run = tmp_path / "ray"
    shutil.copytree(local_and_ray["ray"], run)
    text = (local_and_ray["ray"].parent / "ray.yaml").read_text().replace(str(local_and_ray["ray"]), str(run))
    cfg = write_config(tmp_path / "ray.yaml", text)
    before = (run / "tokenizer/tokenizer.json").read_bytes()
    run_cli("-m", "pipeline", "stage", "tokenizer", "--config", str(cfg), "--force", "--no-progress", timeout=600)
    stats = json.loads((run / "stages/09_tokenizer/stats.json").read_text())
    assert stats["executor"] == "ray" and stats["executor_workers"]["workers"] == 2
    assert (run / "tokenizer/tokenizer.json").read_bytes() == before


@pytest.mark.slow
@pytest.mark.ray
def test_manifest_and_stats_say_which_executor_ran(local_and_ray):
    for kind, run in ((k, local_and_ray[k]) for k in ("local", "ray")):
        manifest = json.loads((run / "manifest.json").read_text())
        assert manifest["executor"]["kind"] == kind
        phi = next(s for s in manifest["stages"] if s["stage"] == "phi")
        assert phi["executor"] == kind and phi["shards"] == 3
    ray_info = json.loads((local_and_ray["ray"] / "manifest.json").read_text())["executor"]
    assert ray_info["address"] == "local" and ray_info["cluster_cpus"] == 2
    # One actor pool per run: MinHash's several map passes (signatures, partitions, writes)
    # ran on the same actors, each set up once for the stage.
    minhash = json.loads((local_and_ray["ray"] / "stages/06_dedup_minhash/stats.json").read_text())
    assert minhash["executor_workers"]["map_calls"] >= 3
    assert minhash["executor_workers"]["setups"] <= minhash["executor_workers"]["workers"] == 2


@pytest.mark.slow
@pytest.mark.ray
def test_the_run_folder_goes_through_pyarrow_fs_without_renames(local_and_ray, tmp_path, monkeypatch):
    """The run folder named by URI (file://, as s3:// or gs:// would be) with commit: direct,
    as on an object store: no file or folder is renamed, and the bytes are the local run's."""
    import pipeline.runpath
    from pipeline.config import load_config
    from pipeline.runner import run_chain

    out = tmp_path / "direct"
    renamed = []
    monkeypatch.setattr(pipeline.runpath.RunPath, "rename", lambda self, target: renamed.append(str(self)))
    real_replace = os.replace

    def no_replace_in_run(src, dst, *args, **kwargs):
        if str(out) in str(dst):
            renamed.append(str(src))
        return real_replace(src, dst, *args, **kwargs)

    monkeypatch.setattr(os, "replace", no_replace_in_run)
    monkeypatch.setattr(os, "rename", no_replace_in_run)
    text = (
        CHAIN.format(
            raw=RAW,
            out=f"file://{out}",
            num_proc=1,
            kind="local",
            bench=local_and_ray["local"].parent / "sections.jsonl",
        )
        + "commit: direct\n"
    )
    config = load_config(write_config(tmp_path / "direct.yaml", text))
    assert str(config.output_dir) == str(out) and config.output_dir.fs.type_name == "local"
    run_chain(config)
    assert renamed == []
    assert not [p for p in out.rglob("*") if p.name.endswith(".tmp")]
    local = _files(local_and_ray["local"])
    direct = _files(out)
    assert sorted(direct) == sorted(local)
    assert [name for name in local if local[name] != direct[name]] == []
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["run_folder"]["bytes"] > 0


@pytest.mark.slow
@pytest.mark.ray
def test_stages_that_keep_the_text_refer_to_it_instead_of_copying_it(local_and_ray):
    """normalize, phi and decontaminate (mode cut) write texts; langid, heuristics, dedup,
    split, tokenizer and pack's data/ hold where each text is, and every reader of shards.py gets
    whole documents back."""
    import pyarrow as pa

    from pipeline.shards import TEXT_FILE, TEXT_ROW, read_table, shard_schema

    run = local_and_ray["local"]
    stages = sorted(p.name for p in (run / "stages").iterdir())
    writers = {"01_normalize", "04_phi", "07_decontaminate"}  # decontaminate: mode cut
    for name in stages:
        raw = pa.ipc.open_stream(pa.OSFile(str(run / "stages" / name / "data/00000.arrow"))).schema
        if name in writers:
            assert "text" in raw.names and TEXT_ROW not in raw.names, name
        else:
            assert "text" not in raw.names and {TEXT_FILE, TEXT_ROW} <= set(raw.names), name
            # As documents, the shard has its text column where the refs are.
            assert shard_schema(run / "stages" / name / "data/00000.arrow").names.index("text") == raw.names.index(
                TEXT_FILE
            )
    # Whole documents: langid's texts are normalize's, split's are phi's, row for row by id.
    for reader, writer in (("02_langid", "01_normalize"), ("08_split", "07_decontaminate")):
        docs, source = read_table(run / "stages" / reader), read_table(run / "stages" / writer)
        by_id = dict(zip(source["id"].to_pylist(), source["text"].to_pylist()))
        assert docs.num_rows > 0 and docs["text"].to_pylist() == [by_id[i] for i in docs["id"].to_pylist()]
    size = {name: sum(f.stat().st_size for f in (run / "stages" / name / "data").glob("*.arrow")) for name in stages}
    assert all(size[name] < size["01_normalize"] / 3 for name in stages if name not in writers), size


INTERRUPTER = '''
import os
import signal
from pathlib import Path

from pipeline.stages.heuristics import Heuristics


class InterruptedHeuristics(Heuristics):
    """heuristics, except that the shard holding `STOP_AT` ends the run once (the flag file):
    the local executor's process is killed, as a machine going down; a Ray actor fails."""

    def process(self, table):
        flag = Path(os.environ["STOP_FLAG"])
        if os.environ["STOP_AT"] in table["id"].to_pylist() and not flag.exists():
            flag.write_text("stopped once")
            if os.environ["STOP_HOW"] == "kill":
                os.kill(os.getpid(), signal.SIGKILL)
            raise RuntimeError("stopped midway")
        with open(os.environ["SEEN_LOG"], "a") as log:
            log.write(table["id"][0].as_py() + "\\n")
        return super().process(table)


def main(config_path, executor):
    from pipeline.cli import user_errors
    from pipeline.config import load_config
    from pipeline.runner import run_chain
    from pipeline.stages import REGISTRY

    REGISTRY["heuristics"] = InterruptedHeuristics
    with user_errors():
        run_chain(load_config(config_path, executor=executor))
'''

RESUME = """input: {{paths: [{src}]}}
output_dir: {out}
commit: {commit}
num_proc: 1
batch_size: 10
shard_size: 40
executor: {{kind: local, num_cpus: 2}}
stages:
  - normalize: {{}}
  - heuristics: {{min_words: 5}}
  - dedup_exact: {{}}
"""


WORDS = (
    "patient admitted with chest pain treated in the cardiology unit and discharged home after three "
    "days blood pressure was controlled using two drugs over following weeks study enrolled adults type "
    "diabetes from regional hospitals symptoms resolved without further treatment"
).split()


def _notes(n):
    import random

    return [{"id": f"d{i:03d}", "text": " ".join(random.Random(i).choices(WORDS, k=30)) + "."} for i in range(n)]


def _interrupted_run(tmp_path, name, how, executor, commit="auto"):
    (tmp_path / "interrupter.py").write_text(INTERRUPTER)
    src = tmp_path / "in.jsonl"
    src.write_text("".join(json.dumps(d) + "\n" for d in _notes(200)))
    cfg = write_config(tmp_path / f"{name}.yaml", RESUME.format(src=src, out=tmp_path / name, commit=commit))
    env = {
        **os.environ,
        "PYTHONPATH": f"{tmp_path}{os.pathsep}{ROOT}",
        "STOP_AT": "d130",
        "STOP_FLAG": str(tmp_path / f"{name}.flag"),
        "STOP_HOW": how,
        "SEEN_LOG": str(tmp_path / f"{name}.seen"),
    }

    def run():
        return subprocess.run(
            [sys.executable, "-c", f"import interrupter; interrupter.main({str(cfg)!r}, {executor!r})"],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )

    return run, tmp_path / name, lambda: (tmp_path / f"{name}.seen").read_text().split()


@pytest.mark.parametrize("commit", ["auto", "direct"])
def test_a_killed_stage_resumes_with_its_unfinished_shards(tmp_path, commit):
    """auto: the stage is written in <stage>.tmp and renamed at the end; direct (object
    stores, no rename): in place, where the markers and a missing _SUCCESS say what is left."""
    start, run, seen = _interrupted_run(tmp_path, "killed", "kill", "local", commit)
    first = start()
    assert first.returncode == -9  # the whole run was killed in heuristics
    assert not (run / "stages/02_heuristics/_SUCCESS").exists()
    in_progress = run / ("stages/02_heuristics.tmp" if commit == "auto" else "stages/02_heuristics")
    assert len(list((in_progress / "shards").glob("*.json"))) == 3
    if commit == "direct":
        assert not (run / "stages/02_heuristics.tmp").exists()
    second = start()
    assert second.returncode == 0, second.stderr[-2000:]
    assert "[02_heuristics] resuming: 3 of 5 shards finished before" in second.stderr
    assert "[01_normalize] skipped" in second.stderr
    # Batches of 10: the first run saw shards 0-2 (d000-d119) and d120 of shard 3; the second
    # run starts again at shard 3 and never reprocesses a finished shard.
    seen = seen()
    assert seen.count("d000") == 1 and seen.count("d080") == 1 and seen.count("d120") == 2
    reference = tmp_path / "reference"
    cfg = write_config(
        tmp_path / "reference.yaml", RESUME.format(src=tmp_path / "in.jsonl", out=reference, commit="auto")
    )
    run_cli("-m", "pipeline", "run", "--config", str(cfg))
    assert _files(run) == _files(reference)


@pytest.mark.slow
@pytest.mark.ray
@pytest.mark.cluster  # ~90 s of Ray start-ups: `make test-cluster`, not CI's `make test`
def test_a_stage_failed_under_ray_resumes_under_ray_to_the_same_bytes(tmp_path):
    start, run, seen = _interrupted_run(tmp_path, "failed", "raise", "ray", "direct")
    first = start()
    assert first.returncode != 0 and "stopped midway" in first.stderr
    assert not (run / "stages/02_heuristics/_SUCCESS").exists()
    second = start()
    assert second.returncode == 0, second.stderr[-2000:]
    # Ray hands every shard out; the failed one comes back as an error after the others finished.
    assert "[02_heuristics] resuming: 4 of 5 shards finished before" in second.stderr
    markers = sorted(p.name for p in (run / "stages/02_heuristics/shards").glob("*.json"))
    assert markers == [f"{i:05d}.json" for i in range(5)]
    assert seen().count("d000") == 1  # shard 0 finished in the first run
    reference = tmp_path / "reference"
    cfg = write_config(
        tmp_path / "reference.yaml", RESUME.format(src=tmp_path / "in.jsonl", out=reference, commit="auto")
    )
    run_cli("-m", "pipeline", "run", "--config", str(cfg))
    assert _files(run) == _files(reference)


def test_several_input_files_are_read_one_task_per_file(tmp_path):
    """Shards FILE-K, the same bytes for 1 and 2 workers; a bad line and a repeated id across
    files are still counted; files with other columns are read again in order by the driver."""
    notes = _notes(90)
    for f in range(3):
        lines = [json.dumps(d) for d in notes[30 * f : 30 * (f + 1)]]
        if f == 1:
            lines.insert(5, '{"id": "broken", "text": ')  # bad JSON
            lines.append(json.dumps({"id": "d000", "text": "a repeated id in another file, with enough words."}))
        (tmp_path / f"in{f}.jsonl").write_text("\n".join(lines) + "\n")
    runs = {}
    for num_proc in (1, 2):
        cfg = write_config(
            tmp_path / f"p{num_proc}.yaml",
            f"input: {{paths: ['{tmp_path}/in*.jsonl']}}\noutput_dir: {tmp_path / f'p{num_proc}'}\n"
            f"num_proc: {num_proc}\nshard_size: 20\nstages: [normalize]\n",
        )
        proc = run_cli("-m", "pipeline", "run", "--config", str(cfg), check=False)
        assert proc.returncode == 0, proc.stderr[-2000:]
        runs[num_proc] = tmp_path / f"p{num_proc}"
    assert _files(runs[1]) == _files(runs[2])
    names = sorted(p.name for p in (runs[2] / "stages/01_normalize/data").glob("*.arrow"))
    assert names == [
        "00000-00000.arrow",
        "00000-00001.arrow",
        "00001-00000.arrow",
        "00001-00001.arrow",
        "00002-00000.arrow",
        "00002-00001.arrow",
    ]
    stats = json.loads((runs[2] / "stages/01_normalize/stats.json").read_text())
    assert stats["docs_in"] == 92 and stats["removed"] == {"malformed_bad_json": 1}
    assert stats["duplicate_ids"] == {"documents": 1, "ids": 1}
    # A parquet file beside JSONL has other columns: one ordered pass conforms them.
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(
        pa.table({"id": ["p1", "p2"], "text": [notes[0]["text"], notes[1]["text"] + " again"]}),
        tmp_path / "in3.parquet",
    )
    cfg = write_config(
        tmp_path / "mixed.yaml",
        f"input: {{paths: ['{tmp_path}/in0.jsonl', '{tmp_path}/in3.parquet']}}\n"
        f"output_dir: {tmp_path / 'mixed'}\nnum_proc: 2\nshard_size: 20\nstages: [normalize]\n",
    )
    run_cli("-m", "pipeline", "run", "--config", str(cfg))
    mixed = sorted(p.name for p in (tmp_path / "mixed/stages/01_normalize/data").glob("*.arrow"))
    assert mixed == ["00000.arrow", "00001.arrow"]
    assert json.loads((tmp_path / "mixed/stages/01_normalize/stats.json").read_text())["docs_out"] == 32


class CountingStage(TaskOwner):
    """The executor contract's smallest stage: a TaskOwner whose setup() writes the worker's
    process id to a log (models load there); its task methods say which process ran them."""

    name = "counting"

    def __init__(self, config, ctx):
        self.config, self.ctx = config, ctx

    def setup(self):
        with open(self.config["log"], "a") as log:
            log.write(f"{os.getpid()}\n")

    @shard_task
    def where(self, task):
        return {"pid": os.getpid(), "shard": task.params["i"]}

    @shard_task(loads_models=False)
    def where_without_models(self, task):
        return {"pid": os.getpid(), "shard": task.params["i"]}


def _setups_across_map_calls(executor, tmp_path):
    from pipeline.runpath import RunPath
    from pipeline.tasks import ShardTask

    log = tmp_path / "setups.log"
    stage = CountingStage({"log": str(log)}, None)
    tasks = [ShardTask(RunPath.of(tmp_path), params={"i": i}) for i in range(6)]
    calls = [list(executor.map(stage.where_without_models, tasks))]
    assert not log.exists()  # a method without models loads none
    calls += [list(executor.map(stage.where, tasks)) for _ in range(3)]
    stats = executor.stage_stats()
    assert all([r["shard"] for r in call] == list(range(6)) for call in calls)  # task order
    pids = {r["pid"] for call in calls[1:] for r in call}
    setups = log.read_text().split()
    # The same (at most two) workers served the three calls that load models; each set up
    # once, at the first call that needed them.
    assert 1 <= len(pids) <= 2 and os.getpid() not in pids
    # The first call loads no model: before the local workers exist, this process runs it
    # while they start (a retune's first stage); Ray's actors run it.
    first = {r["pid"] for r in calls[0]}
    assert first == {os.getpid()} if executor.kind == "local" else first <= pids
    assert len(setups) == len(set(setups)) and set(setups) <= {str(p) for p in pids}
    assert {str(r["pid"]) for r in calls[1]} <= set(setups)
    return stage, tasks, stats


def test_local_workers_set_a_stage_up_once_across_its_map_calls_and_serve_the_next_stage(tmp_path):
    from pipeline.executor import LocalExecutor

    executor = LocalExecutor(num_proc=2)
    try:
        _, tasks, stats = _setups_across_map_calls(executor, tmp_path)
        assert stats == {"workers": 2}
        executor.end_stage()
        # The next stage runs in the same two processes (started once per run), set up anew.
        other = CountingStage({"log": str(tmp_path / "other.log")}, None)
        again = list(executor.map(other.where, tasks))
        started = set(executor._pool.processes)
        assert len(started) == 2 and {r["pid"] for r in again} <= started
        assert set((tmp_path / "other.log").read_text().split()) == {str(r["pid"]) for r in again}
    finally:
        executor.close()


class SlowLightStage(CountingStage):
    """Tasks that load no model and take a while: the driver runs them until the workers are up."""

    name = "slow_light"

    @shard_task(loads_models=False)
    def where_without_models(self, task):
        import time

        time.sleep(task.params["sleep"])
        return {"pid": os.getpid(), "shard": task.params["i"]}


def test_the_driver_runs_tasks_without_models_until_the_workers_are_up_then_hands_them_over(tmp_path):
    from pipeline.executor import LocalExecutor
    from pipeline.runpath import RunPath
    from pipeline.tasks import ShardTask

    executor = LocalExecutor(num_proc=2)
    try:
        stage = SlowLightStage({"log": str(tmp_path / "setups.log")}, None)
        # 16 x 0.4 s here would be 6.4 s; the processes start in well under that.
        tasks = [ShardTask(RunPath.of(tmp_path), params={"i": i, "sleep": 0.4}) for i in range(16)]
        results = list(executor.map(stage.where_without_models, tasks))
        assert [r["shard"] for r in results] == list(range(16))  # task order
        pids = [r["pid"] for r in results]
        here = pids.index(next(p for p in pids if p != os.getpid()))
        # A prefix ran here while the processes started; every task after it ran in them.
        assert here >= 1 and pids[:here] == [os.getpid()] * here
        assert os.getpid() not in pids[here:] and set(pids[here:]) <= set(executor._pool.processes)
        assert not (tmp_path / "setups.log").exists()
        # Once they are up, a stage's tasks go to them from the first.
        again = list(executor.map(stage.where_without_models, tasks[:4]))
        assert os.getpid() not in {r["pid"] for r in again}
    finally:
        executor.close()


@pytest.mark.ray
def test_ray_actors_set_a_stage_up_once_across_its_map_calls_and_serve_the_next_stage(ray_instance, tmp_path):
    import ray
    from ray.exceptions import RayActorError

    from pipeline.executor import RayExecutor

    executor = RayExecutor(workers={"counting": 2})
    stage, tasks, stats = _setups_across_map_calls(executor, tmp_path)
    assert stats["workers"] == 2 and stats["nodes"] == 1 and stats["map_calls"] == 4
    assert stats["setups"] == len((tmp_path / "setups.log").read_text().split())
    actors = list(executor._pool.actors)
    first_pids = {r["pid"] for r in executor.map(stage.where, tasks)}
    executor.end_stage()  # the actors stay for the next stage
    # The next stage runs on the same actors (started once per run), built and set up anew;
    # a stage with `workers: 1` uses one of them.
    other = CountingStage({"log": str(tmp_path / "other.log")}, None)
    again = list(executor.map(other.where, tasks))
    assert executor._pool.actors == actors and {r["pid"] for r in again} <= first_pids
    assert set((tmp_path / "other.log").read_text().split()) == {str(r["pid"]) for r in again}
    assert executor.stage_stats()["setups"] == len((tmp_path / "other.log").read_text().split())
    executor.end_stage()
    executor.workers["counting"] = 1
    third = CountingStage({"log": str(tmp_path / "third.log")}, None)
    once = list(executor.map(third.where, tasks))
    assert len({r["pid"] for r in once}) == 1 and executor.stage_stats()["workers"] == 1
    executor.close()  # the run's actors end with it
    with pytest.raises(RayActorError):
        ray.get(actors[0].drop.remote(), timeout=60)
    assert ray.is_initialized()  # the session's instance is not this executor's


@pytest.mark.ray
def test_the_local_instance_workers_import_pipeline_without_a_runtime_env(ray_instance):
    """Our own local instance: the job has no runtime_env and a worker still imports
    `pipeline`, and the driver's environment is as before."""
    import ray

    from pipeline.executor import RayShardWorker

    assert "pipeline" not in os.environ.get("PYTHONPATH", "")
    assert not ray.get_runtime_context().runtime_env.get("env_vars")
    module = ray.get(ray.remote(lambda: RayShardWorker.__module__).remote(), timeout=120)
    assert module == "pipeline.executor"


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
@pytest.mark.ray
@pytest.mark.cluster
def test_a_run_joins_a_two_node_cluster_started_with_ray_start(tmp_path):
    """As docs/scaling-out.md tells a user: `ray start --head`, a second node with
    `ray start --address ...` (two raylets on this machine, one CPU each), then a run with
    `executor: {kind: ray, address: auto}`. Its tasks ran on both nodes, and the bytes are a
    local run's. The test stops only the cluster it started (its own process groups)."""
    import shutil
    import tempfile

    from scripts.benchmarks.cluster_check import start_cluster, stop_cluster

    port = _free_port()
    temp_dir = tempfile.mkdtemp(prefix="ray-")  # short: Ray's socket paths have a length limit
    # Token authentication (Ray's default) off for this throwaway cluster: the user's token
    # file (~/.ray/auth_token) stays out of the test.
    env = {**os.environ, "RAY_ADDRESS": f"127.0.0.1:{port}", "RAY_AUTH_MODE": "disabled"}
    nodes = []
    try:
        nodes = start_cluster(temp_dir, port, env, object_store_mb=150)
        src = write_jsonl(tmp_path / "in.jsonl", _notes(200))
        chain = (
            "input: {{paths: [{src}]}}\noutput_dir: {out}\nbatch_size: 25\nshard_size: 50\n"
            "executor: {executor}\nstages: [normalize, dedup_minhash]\n"
        )
        for name, executor in (("cluster", "{kind: ray, address: auto}"), ("local", "{kind: local}")):
            cfg = write_config(tmp_path / f"{name}.yaml", chain.format(src=src, out=tmp_path / name, executor=executor))
            proc = subprocess.run(
                [sys.executable, "-m", "pipeline", "run", "--config", str(cfg)],
                cwd=ROOT,
                env=env,
                capture_output=True,
                text=True,
                timeout=600,
            )
            assert proc.returncode == 0, proc.stderr[-2000:]
    finally:
        stop_cluster(nodes)
        shutil.rmtree(temp_dir, ignore_errors=True)
    manifest = json.loads((tmp_path / "cluster/manifest.json").read_text())
    assert manifest["executor"]["address"] == "auto" and manifest["executor"]["cluster_nodes"] == 2
    for stage in ("01_normalize", "02_dedup_minhash"):
        workers = json.loads((tmp_path / "cluster/stages" / stage / "stats.json").read_text())["executor_workers"]
        assert workers["workers"] == 2 and workers["nodes"] == 2, (stage, workers)
    cluster, local = _files(tmp_path / "cluster"), _files(tmp_path / "local")
    assert sorted(cluster) == sorted(local) and [n for n in local if local[n] != cluster[n]] == []
