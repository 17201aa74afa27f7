"""The stage contract: a small class with a validated Config, a setup() that loads models
once per worker, and either process(batch) (per-document) or run(inputs, output) (global)."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

import numpy as np
import pyarrow as pa
from pydantic import BaseModel, ConfigDict

from pipeline.errors import UserError
# The input side is runner machinery (pipeline/inputs.py); stages see it as `inputs` in run().
from pipeline.inputs import StageInputs


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
    # What a stage needs from the rest of the chain, resolved by the runner, so no stage reads
    # the whole config: the options of the stages it names in `needs` (those in the chain),
    # and files other stages made (pack: "tokenizer.json").
    upstream: dict = field(default_factory=dict)
    artifacts: dict = field(default_factory=dict)
    # The cache of per-document results (pipeline/cache.py): root, direct, max_mb, and the
    # stage's namespace where it caches (phi). Empty: no cache.
    cache: dict = field(default_factory=dict)


class Stage:
    name: ClassVar[str]
    summary: ClassVar[str] = ""
    Config: ClassVar[type[StageConfig]] = StageConfig
    kind: ClassVar[str] = "document"         # set by DocumentStage / GlobalStage
    # Files of the stage folder published into the run folder: {stage-relative: run-relative}.
    artifacts: ClassVar[dict[str, str]] = {}
    # Other stages whose options this one reads (ctx.upstream), when they are in the chain.
    needs: ClassVar[tuple[str, ...]] = ()
    # Whether the stage changes documents' text (normalize, phi): such a stage writes the texts;
    # any other refers to where they already are (store.py).
    rewrites_text: ClassVar[bool] = False

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

    @classmethod
    def model_files(cls, config: StageConfig) -> dict[str, str]:
        """Model files the stage loads, each with how to restore it when it is missing (a
        partial install or checkout): checked with the config, before any work."""
        return {}

    def output_fields(self) -> list[pa.Field]:
        """Annotation columns this stage adds, with their types (explicit features)."""
        return []

    def process(self, table: pa.Table) -> pa.Table:
        """Per-document stages: annotate the batch and set REASON on rows to remove."""
        raise NotImplementedError

    def batch_stats(self, table: pa.Table) -> dict[str, int]:
        """Counters summed over batches into the shard's marker, then over shards into
        stats.json (computed by the worker that ran the shard)."""
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
        ids = pa.chunked_array([t["id"] for t in read_shard(task["path"], None, ["id"])], pa.string())
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
    shard is a task for any worker (normalize, langid, perplexity, heuristics, toxicity, phi).

    A filter stage splits `process` into `score` (the model: score columns) and `decide`
    (thresholds: removal reasons). Its score columns are stored for every input row, so a
    rerun that changes only `threshold_options` decides again from them without the model."""
    kind: ClassVar[str] = "document"
    # Options that only decide which documents go; every other option changes the scores.
    threshold_options: ClassVar[tuple[str, ...]] = ()
    # The columns `score` adds (declared in output_fields): what is stored per input shard.
    score_columns: ClassVar[tuple[str, ...]] = ()

    def score(self, table: pa.Table) -> pa.Table:
        """The batch with its score columns (needs setup())."""
        raise NotImplementedError

    def decide(self, table: pa.Table) -> pa.Table:
        """The scored batch with REASON set on rows to remove (no model)."""
        raise NotImplementedError

    def process(self, table: pa.Table) -> pa.Table:
        return self.decide(self.score(table))

    # -- shard tasks of filter stages (run by the executor's workers) --
    def score_shard(self, task: dict) -> dict:
        """`process` on each batch of one shard, and the batches' score columns, in input row
        order, to the shard's score file (task["scores"]) for later threshold-only reruns."""
        from pipeline.executor import rewrite_shard
        parts = []

        def score_and_decide(table: pa.Table, row0: int) -> pa.Table:
            table = self.score(table)
            parts.append(table.select(list(self.score_columns)))
            return self.decide(table)
        marker = rewrite_shard(self, task, score_and_decide)
        # After the shard's marker: a shard without its score file only means the next
        # threshold-only rerun scores again.
        schema = self.score_schema()
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, schema) as writer:
            for part in parts:
                writer.write_table(part.cast(schema))
        scores_file(task).write_bytes(sink.getvalue().to_pybytes())
        return marker

    def redecide_shard(self, task: dict) -> dict:
        """`decide` on each batch of one shard with its stored score columns attached: the
        shard's output as `process` gives it, without setup() (the executor skips it)."""
        from pipeline.documents import set_column
        from pipeline.executor import rewrite_shard
        from pipeline.storage import ipc_stream_reader
        path = scores_file(task)
        stored = ipc_stream_reader(path).read_all()
        if task.get("rows") is not None and task["rows"] != stored.num_rows:
            raise RuntimeError(f"{path}: {stored.num_rows} rows of scores for {task['rows']} documents")
        first = task.get("row0", 0)

        def attach_and_decide(table: pa.Table, row0: int) -> pa.Table:
            part = stored.slice(row0 - first, table.num_rows)
            if part.num_rows != table.num_rows:
                raise RuntimeError(f"{path}: fewer rows of scores than documents in the shard")
            for name in self.score_columns:
                table = set_column(table, name, part[name].combine_chunks())
            return self.decide(table)
        return rewrite_shard(self, task, attach_and_decide)

    def score_schema(self) -> pa.Schema:
        declared = {f.name: f for f in self.output_fields()}
        return pa.schema([declared[name] for name in self.score_columns])


def scores_file(task: dict):
    """A shard's stored score columns: cache/scores/<stage>/<score fingerprint>/NAME.arrow in
    the run folder (or the config's cache.folder)."""
    from pipeline.storage import RunPath
    return RunPath.of(task["scores"], direct=bool(task.get("direct"))) / f"{task['name']}.arrow"


class GlobalStage(Stage):
    """A stage that sees the whole corpus (dedup, split, tokenizer, pack): `run(inputs,
    output)` maps shard tasks on the executor and combines their small results on the driver."""
    kind: ClassVar[str] = "global"
