"""The stage contract: a small class with a validated Config, a setup() that loads models
once per worker, and either process(batch) (per-document) or run(inputs, output) (global)."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable, ClassVar, Iterator

import numpy as np
import pyarrow as pa
from pydantic import BaseModel, ConfigDict

from pipeline.errors import UserError
from pipeline.readers import ReaderBatch


class StageFailed(UserError):
    """A stage could not run: its setup failed (a model file that is not a model) or a worker
    process died. One line naming the stage and the cause."""


class StageConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


@dataclass
class RunContext:
    run_dir: Path            # the run folder (config output_dir)
    stage_dir: Path          # where this stage's folder goes
    seed: int
    batch_size: int
    shard_size: int
    num_proc: int
    progress: bool
    config: object = None    # the whole pipeline.config.Config, for stages that read others' options


@dataclass
class InputShard:
    """One unit of work: an Arrow shard (a previous stage's data/NAME.arrow, or a slice of
    the source cut by the driver) and the records the reader set aside in that slice."""
    name: str
    path: Path
    rows: int | None = None
    aside_path: Path | None = None

    def set_aside(self) -> list[tuple[str, str]]:
        if self.aside_path is None or not Path(self.aside_path).exists():
            return []
        import json
        return [tuple(r) for r in json.loads(Path(self.aside_path).read_text(encoding="utf-8"))]

    def to_dict(self) -> dict:
        return {"name": self.name, "path": str(self.path), "rows": self.rows,
                "aside_path": str(self.aside_path) if self.aside_path else None}


class StageInputs:
    """The input of a stage: shards, re-iterable (global stages read it more than once).
    Bound to the stage's output by the runner: as each shard starts, the output is told its
    name (a global stage's writes land in the same-named output shard), and on the first pass
    the shard's set-aside records are handed over before its documents, so no stage has to
    remember them. `open_batches` (a callable giving ReaderBatches) stands for one shard."""

    def __init__(self, open_batches: Callable[[], Iterator[ReaderBatch]] | None = None, total: int | None = None,
                 count_ids: bool = False, *, shards: list[InputShard] | None = None, batch_size: int = 1000,
                 duplicate_ids: dict | None = None):
        self._open = open_batches
        self.shards = shards
        self.batch_size = batch_size
        self.total = total if total is not None or shards is None else \
            (sum(s.rows for s in shards) if all(s.rows is not None for s in shards) else None)
        self._set_aside_done = False
        self._ids = IdCounter() if count_ids else None
        self._duplicate_ids = duplicate_ids
        self.output = None
        self.executor = None
        self.task_seconds = 0.0          # wall time spent in shard tasks (the rest is the driver's)
        self.ingest_seconds = 0.0        # the driver reading the source into shards

    def bind(self, output, executor=None) -> None:
        self.output = output
        self.executor = executor

    def _materialize(self) -> None:
        """Batches given as a callable (tests, benchmarks) become one input shard on disk, in
        the output's temp folder, so shard tasks can read them like any other."""
        if self.shards is not None:
            return
        import json
        from pipeline.store import ShardWriter
        if self.output is None:
            raise RuntimeError("StageInputs: bind(output) before running shard tasks")
        folder = Path(self.output.tmp) / "input"
        writer = ShardWriter(folder, None, 1 << 62)
        aside: list = []
        for batch in self._open():
            aside.extend(batch.set_aside)
            writer.write(batch.table)
        writer.close()
        if not writer.names:
            from pipeline.store import ArrowFile
            ArrowFile(folder / "00000.arrow", None).close()
        aside_path = None
        if aside:
            aside_path = folder / "00000.aside.json"
            aside_path.write_text(json.dumps(aside), encoding="utf-8")
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
        executor = getattr(self, "executor", None) or LocalExecutor(1)
        offsets = self.row_offsets()
        tasks = []
        for i, shard in enumerate(self.shards):
            task = {**shard.to_dict(), "row0": offsets[i], "folder": str(self.output.tmp),
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
        executor = getattr(self, "executor", None) or LocalExecutor(1)
        folder = str(self.output.tmp)
        return self._timed(executor.map(stage, method, [{"folder": folder, **t} for t in tasks]))

    def names(self) -> list[str]:
        if self.shards is None and self.output is not None:
            self._materialize()
        return [s.name for s in self.shards] if self.shards is not None else ["00000"]

    def _shard_batches(self) -> Iterator[tuple[str, Iterator[ReaderBatch], list]]:
        if self.shards is None:
            yield "00000", self._open(), []
            return
        from pipeline.store import read_shard
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
                if first and self._ids is not None:
                    self._ids.add(batch.table["id"])
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
        or None when ids were not counted (or not read yet)."""
        if self._duplicate_ids is not None:
            return self._duplicate_ids
        return self._ids.result() if self._ids is not None and self._set_aside_done else None


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


class Stage:
    name: ClassVar[str]
    summary: ClassVar[str] = ""
    Config: ClassVar[type[StageConfig]] = StageConfig
    kind: ClassVar[str] = "document"         # set by DocumentStage / GlobalStage
    # Files of the stage folder published into the run folder: {stage-relative: run-relative}.
    artifacts: ClassVar[dict[str, str]] = {}

    def __init__(self, config: StageConfig, ctx: RunContext):
        self.config = config
        self.ctx = ctx

    def setup(self) -> None:
        """Load models; called once per worker process before the first batch."""

    def fingerprint_files(self) -> list[Path]:
        """Files the stage reads besides its input (models, a tokenizer.json): their content,
        not their name, goes into the stage's fingerprint. Every `*_path` option, and a
        model's `.json` side file (perplexity's bucket cutoffs) when there is one."""
        files = []
        for key, value in self.config.model_dump().items():
            if key.endswith("_path") and isinstance(value, str) and value:
                path = Path(value)
                files.append(path)
                side = path.with_suffix(".json")
                if side != path and side.is_file():
                    files.append(side)
        return files

    def output_fields(self) -> list[pa.Field]:
        """Annotation columns this stage adds, with their types (explicit features)."""
        return []

    def process(self, table: pa.Table) -> pa.Table:
        """Per-document stages: annotate the batch and set REASON on rows to remove."""
        raise NotImplementedError

    def batch_stats(self, table: pa.Table) -> dict[str, int]:
        """Counters summed over batches into stats.json (computed in the main process)."""
        return {}

    def finish_stats(self, totals: dict) -> dict:
        return totals

    def run(self, inputs: StageInputs, output) -> dict:
        """Global stages: see the whole input; return extra stats. The work that is per shard
        (hashing, signatures, tokenizing, writing the output shards) goes to the executor
        through `inputs.map(self, method)`; the driver combines the small results."""
        raise NotImplementedError

    # -- shard tasks global stages share (run by the executor's workers) --
    def copy_shard(self, task: dict) -> dict:
        """The input shard, unchanged, as this stage's output shard."""
        from pipeline.executor import rewrite_shard
        return rewrite_shard(self, task, lambda table, row0: table)

    def ids_of_rows(self, task: dict) -> dict:
        """Ids of the given rows (shard-local numbers) of the input shard."""
        from pipeline.store import read_shard
        wanted = np.asarray(task["rows"], np.int64)
        if not len(wanted):
            return {"ids": []}
        ids = pa.chunked_array([t["id"] for t in read_shard(Path(task["path"]), None, ["id"])], pa.string())
        return {"ids": ids.take(pa.array(wanted)).to_pylist()}

    def apply_marks(self, task: dict) -> dict:
        """The input shard with the given rows (shard-local) removed with `reason` and
        `duplicate_of`: the last step of a deduplication."""
        from pipeline.documents import DUPLICATE_OF, REASON
        from pipeline.executor import rewrite_shard
        rows = np.asarray(task["removed_rows"], np.int64)
        dup_of = np.asarray(task["duplicate_of"], object)
        first = task["row0"]

        def mark(table: pa.Table, row0: int) -> pa.Table:
            lo = row0 - first
            sel = (rows >= lo) & (rows < lo + table.num_rows)
            if not sel.any():
                return table
            reason = np.full(table.num_rows, None, object)
            dup = np.full(table.num_rows, None, object)
            reason[rows[sel] - lo] = task["reason"]
            dup[rows[sel] - lo] = dup_of[sel]
            table = table.append_column(REASON, pa.array(reason, pa.string()))
            return table.append_column(DUPLICATE_OF, pa.array(dup, pa.string()))
        return rewrite_shard(self, task, mark)


class DocumentStage(Stage):
    """A per-document stage: `process(batch)` is a pure function of the batch, so each input
    shard is a task for any worker (normalize, langid, perplexity, heuristics, toxicity, phi)."""
    kind: ClassVar[str] = "document"


class GlobalStage(Stage):
    """A stage that sees the whole corpus (dedup, split, tokenizer, pack): `run(inputs,
    output)` maps shard tasks on the executor and combines their small results on the driver."""
    kind: ClassVar[str] = "global"
