"""The stage contract: a small class with a validated Config, a setup() that loads models
once per worker, and either process(batch) (per-document) or run(inputs, output) (global)."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable, ClassVar, Iterator

import pyarrow as pa
from pydantic import BaseModel, ConfigDict

from pipeline.readers import ReaderBatch


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
    Records the reader set aside are handed to the output once, on the first pass."""

    def __init__(self, open_batches: Callable[[], Iterator[ReaderBatch]], total: int | None):
        self._open = open_batches
        self.total = total
        self._set_aside_done = False

    def tables(self, output=None) -> Iterator[pa.Table]:
        for batch in self._open():
            if output is not None and not self._set_aside_done and batch.set_aside:
                output.set_aside(batch.set_aside)
            if batch.table.num_rows:
                yield batch.table
        if output is not None:
            self._set_aside_done = True


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
