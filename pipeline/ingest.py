"""The source, cut into a first stage's input shards (in <stage>.tmp/input/, which commit
removes), with the records the reader set aside in each and the repeated-id count.

Several input files and no `limit`: one task per file on the executor (PubMed's baseline is
1,334 files), shards named FILE-K (file index, then K-th `shard_size` slice of that file).
One file, or a `limit` (which cuts across files in order): the driver reads the source in
order, shards named K. Either way names sort in source order, and the bytes do not depend on
the executor or the number of workers. Kept across an interrupted run of the same
fingerprint, so a resumed first stage does not read the source again."""
from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pyarrow.compute as pc

from dataclasses import replace

from pipeline.documents import SOURCE
from pipeline.inputs import IdCounter, StageInputs
from pipeline.readers import expand_paths, read_documents
from pipeline.runpath import RunPath, load_npy, read_json, save_npy, write_json
from pipeline.shards import ArrowFile, ShardWriter
from pipeline.tasks import InputShard, ShardTask

DONE = "_DONE.json"


def _write_shards(batches, folder: RunPath, shard_size: int, prefix: str, ids: IdCounter,
                  source: str | None = None) -> tuple[list, object, int]:
    """Documents to shards of `shard_size` rows; a batch's set-aside records go to the shard its
    first document lands in (the last shard for trailing ones). Returns ([name, rows], schema,
    the documents' text in UTF-8 bytes: what the run folder's size is compared with)."""
    text_bytes = 0
    if source is not None:
        # A multi-source run: every document carries its source, every shard's name starts with it.
        prefix = f"{source}.{prefix}"
        batches = _with_source(batches, source)
    writer = ShardWriter(folder, None, shard_size, prefix=prefix)
    asides: dict[int, list] = {}
    empty_schema = None
    for batch in batches:
        if batch.set_aside:
            asides.setdefault(writer.rows // shard_size, []).extend(batch.set_aside)
        if batch.table.num_rows:
            ids.add(batch.table["id"])
            text_bytes += pc.sum(pc.binary_length(batch.table["text"])).as_py() or 0
            writer.write(batch.table)
        elif empty_schema is None:
            empty_schema = batch.table.schema
    writer.close()
    names = list(writer.names)
    counts = [min(shard_size, writer.rows - i * shard_size) for i in range(len(names))]
    if not names and asides:
        # Nothing but set-aside records: one empty shard carries them.
        ArrowFile(folder / f"{prefix}00000.arrow", empty_schema).close()
        names, counts = [f"{prefix}00000"], [0]
    last = max(len(names) - 1, 0)
    by_shard: dict[int, list] = {}
    for idx, rows in sorted(asides.items()):
        by_shard.setdefault(min(idx, last), []).extend(rows)
    for idx, rows in by_shard.items():
        write_json(folder / f"{names[idx]}.aside.json", rows)
    return [[n, c] for n, c in zip(names, counts)], writer.schema, text_bytes


def _with_source(batches, source: str):
    """The reader's batches with a `source` column (the source's name on every row)."""
    import pyarrow as pa
    for batch in batches:
        table = batch.table
        column = pa.array([source] * table.num_rows, pa.string())
        if SOURCE in table.column_names:
            table = table.set_column(table.column_names.index(SOURCE), SOURCE, column)
        else:
            table = table.append_column(SOURCE, column)
        yield replace(batch, table=table)


class SourceReader:
    """Reads one input file into shards: the task an executor runs per file. Not a stage, but
    what an executor wraps has the same shape (name, config, ctx, setup, task methods)."""
    name = "read"
    methods_without_setup = frozenset()
    phase_names = {"ingest_file": "reading the source"}

    def __init__(self, config=None, ctx=None):
        self.config, self.ctx = config, ctx

    def setup(self) -> None:
        """Nothing to load."""

    def ingest_file(self, task: ShardTask) -> dict:
        from pipeline.config import InputConfig
        p = task.params
        cfg = InputConfig.model_validate({**p["input"], "paths": [p["file"]]})
        ids = IdCounter()
        shards, schema, text_bytes = _write_shards(read_documents(cfg, task.batch_size), task.folder,
                                                   p["shard_size"], f"{p['index']:05d}-", ids, p.get("source"))
        hashes = np.concatenate(ids.hashes) if ids.hashes else np.zeros(0, np.uint64)
        save_npy(task.folder / f"ids-{p['index']:05d}.npy", hashes)
        return {"shards": shards, "schema": schema.to_string() if schema is not None else None,
                "text_bytes": text_bytes}


def reads_on_driver(input_cfg) -> bool:
    """Whether ingest_source reads on the driver whatever the executor: a `limit` (documents
    in order) or a single file."""
    if input_cfg.limit is not None:
        return True
    try:
        return len(expand_paths(input_cfg.paths)) <= 1
    except Exception:
        return False                          # ingest_source names the problem


def ingest_source(input_cfg, run, folder: RunPath, executor=None, source: str | None = None) -> StageInputs:
    """The source cut into shards in `folder` (`source`: a multi-source run's source name)."""
    done = folder / DONE
    t0 = time.perf_counter()
    if not done.exists():
        folder.rmtree()
        folder.mkdir()
        files = expand_paths(input_cfg.paths)
        info = _ingest_per_file(input_cfg, run, folder, files, executor, source) \
            if executor is not None and not reads_on_driver(input_cfg) else None
        if info is None:
            from pipeline.progress import current
            if current() is not None:
                current().phase("reading the source")
            ids = IdCounter()
            shards, _, text_bytes = _write_shards(read_documents(input_cfg, run.batch_size), folder, run.shard_size,
                                                  "", ids, source)
            info = {"shards": shards, "duplicate_ids": ids.result(), "text_bytes": text_bytes}
        info["seconds"] = round(time.perf_counter() - t0, 3)
        write_json(done, info)
    info = read_json(done)
    shards_in = [InputShard(name, folder / f"{name}.arrow", rows,
                            folder / f"{name}.aside.json" if (folder / f"{name}.aside.json").exists() else None)
                 for name, rows in info["shards"]]
    inputs = StageInputs(shards=shards_in, batch_size=run.batch_size, duplicate_ids=info["duplicate_ids"])
    inputs.ingest_seconds = info.get("seconds", 0.0)
    inputs.text_bytes = info.get("text_bytes")
    return inputs


def _ingest_per_file(input_cfg, run, folder: RunPath, files: list[Path], executor, source=None) -> dict | None:
    """One task per file. Files whose columns differ are read again in order by the driver,
    which conforms them to the first file's columns (or names the file that cannot be)."""
    reader = SourceReader()
    params = {"shard_size": run.shard_size, "input": input_cfg.model_dump(), "source": source}
    tasks = [ShardTask(folder, batch_size=run.batch_size, params={**params, "file": str(f), "index": i})
             for i, f in enumerate(files)]
    results = list(executor.map(reader, "ingest_file", tasks))
    schemas = {r["schema"] for r in results if r["schema"] is not None}
    if len(schemas) > 1:
        folder.rmtree()
        folder.mkdir()
        return None
    ids = IdCounter()
    ids.hashes = [load_npy(folder / f"ids-{i:05d}.npy") for i in range(len(files))]
    for i in range(len(files)):
        (folder / f"ids-{i:05d}.npy").unlink()
    return {"shards": [s for r in results for s in r["shards"]], "duplicate_ids": ids.result(),
            "text_bytes": sum(r["text_bytes"] for r in results), "parallel_files": len(files)}
