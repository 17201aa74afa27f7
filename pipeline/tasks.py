"""Shard tasks: the unit of work an executor hands to a worker, and the body every task that
rewrites a shard shares.

A `ShardTask` is one input shard (or, for a global stage's reduce step, none: a bucket
partition, a final shard to write) plus where the stage writes and the stage's own values in
`params`. It travels as a pickle to local worker processes and as its JSON form (`to_json`,
`from_json`) to Ray actors; nothing else builds or reads a task's fields.

`rewrite_shard` reads one input shard and writes its output shard (data/NAME.arrow,
removed/NAME.arrow, then the marker shards/NAME.json: pipeline/shards.py) with a stage's
transform of each batch. Per-document stages, score and re-decide tasks, and the last map of
every global stage are this one function."""
from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import pyarrow as pa

from pipeline.runpath import RunPath, as_run_path


def peak_rss_mb() -> int:
    """This process's peak resident memory so far, in MB (Linux reports kilobytes)."""
    import resource
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)


@dataclass(frozen=True)
class TaskKind:
    """What the executor needs to know of a task method besides the method itself: what
    progress calls its phase (None: none of its own) and whether it needs the stage set up
    (its models loaded) in the worker that runs it."""
    phase: str | None
    loads_models: bool = True


def shard_task(method: Callable | None = None, *, phase: str | None = "", loads_models: bool = True):
    """Marks a stage method `method(self, task: ShardTask) -> dict` as a task an executor may run
    in a worker: `executor.map(stage.method, tasks)`. `phase`: what progress calls it (default:
    its name without `_shard`); `loads_models=False`: workers run it without setup()."""
    def mark(func: Callable) -> Callable:
        name = func.__name__.removesuffix("_shard").replace("_", " ") if phase == "" else phase
        func.shard_task = TaskKind(name, loads_models)
        return func
    return mark(method) if method is not None else mark


class TaskOwner:
    """What an executor runs task methods of: a stage, or the source reader. The executor asks
    these and nothing else of it."""
    name: str = ""

    def setup(self) -> None:
        """Load what the tasks need, once per worker, before the first task that loads models."""

    @classmethod
    def loads_models(cls) -> bool:
        """Whether setup() loads anything. When the worker moves on, an owner that did is followed
        by a full garbage collection, so its models go before the next one loads its own; the
        collection walks every object of the worker (40-90 ms), so it is not paid otherwise."""
        return True

    def runs_without_models(self, method, task) -> bool:
        """Whether the bound task method on `task` loads no model in the process that runs it:
        the local executor's driver runs such tasks itself while its workers start. A task
        marked loads_models=False, or an owner whose setup() loads nothing."""
        return not method.shard_task.loads_models or not self.loads_models()

    @property
    def workers_key(self) -> str:
        """The name under which a run's per-stage worker counts (executor.workers) give this
        owner its workers."""
        return self.name


def task_parts(method) -> tuple[object, Callable, TaskKind]:
    """(the object, the function, its TaskKind) of a bound task method; TypeError for anything
    else (an unmarked method, a plain function)."""
    owner, func = getattr(method, "__self__", None), getattr(method, "__func__", None)
    kind = getattr(func, "shard_task", None)
    if owner is None or not isinstance(kind, TaskKind):
        raise TypeError(f"{method!r}: not a task method (a stage method marked @shard_task)")
    return owner, func, kind


@dataclass(frozen=True)
class InputShard:
    """One Arrow shard of a stage's input (a previous stage's data/NAME.arrow, or a slice of the
    source cut by the driver) and the records the reader set aside in that slice."""
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
        return [tuple(r) for r in json.loads(as_run_path(self.aside_path).read_text())]

    def to_dict(self) -> dict:
        return {"name": self.name, "path": str(self.path), "rows": self.rows,
                "aside_path": str(self.aside_path) if self.aside_path else None, "stage_output": self.stage_output}

    @classmethod
    def from_dict(cls, d: dict) -> "InputShard":
        return cls(d["name"], RunPath.of(d["path"]), d["rows"],
                   RunPath.of(d["aside_path"]) if d["aside_path"] else None, d["stage_output"])


@dataclass(frozen=True)
class ShardTask:
    """What a worker runs a stage's task method on."""
    folder: RunPath                       # the stage's output folder (its temp folder until commit)
    shard: InputShard | None = None       # None: a task that is not one input shard
    row0: int = 0                         # global number of the shard's first row
    batch_size: int = 1000
    keep_removed_text: bool = False
    scores: RunPath | None = None         # a filter stage's folder of stored score columns
    params: dict = field(default_factory=dict)    # the stage's own values for this task (JSON)

    def with_params(self, **params) -> "ShardTask":
        return replace(self, params={**self.params, **params})

    def to_json(self) -> str:
        return json.dumps({"folder": str(self.folder), "direct": self.folder.direct,
                           "shard": self.shard.to_dict() if self.shard else None, "row0": self.row0,
                           "batch_size": self.batch_size, "keep_removed_text": self.keep_removed_text,
                           "scores": str(self.scores) if self.scores else None, "params": self.params})

    @classmethod
    def from_json(cls, text: str) -> "ShardTask":
        d = json.loads(text)
        direct = d["direct"]
        return cls(RunPath.of(d["folder"], direct=direct), InputShard.from_dict(d["shard"]) if d["shard"] else None,
                   d["row0"], d["batch_size"], d["keep_removed_text"],
                   RunPath.of(d["scores"], direct=direct) if d["scores"] else None, d["params"])


def kept_schema(table: pa.Table, stage) -> pa.Schema:
    """The stage's output schema: input columns plus its declared annotation fields."""
    declared = {f.name: f for f in stage.output_fields()}
    fields = [declared.get(f.name, f) for f in table.schema if not f.name.startswith("_")]
    # Declared columns missing from the first batch still belong to the schema (null there).
    fields += [f for name, f in declared.items() if name not in table.schema.names]
    # A column that is all-null in the first batch has no type yet: strings are the safe guess.
    return pa.schema([pa.field(f.name, pa.string()) if pa.types.is_null(f.type) else f for f in fields])


def rewrite_shard(stage, task: ShardTask, transform) -> dict:
    """Read one input shard, write `transform(table, first_row)` of each batch to
    data/NAME.arrow and removed/NAME.arrow (rows with a reason), then the marker. The
    shard's set-aside records go first. Returns the marker (counts and batch stats)."""
    from pipeline.shards import ShardFiles, read_shard_refs, shard_schema
    shard = task.shard
    # A stage that does not change the text, reading texts that stay in the run folder (another
    # stage's output, not the source cut into input shards), writes where they are, not a copy.
    text_refs = shard.stage_output and not stage.rewrites_text
    out = ShardFiles(task.folder, shard.name, keep_removed_text=task.keep_removed_text, text_refs=text_refs)
    totals: Counter = Counter()
    row = task.row0
    try:
        out.set_aside(shard.set_aside())
        for table, files, rows in read_shard_refs(shard.path, task.batch_size, task.folder.parent):
            if not table.num_rows:
                continue
            n = table.num_rows
            table = transform(table, row)
            row += n
            if out.data.schema is None:
                out.set_schema(kept_schema(table, stage))
            totals.update(stage.batch_stats(table))
            out.write(table, (files, rows))
        if out.data.schema is None:
            # No document in this shard: the input's columns and the stage's declared ones.
            out.set_schema(kept_schema(shard_schema(shard.path).empty_table(), stage))
        return out.close(dict(totals))
    except BaseException:
        out.abort()
        raise
