"""A stage's input: shards (files on disk) and the machinery that hands them to the stage's
tasks on the run's executor. The runner builds it (pipeline/ingest.py for the source, the
previous stage's output shards otherwise) and binds it to the stage's output."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterator

import numpy as np
import pyarrow as pa

from pipeline.readers import ReaderBatch
from pipeline.runpath import RunPath, as_run_path, task_fields


@dataclass
class InputShard:
    """One unit of work: an Arrow shard (a previous stage's data/NAME.arrow, or a slice of
    the source cut by the driver) and the records the reader set aside in that slice."""
    name: str
    path: RunPath
    rows: int | None = None
    aside_path: RunPath | None = None
    # A finished stage's output (its texts stay in the run folder), not the source cut into
    # the first stage's input shards (removed when that stage commits).
    stage_output: bool = False

    def set_aside(self) -> list[tuple[str, str]]:
        if self.aside_path is None or not as_run_path(self.aside_path).exists():
            return []
        import json
        return [tuple(r) for r in json.loads(as_run_path(self.aside_path).read_text())]

    def to_dict(self) -> dict:
        return {"name": self.name, "path": str(self.path), "rows": self.rows,
                "aside_path": str(self.aside_path) if self.aside_path else None, "stage_output": self.stage_output}


class StageInputs:
    """The input of a stage: shards, re-iterable (global stages read it more than once).
    Bound to the stage's output by the runner: as each shard starts, the output is told its
    name (a global stage's writes land in the same-named output shard), and on the first pass
    the shard's set-aside records are handed over before its documents, so no stage has to
    remember them. `open_batches` (a callable giving ReaderBatches) stands for one shard."""

    def __init__(self, open_batches: Callable[[], Iterator[ReaderBatch]] | None = None, total: int | None = None,
                 *, shards: list[InputShard] | None = None, batch_size: int = 1000,
                 duplicate_ids: dict | None = None):
        self._open = open_batches
        self.shards = shards
        self.batch_size = batch_size
        self.total = total if total is not None or shards is None else \
            (sum(s.rows for s in shards) if all(s.rows is not None for s in shards) else None)
        self._set_aside_done = False
        self._duplicate_ids = duplicate_ids
        self.output = None
        self.executor = None
        self.task_seconds = 0.0          # wall time spent in shard tasks (the rest is the driver's)
        self.ingest_seconds = 0.0        # the driver reading the source into shards
        self.text_bytes = None           # the source's text, in UTF-8 bytes (first stage only)

    def bind(self, output, executor=None) -> None:
        self.output = output
        self.executor = executor

    def _materialize(self) -> None:
        """Batches given as a callable (tests, benchmarks) become one input shard on disk, in
        the output's temp folder, so shard tasks can read them like any other."""
        if self.shards is not None:
            return
        import json
        from pipeline.shards import ShardWriter
        if self.output is None:
            raise RuntimeError("StageInputs: bind(output) before running shard tasks")
        folder = self.output.tmp / "input"
        writer = ShardWriter(folder, None, 1 << 62)
        aside: list = []
        for batch in self._open():
            aside.extend(batch.set_aside)
            writer.write(batch.table)
        writer.close()
        if not writer.names:
            from pipeline.shards import ArrowFile
            ArrowFile(folder / "00000.arrow", None).close()
        aside_path = None
        if aside:
            aside_path = folder / "00000.aside.json"
            aside_path.write_text(json.dumps(aside))
        self.shards = [InputShard("00000", folder / "00000.arrow", writer.rows, aside_path)]

    def row_offsets(self) -> list[int]:
        """The global row number of each shard's first row (rows of all shards must be known)."""
        out, n = [], 0
        for shard in self.shards:
            out.append(n)
            n += shard.rows
        return out

    def map(self, stage, method: str, per_shard: list[dict] | None = None, **common) -> list[dict]:
        """Run `stage.<method>(task)` on every input shard on the run's executor (a worker
        holds one stage instance); results in shard order. A task is the shard's descriptor,
        its first global row (`row0`), the output folder, and `common` and `per_shard` values."""
        from pipeline.executor import LocalExecutor
        self._materialize()
        executor = self.executor or LocalExecutor(1)
        offsets = self.row_offsets()
        tasks = []
        for i, shard in enumerate(self.shards):
            task = {**shard.to_dict(), "row0": offsets[i], **task_fields(self.output.tmp),
                    "keep_removed_text": self.output.keep_removed_text, "batch_size": self.batch_size, **common}
            if per_shard is not None:
                task.update(per_shard[i])
            tasks.append(task)
        return self._timed(executor.map(stage, method, tasks))

    def _timed(self, results) -> list[dict]:
        import time
        t0 = time.perf_counter()
        out = list(results)
        self.task_seconds += time.perf_counter() - t0
        return out

    def map_tasks(self, stage, method: str, tasks: list[dict]) -> list[dict]:
        """Run `stage.<method>` on tasks that are not shards (a bucket partition, say)."""
        from pipeline.executor import LocalExecutor
        executor = self.executor or LocalExecutor(1)
        where = task_fields(self.output.tmp)
        return self._timed(executor.map(stage, method, [{**where, **t} for t in tasks]))

    def names(self) -> list[str]:
        if self.shards is None and self.output is not None:
            self._materialize()
        return [s.name for s in self.shards] if self.shards is not None else ["00000"]

    def _shard_batches(self) -> Iterator[tuple[str, Iterator[ReaderBatch], list]]:
        if self.shards is None:
            yield "00000", self._open(), []
            return
        from pipeline.shards import read_shard
        for shard in self.shards:
            yield shard.name, (ReaderBatch(t) for t in read_shard(shard.path, self.batch_size)), shard.set_aside()

    def batches(self, output=None) -> Iterator[tuple[pa.Table, list]]:
        """(documents, set-aside records) per batch, in input order; set-aside records on the
        first pass only."""
        output = output if output is not None else self.output
        first = not self._set_aside_done
        for name, batches, aside in self._shard_batches():
            if output is not None:
                output.begin_shard(name)
            aside = list(aside) if first else []
            for batch in batches:
                extra = batch.set_aside if first else []
                if batch.table.num_rows or aside or extra:
                    yield batch.table, aside + list(extra)
                    aside = []
            if aside:
                yield batch_of_nothing(), aside
        self._set_aside_done = True

    def tables(self, output=None) -> Iterator[pa.Table]:
        output = output if output is not None else self.output
        for table, set_aside in self.batches(output):
            if set_aside and output is not None:
                output.set_aside(set_aside)
            if table.num_rows:
                yield table

    def duplicate_ids(self) -> dict | None:
        """{"documents": rows whose id an earlier row already had, "ids": distinct such ids},
        counted while the source was cut into shards; None for a stage that does not read it."""
        return self._duplicate_ids


def batch_of_nothing() -> pa.Table:
    return pa.table({"id": pa.array([], pa.string()), "text": pa.array([], pa.string())})


class IdCounter:
    """Counts repeated document ids in bounded memory: an xxh3-64 hash per id (8 bytes per
    document, not the ids themselves), sorted once at the end."""

    def __init__(self):
        self.hashes: list[np.ndarray] = []

    def add(self, ids: pa.ChunkedArray | pa.Array) -> None:
        from xxhash import xxh3_64_intdigest
        values = [(i or "").encode() for i in ids.to_pylist()]
        self.hashes.append(np.fromiter(map(xxh3_64_intdigest, values), np.uint64, len(values)))

    def result(self) -> dict:
        if not self.hashes:
            return {"documents": 0, "ids": 0}
        h = np.sort(np.concatenate(self.hashes))
        repeat = h[1:] == h[:-1]
        first_repeat = repeat & np.concatenate([[True], ~repeat[:-1]]) if len(repeat) else repeat
        return {"documents": int(repeat.sum()), "ids": int(first_repeat.sum())}
