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


class StageInputs:
    """The input of a stage: re-iterable batches (global stages read it more than once).
    Records the reader set aside are handed to the output once, on the first pass. With
    `count_ids` (a stage reading the source), the first pass also counts repeated ids."""

    def __init__(self, open_batches: Callable[[], Iterator[ReaderBatch]], total: int | None,
                 count_ids: bool = False):
        self._open = open_batches
        self.total = total
        self._set_aside_done = False
        self._ids = IdCounter() if count_ids else None

    def batches(self, output=None) -> Iterator[tuple[pa.Table, list]]:
        """(documents, set-aside records) per reader batch, in input order. The caller hands
        the set-aside records to the output itself, so they land in removed/ in the same
        place whatever the number of workers."""
        first = output is not None and not self._set_aside_done
        for batch in self._open():
            if first and self._ids is not None:
                self._ids.add(batch.table["id"])
            if batch.table.num_rows or (first and batch.set_aside):
                yield batch.table, batch.set_aside if first else []
        if output is not None:
            self._set_aside_done = True

    def tables(self, output=None) -> Iterator[pa.Table]:
        for table, set_aside in self.batches(output):
            if set_aside:
                output.set_aside(set_aside)
            if table.num_rows:
                yield table

    def duplicate_ids(self) -> dict | None:
        """{"documents": rows whose id an earlier row already had, "ids": distinct such ids},
        or None when ids were not counted (or not read yet)."""
        return self._ids.result() if self._ids is not None and self._set_aside_done else None


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
    kind: ClassVar[str] = "document"         # "document": pure function of a batch; "global"
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
        """Global stages: see the whole input; return extra stats."""
        raise NotImplementedError
