"""A stage's input: shards (files on disk) and the machinery that hands them to the stage's
tasks on the run's executor. The runner builds it (pipeline/ingest.py for the source, the
previous stage's output shards otherwise) and binds it to the stage's output and executor."""
from __future__ import annotations

import os
import time
from typing import Iterator

import numpy as np
import pyarrow as pa

from pipeline.tasks import InputShard, ShardTask


class StageInputs:
    """The input of a stage: shards, re-iterable (global stages read it more than once), each
    shard the unit of a task. Bound by the runner to the stage's output (where tasks write)
    and to the run's executor (who runs them)."""

    def __init__(self, shards: list[InputShard], *, batch_size: int = 1000, duplicate_ids: dict | None = None):
        self.shards = shards
        self.batch_size = batch_size
        self.total = sum(s.rows for s in shards) if all(s.rows is not None for s in shards) else None
        self._duplicate_ids = duplicate_ids
        self.output = None
        self.executor = None
        self.task_seconds = 0.0          # wall time spent in shard tasks (the rest is the driver's)
        self.ingest_seconds = 0.0        # the driver reading the source into shards
        self.text_bytes = None           # the source's text, in UTF-8 bytes (first stage only)

    def bind(self, output, executor=None) -> None:
        self.output = output
        self.executor = executor

    def row_offsets(self) -> list[int]:
        """The global row number of each shard's first row (rows of all shards must be known)."""
        out, n = [], 0
        for shard in self.shards:
            out.append(n)
            n += shard.rows
        return out

    def shard_tasks(self, skip=frozenset(), scores=None, **params) -> list[ShardTask]:
        """A task per input shard not in `skip`, writing into the bound output's folder."""
        offsets = self.row_offsets() if self.total is not None else [0] * len(self.shards)
        return [ShardTask(self.output.tmp, shard, row0, self.batch_size, self.output.keep_removed_text, scores,
                          params) for shard, row0 in zip(self.shards, offsets) if shard.name not in skip]

    def map(self, method, per_shard: list[dict] | None = None, **common) -> list[dict]:
        """Run the bound task method (`stage.method`, marked @shard_task) on every input shard
        on the run's executor (a worker holds one stage instance); results in shard order.
        Each task's params are `common` and the shard's own `per_shard` values."""
        tasks = self.shard_tasks(**common)
        if per_shard is not None:
            tasks = [task.with_params(**extra) for task, extra in zip(tasks, per_shard)]
        return self.run_tasks(method, tasks)

    def map_each(self, method, **common):
        """As map, one result at a time as the shards finish (in shard order): a driver that
        folds the results keeps one, not all of them."""
        if self.executor is None:
            from pipeline.executor import LocalExecutor
            self.executor = LocalExecutor(1)
        t0 = time.perf_counter()
        try:
            yield from self.executor.map(method, self.shard_tasks(**common))
        finally:
            self.task_seconds += time.perf_counter() - t0

    def map_tasks(self, method, params: list[dict]) -> list[dict]:
        """Run the bound task method on tasks that are not shards (a bucket partition, say)."""
        return self.run_tasks(method, [ShardTask(self.output.tmp, batch_size=self.batch_size, params=p)
                                       for p in params])

    def run_tasks(self, method, tasks: list[ShardTask]) -> list[dict]:
        if self.executor is None:
            from pipeline.executor import LocalExecutor
            self.executor = LocalExecutor(1)
        t0 = time.perf_counter()
        out = list(self.executor.map(method, tasks))
        self.task_seconds += time.perf_counter() - t0
        return out

    def driver_threads(self, stage) -> int:
        """The threads the stage's own work on the driver may use (a tokenizer learning its
        merges): the workers the run gives the stage, which wait for it meanwhile, at most
        this machine's cores."""
        if self.executor is None:
            return 1
        return max(1, min(self.executor.workers_for(stage, os.cpu_count() or 1), os.cpu_count() or 1))

    def phase(self, name: str) -> None:
        """A step of the stage on the driver (clustering), for its progress: no tasks."""
        from pipeline.progress import current
        if current() is not None:
            current().phase(name)

    def names(self) -> list[str]:
        return [s.name for s in self.shards]

    def tables(self) -> Iterator[pa.Table]:
        """The documents, shard by shard in input order, `batch_size` rows at most per table."""
        for _, table in self.shard_tables():
            yield table

    def shard_tables(self) -> Iterator[tuple]:
        """(shard, table) for the documents, as `tables()`: a caller that needs each table's shard
        (its source, in a multi-source run)."""
        from pipeline.shards import read_shard
        for shard in self.shards:
            for table in read_shard(shard.path, self.batch_size):
                if table.num_rows:
                    yield shard, table

    def ids(self) -> Iterator[list]:
        """The documents' ids, shard by shard in input order."""
        from pipeline.shards import read_shard
        for shard in self.shards:
            for table in read_shard(shard.path, None, ["id"]):
                yield table["id"].to_pylist()

    def duplicate_ids(self) -> dict | None:
        """{"documents": rows whose id an earlier row already had, "ids": distinct such ids},
        counted while the source was cut into shards; None for a stage that does not read it."""
        return self._duplicate_ids


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
