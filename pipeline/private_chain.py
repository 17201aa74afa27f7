"""A private source's stages up to the one that clears its PHI, run in memory in one task.

In a chain whose PHI stage purges the stages before it (phi's clinical profile: raw notes must
not stay behind), text the PHI stage has not cleaned is never written anywhere: each task
reads a slice of the source itself (the shard names of pipeline/ingest.py), runs every stage
before the PHI stage on each shard in memory, then the PHI stage, and writes only the PHI
stage's output. Each earlier stage still writes its own folder: stats.json, its per-shard
markers (counts) and removed/ (reasons under the PHI stage's pseudonyms, and, for the report,
a few removed texts per reason after the report's redaction), and it ends purged (_PURGED), as
a purge after the run leaves it. An interrupted run keeps the PHI stage's finished shards and
redoes the others; however it ends (an exception, Ctrl-C, SIGKILL), nothing raw is on disk.

Slices: a task per input file (several files, no `limit`); otherwise every task reads the whole
source in order and takes every W-th shard (W: the workers), so a single file still keeps all
workers busy (reading is a small part of the work: de-identification is ~100 notes per
CPU-second, parsing JSON Lines tens of thousands). Shard bytes depend on neither."""
from __future__ import annotations

import json
import os
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pipeline.documents import REMOVED_SCHEMA, REMOVED_SCHEMA_WITH_TEXT
from pipeline.errors import UserError
from pipeline.runpath import RunPath, load_npy, save_npy
from pipeline.shards import ArrowFile, ShardFiles, conform
from pipeline.tasks import InputShard, ShardTask, TaskOwner, kept_schema, shard_task

PURGED_WHY = ("its documents were never written: it ran in memory in the task of {purger}, which removes "
              "PHI (a private source's text is not written before that); set phi.keep_raw: true to keep them")


def purger_of(config, spec):
    """The stage that runs `spec` in memory with itself (a private chain's PHI stage that
    purges the stages before it), `spec` itself when it is that stage, or None."""
    from pipeline.binding import bare_stage
    chain = config.chains().get(spec.source) if config.multi_source else config.chains()[None]
    if chain is None or spec not in chain:
        return None
    for s in chain[chain.index(spec):]:
        privacy = bare_stage(s).privacy()
        if privacy is not None and privacy.purges_earlier_stages():
            return s
    return None


def private_chains(config) -> dict:
    """{the PHI stage's key: the stages it runs in memory before it} of every private chain."""
    from pipeline.binding import bare_stage
    from pipeline.stages.base import DocumentStage
    out = {}
    for spec in config.stages:
        if purger_of(config, spec) == spec:
            out[spec.key] = config.before(spec)
            whole = [s.key for s in out[spec.key] if not isinstance(bare_stage(s), DocumentStage)]
            if whole:
                raise UserError(f"{config.source}: stage '{whole[0]}' sees the whole corpus before '{spec.key}' in a "
                                "private source, so it would write text with PHI; move it after phi, or set "
                                "phi.keep_raw: true")
    return out


def private_prefix(config, spec, *, alone: bool = False) -> list | None:
    """The stages to run in memory with `spec` when it is a private chain's PHI stage (the ones
    before it in its chain, then it; only it with `alone`: given input files); None when it is
    not one. A stage before it is refused: its output would be text with PHI."""
    purger = purger_of(config, spec)
    if purger is None:
        return None
    if purger != spec:
        raise UserError(f"stage '{spec.key}' runs in memory inside '{purger.key}' (a private source: text with PHI "
                        f"is never written); run 'python -m pipeline.stage {purger.key} --config {config.source}', "
                        "or set phi.keep_raw: true to run and keep it on its own")
    return [spec] if alone else config.before(spec) + [spec]


@dataclass
class ChainPlan:
    """What a worker builds the chain from (picklable): the stages (class, config, ctx), each
    one's temp folder, the source and how it is cut."""
    stages: list
    folders: list
    input: dict
    shard_size: int
    batch_size: int
    source: str | None
    keep_removed_text: bool
    examples: int                        # removed texts per reason and shard kept (redacted) for the report
    ids_folder: str | None = None        # where the PHI stage's input ids go (its crosswalk's folder)
    where: str = ""
    stage_names: list = field(default_factory=list)


class PrivateChain(TaskOwner):
    """The task owner the executor runs: the chain's stages, set up once per worker."""

    def __init__(self, config: ChainPlan, ctx=None):
        self.config, self.ctx = config, ctx
        self.name = config.stage_names[-1] if config.stage_names else "private"
        self.stages = [cls(cfg, stage_ctx) for cls, cfg, stage_ctx in config.stages]
        self._redactor = None
        self._privacy = self.stages[-1].privacy()

    @property
    def workers_key(self) -> str:
        return self.name

    def setup(self) -> None:
        for stage in self.stages:
            stage.setup()

    @classmethod
    def loads_models(cls) -> bool:
        return True

    def runs_without_models(self, method, task) -> bool:
        return False

    @shard_task(phase=None)
    def run_slice(self, task: ShardTask) -> dict:
        from pipeline.config import InputConfig
        from pipeline.inputs import IdCounter
        from pipeline.progress import documents_done
        from pipeline.readers import read_documents
        plan, p = self.config, task.params
        cfg = InputConfig.model_validate({**plan.input, "paths": p["files"]})
        prefix = (f"{plan.source}." if plan.source else "") + (f"{p['index']:05d}-" if p["index"] is not None else "")
        done = set(p["done"])
        ids, text_bytes, shards, schema = IdCounter(), 0, [], None
        cpu = [0.0] * len(self.stages)
        for k, table, asides in shard_slices(read_documents(cfg, plan.batch_size), plan.shard_size, plan.source,
                                             plan.where):
            if k % p["stripes"] != p["stripe"]:
                continue
            name = f"{prefix}{k:05d}"
            if table.num_rows:
                ids.add(table["id"])
                text_bytes += pc.sum(pc.binary_length(table["text"])).as_py() or 0
                schema = schema or table.schema.to_string()
            if name not in done:
                self._run_shard(name, table, asides, cpu)
            else:
                documents_done(table.num_rows + len(asides))
            shards.append([name, table.num_rows])
        hashes = np.concatenate(ids.hashes) if ids.hashes else np.zeros(0, np.uint64)
        save_npy(plan.folders[0] / f"ids-{p['task']:05d}.npy", hashes)
        return {"shards": shards, "text_bytes": text_bytes, "cpu_seconds": cpu, "schema": schema}

    def _run_shard(self, name: str, table: pa.Table, asides: list, cpu: list) -> None:
        """Every stage on one shard, in memory; only the last one's documents are written."""
        from pipeline.progress import documents_done
        plan = self.config
        last = len(self.stages) - 1
        rows = table.num_rows + len(asides)
        for i, stage in enumerate(self.stages):
            t0 = time.process_time()
            if i == last:
                out = ShardFiles(plan.folders[i], name, keep_removed_text=plan.keep_removed_text)
                if plan.ids_folder is not None:
                    write_private_ids(Path(plan.ids_folder) / f"{name}.json", table["id"].to_pylist())
            else:
                out = MemoryShardFiles(plan.folders[i], name, self._private_removed, plan.examples)
            try:
                if i == 0:
                    out.set_aside(asides)
                totals: Counter = Counter()
                for start in range(0, table.num_rows, plan.batch_size):
                    batch = stage.process(table.slice(start, plan.batch_size))
                    if out.data.schema is None:
                        out.set_schema(kept_schema(batch, stage))
                    totals.update(stage.batch_stats(batch))
                    out.write(batch)
                    if i == last:
                        documents_done(batch.num_rows)
                if out.data.schema is None:
                    out.set_schema(kept_schema(table.schema.empty_table(), stage))
                out.close(dict(totals))
            except BaseException:
                out.abort()
                raise
            if i < last:
                table = out.data.table()
            cpu[i] += time.process_time() - t0
        documents_done(rows - table.num_rows)        # those removed before the last stage

    def _private_removed(self, removed: pa.Table, texts: list | None) -> pa.Table:
        """An earlier stage's removed rows as written: the PHI stage's names for their ids, and
        `texts` (a few, for the report) after the report's redaction."""
        out = self._privacy.private_removed(removed)
        if texts is None:
            return out
        wanted = [i for i, t in enumerate(texts) if t is not None]
        shown = [None] * len(texts)
        if wanted:
            if self._redactor is None:
                self._redactor = self._privacy.report_redactor() or (lambda ts: [None] * len(ts))
            for i, text in zip(wanted, self._redactor([texts[i] for i in wanted])):
                shown[i] = text
        return out.append_column("text", pa.array(shown, pa.string()))


def shard_slices(batches, shard_size: int, source: str | None, where: str):
    """(K, documents, set-aside records) of each `shard_size` slice of the source, as
    pipeline/ingest.py cuts it into shards: a batch's set-aside records go with the shard its
    first document lands in (the last shard for trailing ones); a source of set-aside records
    only is one empty shard. Columns as the first batch's (conformed)."""
    from pipeline.ingest import with_source
    if source is not None:
        batches = with_source(batches, source)
    schema = empty_schema = None
    parts, rows, k, total = [], 0, 0, 0
    asides: dict[int, list] = {}
    ready = None                               # a full shard, held until it is known not to be the last
    for batch in batches:
        if batch.set_aside:
            asides.setdefault(total // shard_size, []).extend(batch.set_aside)
        table = batch.table
        if not table.num_rows:
            empty_schema = empty_schema or table.schema
            continue
        schema = schema or table.schema
        table = conform(table, schema, where)
        while table.num_rows:
            if ready is not None:
                yield ready[0], ready[1], asides.pop(ready[0], [])
                ready = None
            part, table = table.slice(0, shard_size - rows), table.slice(shard_size - rows)
            parts.append(part)
            rows += part.num_rows
            total += part.num_rows
            if rows == shard_size:
                ready = (k, pa.concat_tables(parts).combine_chunks())
                parts, rows, k = [], 0, k + 1
    if rows:
        if ready is not None:
            yield ready[0], ready[1], asides.pop(ready[0], [])
        ready = (k, pa.concat_tables(parts).combine_chunks())
    if ready is not None:
        yield ready[0], ready[1], [r for idx in sorted(asides) if idx >= ready[0] for r in asides[idx]]
    elif asides:
        empty = (empty_schema or pa.schema([("id", pa.string()), ("text", pa.string())])).empty_table()
        yield 0, empty, [r for idx in sorted(asides) for r in asides[idx]]


class _MemoryFile:
    """A shard's kept documents held in memory (an earlier stage's data/, never written)."""

    def __init__(self, where):
        self.where, self.schema, self.parts, self.rows, self.pending_rows = where, None, [], 0, 0
        self.writer = self.sink = None

    def write(self, table: pa.Table) -> None:
        if table.num_rows:
            self.schema = self.schema or table.schema
            self.parts.append(conform(table, self.schema, self.where))
            self.rows += table.num_rows

    def close(self) -> None:
        pass

    def table(self) -> pa.Table:
        return pa.concat_tables(self.parts).combine_chunks() if self.parts else self.schema.empty_table()


class _PrivateRemovedFile:
    """removed/NAME.arrow of an earlier stage: each batch through `private` first (pseudonyms;
    the first `examples` texts per reason, redacted; no other text)."""

    def __init__(self, inner, private, examples: int):
        self.inner, self.private, self.examples = inner, private, examples
        self.shown: Counter = Counter()

    def write(self, table: pa.Table) -> None:
        texts = None
        if self.examples:
            raw = table["text"].to_pylist() if "text" in table.column_names else [None] * table.num_rows
            texts = []
            for reason, text in zip(table["reason"].to_pylist(), raw):
                keep = text is not None and self.shown[reason] < self.examples
                self.shown[reason] += keep
                texts.append(text if keep else None)
        self.inner.write(self.private(table, texts))

    def close(self) -> None:
        self.inner.close()

    def __getattr__(self, name):
        return getattr(self.inner, name)


class MemoryShardFiles(ShardFiles):
    """An earlier stage's shard: its kept documents stay in memory for the next stage; its
    removed rows and its marker are written, private."""

    def __init__(self, folder, name: str, private, examples: int):
        super().__init__(folder, name, keep_removed_text=bool(examples))
        self.data = _MemoryFile(self.folder)
        schema = REMOVED_SCHEMA_WITH_TEXT if examples else REMOVED_SCHEMA
        self.removed = _PrivateRemovedFile(ArrowFile(self.folder / "removed" / f"{name}.arrow", schema), private,
                                           examples)


def write_private_ids(path: Path, ids: list) -> None:
    """Ids only their owner reads (mode 0600), outside the run folder, under a temp name."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        with open(fd, "w", encoding="utf-8") as fh:
            json.dump(ids, fh)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)          # a part cut short would hold ids no crosswalk lists
        raise


class PrivateIds:
    """The PHI stage's input, as its finish_stats reads it (ids, shard by shard, in order),
    from the files the tasks wrote outside the run folder."""

    def __init__(self, folder: Path | None, names: list[str]):
        self.folder, self.names = folder, names

    def ids(self):
        for name in self.names:
            yield json.loads((self.folder / f"{name}.json").read_text(encoding="utf-8"))


# ---- the driver -----------------------------------------------------------------------------

def run_private_chain(config, specs: list, *, stage_dirs: dict, executor, input_paths=None,
                      output_dir=None, force: bool = False) -> list[dict]:
    """Run `specs` (a private chain's stages up to its PHI stage, or that stage alone on given
    files) as one pass; returns each one's stats, in order."""
    import pipeline
    from pipeline.binding import (
        make_stage,
        publish,
        source_fingerprint,
        source_input,
        stage_executor,
        stage_fingerprint,
        where_in_config,
    )
    from pipeline.config import expand_paths
    from pipeline.executor import task_usage
    from pipeline.progress import stage_line, stage_progress
    from pipeline.runpath import read_json
    from pipeline.shards import STATS, StageOutput, is_done, is_purged

    purger = specs[-1]
    folders = [stage_dirs[s.key] for s in specs]
    if output_dir is not None:
        folders[-1] = RunPath.of(output_dir, direct=config.output_dir.direct)
    stages = [make_stage(config, s, stage_dirs) for s in specs]
    privacy = stages[-1].privacy()
    privacy.check_private_files(where_in_config(config, purger), [config.output_dir, folders[-1]])
    input_cfg = source_input(config, purger, input_paths)
    fingerprints, fp = [], source_fingerprint(input_cfg)
    for spec, stage in zip(specs, stages):
        fp = stage_fingerprint(stage, spec, fp, config)
        fingerprints.append(fp)
    if not force and is_done(folders[-1]) and all(
            (is_done(f) or is_purged(f)) and read_json(f / STATS).get("fingerprint") == want
            for f, want in zip(folders, fingerprints)):
        for spec in specs:
            stage_line(spec.folder, "skipped: done with the same config and input", event="stage_skipped")
        return [read_json(f / STATS) for f in folders]
    try:
        outputs = [StageOutput(f, keep_removed_text=config.run.keep_removed_text, fingerprint=want)
                   for f, want in zip(folders, fingerprints)]
    except OSError as exc:
        raise UserError(f"{exc.filename}: cannot create the stage folder ({exc.strerror})") from None
    done = set.intersection(*(o.done_shards() for o in outputs))
    for spec in specs[:-1]:
        stage_line(spec.folder, f"running in memory in {purger.folder}'s task (a private source)",
                   event="stage_start")
    stage_line(purger.folder, "running", event="stage_start")
    if done:
        stage_line(purger.folder, f"resuming: {len(done)} shards finished before", event="stage_resume",
                   shards_done=len(done))
    ids_folder = None
    if privacy.crosswalk_file():
        ids_folder = Path(privacy.crosswalk_file()).with_name(Path(privacy.crosswalk_file()).name + ".parts")
    plan = ChainPlan(stages=[(type(s), s.config, s.ctx) for s in stages], folders=[o.tmp for o in outputs],
                     input=input_cfg.model_dump(), shard_size=config.run.shard_size,
                     batch_size=config.run.batch_size, source=purger.source,
                     keep_removed_text=config.run.keep_removed_text,
                     examples=_report_examples(),
                     ids_folder=str(ids_folder) if ids_folder else None, where=str(input_cfg.paths),
                     stage_names=[s.name for s in specs])
    for stage, spec in zip(stages, specs):
        stage.ctx.label = spec.folder
    owner = PrivateChain(plan)
    t0 = time.perf_counter()
    driver_cpu0, _ = task_usage()
    with stage_executor(config, executor) as executor, stage_progress(purger.folder, enabled=config.run.progress):
        files = expand_paths(input_cfg.paths)
        if not files:
            raise UserError(f"{', '.join(input_cfg.paths)}: no input file")
        groups = [(i, [str(f)]) for i, f in enumerate(files)] if len(files) > 1 and input_cfg.limit is None \
            else [(None, [str(f) for f in files])]
        workers = executor.workers_for(owner, 1 << 30)
        stripes = max(1, workers // len(groups))
        tasks, n = [], 0
        for index, paths in groups:
            records = count_records(paths, input_cfg)
            for stripe in range(stripes):
                # The slice as the task's shard: its documents (when the files tell) size the progress bar.
                rows = None if records is None else stripe_rows(records, config.run.shard_size, stripe, stripes)
                tasks.append(ShardTask(outputs[-1].tmp, InputShard(f"slice-{n:05d}", RunPath.of(paths[0]), rows),
                                       batch_size=config.run.batch_size,
                                       params={"files": paths, "index": index, "stripe": stripe, "stripes": stripes,
                                               "done": sorted(done), "task": n}))
                n += 1
        results = list(executor.map(owner.run_slice, tasks))
        workers_used = executor.stage_stats()
        usage = executor.stage_usage()
    seconds = time.perf_counter() - t0
    driver_cpu1, driver_rss = task_usage()
    schemas = {r["schema"] for r in results if r["schema"]}
    if len(schemas) > 1:
        raise UserError(f"{input_cfg.paths}: the files of a private source must have the same columns (the "
                        "stages before phi run in memory, file by file)")
    names = sorted(s[0] for r in results for s in r["shards"])
    from pipeline.inputs import IdCounter
    counter = IdCounter()
    for i in range(len(tasks)):
        path = outputs[0].tmp / f"ids-{i:05d}.npy"
        counter.hashes.append(load_npy(path))
        path.unlink()
    cpu = [sum(r["cpu_seconds"][i] for r in results) for i in range(len(specs))]
    share = [c / sum(cpu) if sum(cpu) else 1 / len(cpu) for c in cpu]
    total_cpu = driver_cpu1 - driver_cpu0 + usage.get("worker_cpu_seconds", 0.0)
    all_stats = []
    for i, (spec, stage, output) in enumerate(zip(specs, stages, outputs)):
        totals: Counter = Counter()
        for name in sorted(output.done_shards()):
            totals.update(output.marker(name)["stats"])
        last = i == len(specs) - 1
        inputs = PrivateIds(ids_folder, names) if last else None
        extra = stage.finish_stats(dict(totals), inputs)
        if i == 0:
            extra.update({"seconds_ingest": 0.0, "input_text_bytes": sum(r["text_bytes"] for r in results),
                          "duplicate_ids": counter.result()})
        where = {"source": spec.source, "folder": spec.folder} if config.multi_source else {}
        stats = output.commit({"stage": spec.name, "position": spec.position, **where,
                               "medprep": pipeline.__version__, "fingerprint": fingerprints[i],
                               "seconds": round(seconds * share[i], 3), "executor": executor.kind, **extra,
                               "seconds_tasks": round(seconds * share[i], 3), "executor_workers": workers_used,
                               "cpu_seconds": round(total_cpu * share[i], 3),
                               "driver_cpu_seconds": round((driver_cpu1 - driver_cpu0) * share[i], 3),
                               "driver_peak_rss_mb": driver_rss,
                               **({} if last else {"ran_in": purger.folder}),
                               **({k: v for k, v in usage.items() if k != "worker_cpu_seconds"} if last else {})},
                              input_shards=names,
                              purged=None if last else PURGED_WHY.format(purger=purger.folder))
        if output_dir is None:
            publish(stage, stage_dirs[spec.key], config.output_dir)
        rate = stats["docs_in"] / stats["seconds"] if stats["seconds"] else 0.0
        stage_line(spec.folder, f"in {stats['docs_in']} out {stats['docs_out']} removed "
                   f"{sum(stats['removed'].values())} in {stats['seconds']:.1f}s ({rate:,.0f} docs/s)",
                   event="stage_end", docs_in=stats["docs_in"], docs_out=stats["docs_out"],
                   removed=stats["removed"], seconds=stats["seconds"], rate=round(rate, 1))
        all_stats.append(stats)
    if ids_folder is not None and ids_folder.exists():
        for f in ids_folder.iterdir():
            f.unlink()
        ids_folder.rmdir()
    return all_stats


def count_records(paths: list[str], input_cfg) -> int | None:
    """The records of JSON Lines files (their non-blank lines; `limit` applied), counted without
    parsing; None for other formats."""
    from pipeline.readers import detect_format
    if input_cfg.format not in ("auto", "jsonl") or any(
            not p.endswith(".jsonl") or detect_format(Path(p)) != "jsonl" for p in paths):
        return None
    n = 0
    for path in paths:
        with open(path, "rb") as fh:
            n += sum(1 for line in fh if line.strip())
    return n if input_cfg.limit is None else min(n, input_cfg.limit)


def stripe_rows(records: int, shard_size: int, stripe: int, stripes: int) -> int:
    """The documents of the shards K with K % stripes == stripe."""
    shards = -(-records // shard_size)
    return sum(min(shard_size, records - k * shard_size) for k in range(stripe, shards, stripes))


def _report_examples() -> int:
    from pipeline.report import EXAMPLES_PER_REASON
    return EXAMPLES_PER_REASON
