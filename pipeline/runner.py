"""Walks the chain: skip finished stages, run the rest, write the manifest.

The runner knows no stage by name: what it needs of one (its engines, the files it reads from
other stages and publishes, what else its fingerprint depends on, its cache namespace, its
manifest fields, and its privacy hooks) the stage declares on its class (pipeline/stages/base.py)."""
from __future__ import annotations

import logging
import platform
import time
from contextlib import contextmanager
from pathlib import Path

import pipeline
from pipeline.binding import (
    bare_stage,
    make_stage,
    publish,
    score_fingerprint,
    source_fingerprint,
    source_input,
    stage_dirs_for,
    stage_executor,
    stage_fingerprint,
    where_in_config,
)
from pipeline.cache import cache_root
from pipeline.config import Config, StageSpec, expand_paths
from pipeline.digests import digest, package_versions
from pipeline.errors import UserError
from pipeline.inputs import StageInputs
from pipeline.progress import stage_line, stage_progress
from pipeline.runpath import RunPath, read_json, write_json
from pipeline.shards import STATS, StageOutput, is_done, is_purged, purge_documents, purge_note, stage_shards
from pipeline.stages import GROUPS, REGISTRY
from pipeline.stages.base import DocumentStage, Stage, StoredScores
from pipeline.tasks import InputShard

log = logging.getLogger("medprep")


# ---- one stage ------------------------------------------------------------------------------

def _stage_inputs(config: Config, spec: StageSpec, input_paths: list[str] | None,
                  stage_dirs: dict[str, RunPath]):
    """A stage's input: given files or the source (first stage), cut into shards once the
    stage folder exists; or the previous stage's output shards. (open(output), fingerprint)."""
    run = config.run
    previous = config.previous(spec)
    if input_paths is not None or not previous:
        input_cfg = source_input(config, spec, input_paths)
        from pipeline.ingest import ingest_source
        return (lambda output, executor: ingest_source(input_cfg, run, output.tmp / "input", executor,
                                                       source=spec.source, stage_name=spec.name)), \
            source_fingerprint(input_cfg)
    shards_in, fingerprints = [], []
    for prev in previous:
        prev_dir = stage_dirs[prev.key]
        if is_purged(prev_dir) and not is_done(prev_dir):
            raise UserError(f"stage '{spec.key}' reads the output of '{prev.key}', whose documents are gone "
                            f"({prev_dir}: {purge_note(prev_dir)}); rerun the chain from the start "
                            f"('python -m pipeline run --config {config.source}')")
        if not is_done(prev_dir):
            raise UserError(f"stage '{spec.key}' reads the output of '{prev.key}', which has not finished "
                            f"({prev_dir}); run 'python -m pipeline.stage {prev.key} --config {config.source}' "
                            "first, or give --input")
        prev_stats = read_json(prev_dir / STATS)
        from pipeline.preflight import check_input_version
        check_input_version(spec.key, prev.key, prev_dir, prev_stats, config.source)
        shards_in += [InputShard(name, path, rows, stage_output=True) for name, path, rows in stage_shards(prev_dir)]
        fingerprints.append(prev_stats["fingerprint"])
    # A shared tail reads every source's shards (named SOURCE.K), in name order as later stages do.
    shards_in.sort(key=lambda shard: shard.name)
    names = [shard.name for shard in shards_in]
    if len(set(names)) != len(names):
        raise UserError(f"stage '{spec.key}': two of its input shards have one name; a shared tail's input "
                        "shards are named SOURCE.K (rerun the sources' stages: their output predates sources)")
    fingerprint = fingerprints[0] if len(fingerprints) == 1 else digest(*fingerprints)
    return (lambda output, executor: StageInputs(shards_in, batch_size=run.batch_size)), fingerprint


def run_stage(config: Config, spec: StageSpec, *, input_paths=None, output_dir: Path | None = None,
              force: bool = False, stage_dirs=None, executor=None) -> dict:
    stage_dirs = stage_dirs or stage_dirs_for(config)
    from pipeline.private_chain import private_prefix, run_private_chain
    prefix = private_prefix(config, spec, alone=input_paths is not None)
    if prefix is not None:
        return run_private_chain(config, prefix, stage_dirs=stage_dirs, executor=executor, input_paths=input_paths,
                                 output_dir=output_dir, force=force)[-1]
    folder = RunPath.of(output_dir, direct=config.output_dir.direct) if output_dir else stage_dirs[spec.key]
    stage = make_stage(config, spec, stage_dirs)
    if (privacy := stage.privacy()) is not None:
        privacy.check_private_files(where_in_config(config, spec), [config.output_dir, folder])
    open_inputs, input_fp = _stage_inputs(config, spec, input_paths, stage_dirs)
    reads_source = input_paths is not None or not config.previous(spec)     # the driver ingests first
    fingerprint = stage_fingerprint(stage, spec, input_fp, config)
    if not force and is_done(folder):
        stats = read_json(folder / STATS)
        if stats.get("fingerprint") == fingerprint:
            log.info("%s: finished before with the same config and input, skipped", spec.key)
            stage_line(spec.folder, "skipped: done with the same config and input", event="stage_skipped")
            return stats
    document = isinstance(stage, DocumentStage)
    try:
        # Document stages resume an interrupted run shard by shard (same fingerprint only);
        # global stages start over.
        output = StageOutput(folder, keep_removed_text=config.run.keep_removed_text,
                             fingerprint=fingerprint if document else None)
    except OSError as exc:
        raise UserError(f"{exc.filename or folder}: cannot create the stage folder ({exc.strerror})") from None
    stage_line(spec.folder, "running", event="stage_start")
    t0 = time.perf_counter()
    from pipeline.executor import task_usage
    driver_cpu0, _ = task_usage()
    inputs = None
    with stage_executor(config, executor) as executor, _disk_full_names(spec, output, document, lambda: inputs), \
            stage_progress(spec.folder, enabled=config.run.progress):
        if reads_source:
            inputs = _ingest_while_starting(executor, stage, open_inputs, output, config.inputs.get(spec.source),
                                            input_paths is not None)
        else:
            inputs = open_inputs(output, executor)
        inputs.bind(output, executor)
        stage.ctx.label = spec.folder
        if document and stage.threshold_options:
            key = f"cache/scores/{spec.name}/{score_fingerprint(stage, spec, input_fp, config)}"
            stage.ctx.stored_scores = StoredScores(key, cache_root(config) / key, reuse=not force)
        extra = stage.run(inputs, output)
        kind = executor.kind
        workers = executor.stage_stats()
        usage = executor.stage_usage()
    seconds = time.perf_counter() - t0
    driver_cpu1, driver_rss = task_usage()
    extra = {**(extra or {}), **_driver_stats(spec, inputs, seconds, document), "executor_workers": workers,
             **_cost(driver_cpu1 - driver_cpu0, driver_rss, usage)}
    # A multi-source run's stage says its source and folder; the shared tail's, its counts by source.
    where = {"source": spec.source, "folder": spec.folder} if config.multi_source else {}
    stats = output.commit({"stage": spec.name, "position": spec.position, **where, "medprep": pipeline.__version__,
                           "fingerprint": fingerprint, "seconds": round(seconds, 3), "executor": kind, **extra},
                          input_shards=inputs.names(), by_source=config.multi_source and spec.source is None)
    if output_dir is None:
        publish(stage, folder, config.output_dir)
    rate = stats["docs_in"] / seconds if seconds else 0.0
    stage_line(spec.folder, f"in {stats['docs_in']} out {stats['docs_out']} removed "
               f"{sum(stats['removed'].values())} in {seconds:.1f}s ({rate:,.0f} docs/s)", event="stage_end",
               docs_in=stats["docs_in"], docs_out=stats["docs_out"], removed=stats["removed"],
               seconds=round(seconds, 3), rate=round(rate, 1))
    return stats


def _ingest_while_starting(executor, stage, open_inputs, output, input_cfg, given_paths: bool) -> StageInputs:
    """The executor starts its workers (executor.prestart) while the driver reads the source.
    Ray's start (a few seconds of processes coming up, mostly waiting) runs in this thread and
    the reading in another, at once, when the reading needs no workers (one file, or a `limit`:
    read in order on the driver). Otherwise (and for local workers: forked, so no second thread
    while they fork; and for --input files) one after the other: the workers start, then the
    reading begins."""
    from pipeline.ingest import reads_on_driver
    if getattr(executor, "kind", "") != "ray" or given_paths or not reads_on_driver(input_cfg):
        executor.prestart(stage)
        return open_inputs(output, executor)
    import threading
    box: dict = {}
    started = _OnceStarted(executor)

    def ingest():
        try:
            box["inputs"] = open_inputs(output, started)
        except BaseException as exc:          # raised again in this thread, below
            box["error"] = exc

    reader = threading.Thread(target=ingest, name="medprep-ingest", daemon=True)
    reader.start()
    executor.prestart(stage)                  # an interrupt here leaves the (daemon) reader behind
    started.event.set()
    reader.join()
    if "error" in box:
        raise box["error"]
    return box["inputs"]


class _OnceStarted:
    """The executor as the reading thread sees it while the main thread starts it: not ready
    (the reading parses on the driver) until prestart has returned."""

    def __init__(self, executor):
        import threading
        self.executor = executor
        self.event = threading.Event()

    def ready(self) -> bool:
        return self.event.is_set() and self.executor.ready()

    def __getattr__(self, name):
        return getattr(self.executor, name)


@contextmanager
def _disk_full_names(spec: StageSpec, output: StageOutput, document: bool, inputs):
    """A full disk midway ends the stage with one line saying what to free and how it resumes."""
    try:
        yield
    except BaseException as exc:
        from pipeline.diskspace import raise_if_disk_full
        shards = inputs()
        raise_if_disk_full(exc, spec.name, output, len(shards.shards) if shards else None, resumes=document)
        raise


def _cost(driver_cpu: float, driver_rss_mb: int, workers: dict) -> dict:
    """What the stage cost: CPU seconds of the driver and of its tasks in the workers (the
    per-stage docs per CPU-second come from these), and peak resident memory of each kind of
    process (the driver's: its peak so far in the run)."""
    cpu = driver_cpu + workers.get("worker_cpu_seconds", 0.0)
    return {"cpu_seconds": round(cpu, 3), "driver_cpu_seconds": round(driver_cpu, 3),
            "driver_peak_rss_mb": driver_rss_mb, **workers}


def _driver_stats(spec: StageSpec, inputs: StageInputs, seconds: float, document: bool) -> dict:
    """Where the time went: shard tasks on the executor's workers, and the driver's own part
    (reading the source into shards, combining results): the scaling projection uses both.
    And, for a stage that read the source, its text bytes and repeated ids."""
    out = {"seconds_ingest": round(inputs.ingest_seconds, 3)}
    if inputs.text_bytes is not None:
        out["input_text_bytes"] = inputs.text_bytes
    out["seconds_tasks"] = round(seconds - inputs.ingest_seconds if document else inputs.task_seconds, 3)
    duplicate_ids = inputs.duplicate_ids()
    if duplicate_ids is not None:
        out["duplicate_ids"] = duplicate_ids
        if duplicate_ids["documents"]:
            stage_line(spec.folder, f"warning: {duplicate_ids['documents']} documents reuse the id of an earlier "
                       f"document ({duplicate_ids['ids']} distinct ids); removed/ and duplicate_of name documents "
                       "by id, so give every document its own id", event="warning",
                       documents=duplicate_ids["documents"], ids=duplicate_ids["ids"])
    return out


def expand_names(config: Config, names: list[str]) -> list[StageSpec]:
    """The stages a name means, in chain order: a stage (every source's, in a multi-source run),
    a group, a source's stage (`SOURCE.STAGE`), a source's group (`SOURCE.GROUP`), or a
    source (its whole chain)."""
    wanted: list[StageSpec] = []
    for name in names:
        source, _, stage = name.rpartition(".") if "." in name else (None, "", name)
        if source is None and name in config.source_names:
            source, stage = name, None
        elif source is not None and source not in config.source_names:
            raise UserError(f"'{name}': no source '{source}' in {config.source} "
                            f"(sources: {', '.join(config.source_names) or 'none: the config has one input'})")
        if stage is not None and stage not in GROUPS and stage not in REGISTRY:
            raise UserError(f"unknown stage or group '{stage}' (see 'python -m pipeline stages')")
        members = GROUPS.get(stage, [stage]) if stage is not None else None
        present = [s for s in config.stages if (members is None or s.name in members)
                   and (source is None or s.source == source)]
        if not present:
            raise UserError(f"'{name}' is not in the chain of {config.source}")
        wanted.extend(present)
    return [s for s in config.stages if s in wanted]


def run_folder_size(config: Config, all_stats: list[dict]) -> dict:
    """The run folder's bytes (a hard-linked file counted once; manifest.json, which holds this
    figure, left out) against the input's text."""
    seen: set = set()
    total = 0
    run_dir = config.output_dir
    manifest = run_dir / "manifest.json"
    if run_dir.local is None:
        total = sum(f.size() for f in run_dir.rglob() if f != manifest)
    for path in run_dir.local.rglob("*") if run_dir.local is not None else ():
        if path.is_file() and not path.is_symlink() and path != manifest.local:
            st = path.stat()
            if (st.st_dev, st.st_ino) not in seen:
                seen.add((st.st_dev, st.st_ino))
                total += st.st_size
    read = [s.get("input_text_bytes") for s in all_stats if "input_text_bytes" in s]
    text = sum(read) if read else None
    out = {"keep": config.run.keep, "bytes": total, "input_text_bytes": text}
    if text:
        out["times_input_text"] = round(total / text, 2)
    return out


# ---- chain ------------------------------------------------------------------------------

def run_chain(config: Config, *, force: bool = False) -> dict:
    try:
        config.output_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UserError(f"{config.output_dir}: cannot create the output folder ({exc.strerror})") from None
    from pipeline.preflight import run_folder_lock
    with run_folder_lock(config.output_dir):
        return _run_chain(config, force=force)


def _run_chain(config: Config, *, force: bool = False) -> dict:
    from pipeline.preflight import note_other_version
    note_other_version(config.output_dir)
    stage_dirs = stage_dirs_for(config)
    stages = [bare_stage(spec) for spec in config.stages]
    for spec, stage in zip(config.stages, stages):
        if (privacy := stage.privacy()) is not None:
            privacy.check_private_files(where_in_config(config, spec), [config.output_dir])
    reusable = {} if force else purged_but_current(config, stage_dirs)
    all_stats = []
    t0 = time.perf_counter()
    from pipeline.executor import make_executor
    executor = make_executor(config.run.executor, config.run.num_proc)
    from pipeline.private_chain import private_chains, run_private_chain
    private = private_chains(config)
    in_memory = {s.key for before in private.values() for s in before}
    by_key = dict(zip((s.key for s in config.stages), stages))
    try:
        for spec, stage in zip(config.stages, stages):
            if spec.key in reusable:
                purger = reusable[spec.key]
                why = "done with the same config and input" if spec.key == purger else \
                    f"purged after the last run, and {purger} is done with the same config and input"
                stage_line(spec.folder, f"skipped: {why}", event="stage_skipped")
                all_stats.append(read_json(stage_dirs[spec.key] / STATS))
                continue
            if spec.key in in_memory:
                continue                 # run by its chain's PHI stage, in memory (private_chain.py)
            if spec.key in private:
                specs = private[spec.key] + [spec]
                ran = run_private_chain(config, specs, stage_dirs=stage_dirs, executor=executor, force=force)
            else:
                specs, ran = [spec], [run_stage(config, spec, force=force, stage_dirs=stage_dirs, executor=executor)]
            for done_spec, stats in zip(specs, ran):
                all_stats.append(stats)
                done_stage = by_key[done_spec.key]
                problem = nothing_left(config, done_spec, done_stage, stats)
                if problem:
                    raise UserError(problem)
                for warning in stage_warnings(config, done_spec, done_stage, stats):
                    stage_line(done_spec.folder, f"warning: {warning}", event="warning")
        executor_info = executor.describe()
    finally:
        executor.close()
    manifest = write_manifest(config, all_stats, time.perf_counter() - t0, executor_info)
    # The report reads the stages' raw removed documents (it shows them redacted, under
    # pseudonyms), so it comes before a stage purges what came before it.
    if config.run.report:
        from pipeline.report import write_report
        write_report(config.output_dir)
    for spec, stage in zip(config.stages, stages):
        privacy = stage.privacy()
        if privacy is None:
            continue
        fields = privacy.after_chain([(s.folder, stage_dirs[s.key]) for s in config.before(spec)])
        # A source's stage reports on its source: its fields go under manifest.sources.SOURCE.
        (manifest["sources"][spec.source] if spec.source else manifest).update(fields)
    if config.run.keep == "final":
        keep_final_only(stage_dirs)
    from pipeline.card import write_card
    from pipeline.finished_run import FinishedRun
    write_card(config, FinishedRun(config.output_dir, manifest))
    manifest["run_folder"] = run_folder_size(config, all_stats)
    write_json(config.output_dir / "manifest.json", manifest)
    return manifest


def keep_final_only(stage_dirs: dict[str, RunPath]) -> None:
    """`keep: final`: each stage keeps stats.json and removed/; its documents go (_SUCCESS
    first, _PURGED last), so the next run recomputes the stage."""
    for folder in stage_dirs.values():
        if folder.is_dir():
            purge_documents(folder, "its documents were removed after the run (keep: final); "
                                    "set keep: all to keep them")


def purged_but_current(config: Config, stage_dirs: dict[str, RunPath]) -> dict[str, str]:
    """The stages whose documents a later stage purges after each run that need not rerun
    although their data was purged, and that stage itself, each with the purger's key: it
    finished with the fingerprint the current config and input give, and so did each of them.
    (run_stage cannot skip it on its own: its input, the purged data, is gone.) Chain by chain:
    a multi-source run's sources each have theirs."""
    out: dict[str, str] = {}
    for source, chain in config.chains().items():
        purger = next((s for s in reversed(chain) if (privacy := bare_stage(s).privacy()) is not None
                       and privacy.purges_earlier_stages()), None)
        if purger is None:
            continue
        before = chain[:chain.index(purger)]
        if not any(is_purged(stage_dirs[s.key]) for s in before):
            continue
        input_fp = source_fingerprint(config.inputs[source])
        for spec in before + [purger]:
            folder = stage_dirs[spec.key]
            if not (is_done(folder) or is_purged(folder)):
                break
            input_fp = stage_fingerprint(make_stage(config, spec, stage_dirs), spec, input_fp, config)
            if read_json(folder / STATS).get("fingerprint") != input_fp:
                break
        else:
            if is_done(stage_dirs[purger.key]):
                out.update({s.key: purger.key for s in before + [purger]})
    return out


def stage_warnings(config: Config, spec: StageSpec, stage: Stage, stats: dict) -> list[str]:
    """What a finished stage's counts say the user should look at: a removal share over
    warn_removed_share (with its reasons and the config entry to tune), and what the stage
    itself finds (an empty validation set)."""
    out = []
    removed = sum(stats["removed"].values())
    if stats["docs_in"] and removed / stats["docs_in"] > config.run.warn_removed_share:
        reasons = ", ".join(f"{k}: {v:,}" for k, v in sorted(stats["removed"].items(), key=lambda kv: -kv[1])[:3])
        out.append(f"removed {removed:,} of {stats['docs_in']:,} documents ({reasons}); if that is more than you "
                   f"expect, look at the options of {spec.where} ('python -m pipeline inspect {config.output_dir} "
                   f"--stage {spec.key}' lists them; warn_removed_share sets this line's threshold)")
    return out + stage.output_warnings(stats)


def nothing_left(config: Config, spec: StageSpec, stage: Stage, stats: dict) -> str | None:
    """Why a run produced nothing: the stage that left no documents (or, by its own measure, no
    usable output), or None."""
    inp = config.inputs[spec.source] if config.reads_source(spec) or not config.multi_source else None
    if inp is None and stats["docs_in"] == 0:
        msg = f"stage '{spec.key}' got no documents"
    elif stats["docs_in"] == 0:
        msg = f"the input ({', '.join(inp.paths)}) holds no documents"
    elif stats["docs_out"] == 0:
        reasons = ", ".join(f"{k}: {v}" for k, v in sorted(stats["removed"].items(), key=lambda kv: -kv[1]))
        msg = f"stage '{spec.key}' removed all {stats['docs_in']} documents ({reasons}): nothing is left"
    else:
        msg = stage.empty_output_reason(stats)
        if msg is None:
            return None
    if inp is None:
        return msg
    text_input = inp.format == "text" or (inp.format == "auto" and any(
        str(p).endswith(".txt") for p in expand_paths(inp.paths)))
    if text_input and inp.text_unit == "file":
        msg += ("; plain text is read as one document per file (input.text_unit: file): if each line is "
                "a document, set input.text_unit: line or pass --text-unit line")
    return msg


# ---- manifest -------------------------------------------------------------------------------

def run_versions(stage_names) -> dict:
    """medprep's, Python's, and the versions of every engine the named stages declare."""
    engines = {"pyarrow"} | {e for name in stage_names for e in REGISTRY[name].engines}
    out = {"medprep": pipeline.__version__, "python": platform.python_version()}
    out.update({name: v for name, v in package_versions(sorted(engines)).items() if v is not None})
    return out


def write_manifest(config: Config, all_stats: list[dict], seconds: float, executor: dict | None = None) -> dict:
    manifest = {
        "executor": executor or {"kind": "local", "num_proc": config.run.num_proc},
        "config": config.raw,
        "config_file": config.source,
        "versions": run_versions(s.name for s in config.stages),
        "seconds": round(seconds, 3),
        "stages": all_stats,
        "docs_read": sum(s["docs_in"] for spec, s in zip(config.stages, all_stats) if config.reads_source(spec)),
    }
    if all_stats and "duplicate_ids" in all_stats[0]:
        manifest["duplicate_ids"] = all_stats[0]["duplicate_ids"]
    if config.multi_source:
        manifest["sources"] = source_funnels(config, all_stats)
    for spec, stats in zip(config.stages, all_stats):
        manifest.update(bare_stage(spec).manifest_fields(stats))
    write_json(config.output_dir / "manifest.json", manifest)
    return manifest


def source_funnels(config: Config, all_stats: list[dict]) -> dict:
    """Each source's documents through its chain and the shared tail: read, then in, out and
    removed by reason at every stage (the tail's from its counts by source)."""
    out = {}
    for name in config.source_names:
        steps = []
        for spec, stats in zip(config.stages, all_stats):
            if spec.source == name:
                counts = stats
            elif spec.source is None:
                counts = stats.get("docs_by_source", {}).get(name, {"docs_in": 0, "docs_out": 0, "removed": {}})
            else:
                continue
            steps.append({"stage": spec.key, "docs_in": counts["docs_in"], "docs_out": counts["docs_out"],
                          "removed": counts["removed"]})
        out[name] = {"input": config.inputs[name].paths, "docs_read": steps[0]["docs_in"] if steps else 0,
                     "docs_out": steps[-1]["docs_out"] if steps else 0, "stages": steps}
    return out
