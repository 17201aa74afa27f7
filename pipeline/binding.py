"""A stage bound to a run: its fingerprint (what reruns it), its instance with the RunContext
the run gives it, its folder, the executor it runs on, and the files it publishes. The runner
and pipeline/private_chain.py build stages with these."""
from __future__ import annotations

import os
from contextlib import contextmanager
from pathlib import Path

import pipeline
from pipeline.cache import run_cache
from pipeline.config import Config, StageSpec, expand_paths
from pipeline.digests import code_digest, content_digest, digest, plugin_code_digest
from pipeline.documents import SOURCE
from pipeline.runpath import RunPath
from pipeline.stages import REGISTRY
from pipeline.stages.base import DocumentStage, RunContext, Stage, engine_versions, option_files

# ---- fingerprints: a stage reruns when one changes -----------------------------------------

def source_fingerprint(input_cfg) -> str:
    files = expand_paths(input_cfg.paths)
    return digest(input_cfg.model_dump(), [(str(f), content_digest(f)) for f in files if f.exists()])


def stage_fingerprint(stage: Stage, spec: StageSpec, input_fp: str, config: Config, options: dict | None = None) -> str:
    # num_proc, batch_size and progress do not change a stage's output, so they are left out.
    # Files the stage reads (models, other stages' files) count by content, engines by version.
    run = config.run
    deps = stage.dependencies()
    file_digests = [(str(f), content_digest(f)) for f in option_files(stage) + list(deps.files) if f.exists()]
    options = spec.config.model_dump() if options is None else options
    plugin = plugin_code_digest(type(stage))          # a stage from another package: its code too
    return digest(pipeline.__version__, code_digest(), spec.name, options, input_fp, run.seed, run.shard_size,
                  run.keep_removed_text, file_digests, engine_versions(stage, deps.packages), *deps.values,
                  *([plugin] if plugin else []))


def score_fingerprint(stage: DocumentStage, spec: StageSpec, input_fp: str, config: Config) -> str:
    """What a filter stage's score columns depend on: its fingerprint without the options that
    only decide (thresholds), so a retuned threshold finds the stored scores again."""
    options = {k: v for k, v in spec.config.model_dump().items() if k not in stage.threshold_options}
    return stage_fingerprint(stage, spec, input_fp, config, options=options)


# ---- a stage and what it gets from the run --------------------------------------------------

def bare_stage(spec: StageSpec) -> Stage:
    """The stage of `spec` without a run context: for its declarations and hooks."""
    return REGISTRY[spec.name](spec.config, None)


def make_stage(config: Config, spec: StageSpec, stage_dirs: dict[str, RunPath]) -> Stage:
    """The stage of `spec` with its RunContext: the options of the stages it `needs`, where the
    files it `reads` are, its cache, and the columns the stages before it add."""
    stage = bare_stage(spec)
    earlier = config.before(spec)
    chain = earlier + [s for s in config.stages if s.source == spec.source and s.position > spec.position]
    stage.ctx = RunContext(
        run_dir=config.output_dir, seed=config.run.seed,
        upstream={s.name: s.config for s in reversed(chain) if s.name in stage.needs},
        read_paths=read_paths(config, stage, stage_dirs), cache=run_cache(config, stage.dependencies().cache_namespace),
        # A multi-source run's `source` column is the run's own (set from the config, replacing any
        # field of that name): an annotation, kept by a stage that drops the source's other fields.
        annotation_columns=tuple(f.name for s in earlier for f in bare_stage(s).output_fields())
        + ((SOURCE,) if config.multi_source else ()),
        mix={k: v.dump() for k, v in config.run.mix.items()} if config.run.mix else None)
    return stage


def read_paths(config: Config, stage: Stage, stage_dirs: dict[str, RunPath]) -> dict[str, RunPath | Path]:
    """Where each file the stage `reads` is: the publishing stage's own output if it has finished
    (its folder, wherever `pipeline.stage NAME --output` put it), else the run folder's published
    copy, else the file the publisher takes it from (`published_source`)."""
    out = {}
    for name, publisher in stage.reads.items():
        candidates = [config.output_dir / REGISTRY[publisher].publishes[name]]
        if config.has_stage(publisher):
            candidates.insert(0, stage_dirs[config.stage(publisher).key] / name)
            source = bare_stage(config.stage(publisher)).published_source(name)
            if source:
                candidates.append(Path(source))
        out[name] = next((c for c in candidates if c.exists()), config.output_dir / REGISTRY[publisher].publishes[name])
    return out


def where_in_config(config: Config, spec: StageSpec) -> str:
    return f"{config.source}: {spec.where}"


def stage_dirs_for(config: Config) -> dict[str, RunPath]:
    """Each stage's folder, by its key (`SOURCE.STAGE` for a source's stage)."""
    return {s.key: config.output_dir / "stages" / s.folder for s in config.stages}


@contextmanager
def stage_executor(config: Config, executor):
    """The run's executor (or one of the stage's own, closed after it); the stage's workers go
    when it ends."""
    own = executor is None
    if own:
        from pipeline.executor import make_executor
        executor = make_executor(config.run.executor, config.run.num_proc)
    try:
        yield executor
    finally:
        executor.end_stage()
        if own:
            executor.close()


def publish(stage: Stage, folder: RunPath, run_dir: RunPath) -> None:
    """Hard-link the files a stage publishes to their place in the run folder (on an object
    store: a server-side copy)."""
    for src_rel, dst_rel in stage.publishes.items():
        src, dst = folder / src_rel, run_dir / dst_rel
        if not src.exists():
            continue
        tmp = dst.with_name(dst.name + ".tmp") if dst.renames else dst
        tmp.rmtree()
        if src.is_dir():
            for f in src.rglob():
                link_or_copy(f, tmp / f.relative_to(src))
        else:
            link_or_copy(src, tmp)
        if tmp != dst:
            dst.rmtree()
            tmp.rename(dst)


def link_or_copy(src: RunPath, dst: RunPath) -> None:
    if src.local is not None and dst.local is not None:
        dst.parent.mkdir()
        try:
            os.link(src.local, dst.local)
            return
        except OSError:
            pass
    src.copy_to(dst)


def source_input(config: Config, spec: StageSpec, input_paths: list[str] | None):
    """The input a stage reads from the source: its source's, or the files given on the command
    line (`--input`: format detected; a shared tail's stage has no source of its own, so the
    input defaults)."""
    from pipeline.config import InputConfig
    from pipeline.errors import UserError
    input_cfg = config.inputs.get(spec.source) or InputConfig(paths=list(input_paths))
    if input_paths is not None:
        input_cfg = input_cfg.model_copy(update={"paths": list(input_paths), "format": "auto"})
        missing = [str(p) for p in expand_paths(input_cfg.paths) if not p.exists()]
        if missing:
            raise UserError(f"--input: not found: {', '.join(missing)}")
    return input_cfg
