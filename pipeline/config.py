"""YAML config -> validated objects. Every error is reported before any work starts,
named by its key path (``stages[3].dedup_exact.hash: ...``)."""
from __future__ import annotations

import glob
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from pipeline.errors import ConfigError, UserError
from pipeline.readers import expand_paths  # noqa: F401  (paths are expanded in readers/, once)
from pipeline.runpath import RunPath

# What --config means, for both commands' --help.
CONFIG_HELP = ("the run's YAML file: input, output_dir, options and the chain of stages; or the name of a "
               "config that ships with medprep: pubmed (the default run), tiny (a small one), clinical_notes, "
               "clinical_notes_surrogate. Relative paths in it are looked for beside the file first, then in "
               "the current directory, then among the files medprep ships (a shipped config: there first); a "
               "relative output_dir is in the current directory")


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class InputConfig(Strict):
    # Files, folders or glob patterns; a folder means every supported file in it.
    paths: list[str] = Field(min_length=1)
    format: Literal["auto", "jsonl", "json", "csv", "tsv", "parquet", "text", "pubmed_xml", "jats", "hf"] = "auto"
    id_field: str = "id"
    text_field: str = "text"
    # Plain text: one document per file, or one per non-empty line.
    text_unit: Literal["file", "line"] = "file"
    # JATS full texts (PMC .nxml): keep figure and table captions after their paragraph.
    captions: bool = False
    # Read at most this many documents (small runs, tests).
    limit: int | None = Field(default=None, ge=1)
    # JSON fields read into string columns of their own (a patient id for phi.group_field and
    # split.by), not into the `meta` column with the other fields.
    columns: list[str] = Field(default_factory=list)


class ExecutorConfig(Strict):
    """Who runs the shard tasks. local: this machine (num_proc worker processes). ray: a Ray
    cluster; no address starts a local Ray instance, `auto` joins the running cluster."""
    kind: Literal["local", "ray"] = "local"
    address: str | None = None
    # A local Ray instance's CPUs (None: all of this machine's).
    num_cpus: int | None = Field(default=None, ge=1)
    # Ray actors per stage, by stage name (phi needs ~100x the workers of langid); a stage
    # not named gets one per cluster CPU / cpus_per_worker.
    workers: dict[str, int] = Field(default_factory=dict)
    cpus_per_worker: float = Field(default=1.0, gt=0.0)


class CacheConfig(Strict):
    """Per-document results kept for reruns (pipeline/cache.py): phi's redacted text."""
    # The folder holding cache/ (default: the run folder); a path or a URI like output_dir.
    folder: str | None = None
    # Over this, no new entries are written (0: none at all); `pipeline cache --prune` trims to it.
    max_mb: int = Field(default=4096, ge=0)


class CardConfig(Strict):
    """The YAML header of final/README.md, the dataset card (pipeline/card.py)."""
    # A license id as the Hugging Face Hub writes them (cc-by-4.0, apache-2.0, other, unknown).
    license: str = Field(default="unknown", pattern=r"^[a-z0-9][a-z0-9.+-]*$")
    # Default: "medprep: <output folder name>".
    pretty_name: str | None = Field(default=None, min_length=1, max_length=200)
    # Default: the input files' names.
    source_datasets: list[str] | None = None
    # ISO 639 codes; default: the language filter's `keep` list (none claimed without one).
    languages: list[Annotated[str, Field(pattern=r"^[a-z]{2,3}(-[A-Za-z0-9]+)?$")]] | None = None


SOURCE_NAME = r"^[a-z][a-z0-9_]*$"


class SourceConfig(Strict):
    """One source of a multi-source run (docs/sources.md): its input and its own per-document
    chain; the run's `stages:` are then the shared tail every source's documents go through."""
    input: InputConfig
    stages: list[dict[str, Any]] = Field(min_length=1)
    # The source's documents carry PHI: its chain must hold a stage that removes it (phi), so
    # that none reaches the shared tail (cross-source hashing, the tokenizer, pack).
    private: bool = False

    @field_validator("stages", mode="before")
    @classmethod
    def _stage_entries(cls, value):
        return stage_entries(value)


class RepeatRule(Strict):
    """One additive repeat factor of a mix's source (docs/sources.md, "Weighting by metadata"): a
    document whose `column` holds one of `any_of` (a list column: any of its items), or a number
    within [min, max], counts `add` more times than its source's base of 1."""
    column: str = Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    any_of: list[str] | None = Field(default=None, min_length=1)
    min: float | None = None
    max: float | None = None
    add: float = Field(gt=0.0, le=100.0)
    # The factor's name in the manifest (default: the condition, e.g. `year >= 2016`).
    name: str | None = Field(default=None, min_length=1, max_length=80)

    @model_validator(mode="after")
    def _one_condition(self):
        if (self.any_of is None) == (self.min is None and self.max is None):
            raise ValueError("give either any_of: [values] or min:/max: (a number range), not both or neither")
        if self.min is not None and self.max is not None and self.min > self.max:
            raise ValueError(f"min {self.min:g} is above max {self.max:g}")
        return self

    @property
    def label(self) -> str:
        if self.name:
            return self.name
        if self.any_of is not None:
            return f"{self.column}: {', '.join(self.any_of)}"
        if self.max is None:
            return f"{self.column} >= {self.min:g}"
        if self.min is None:
            return f"{self.column} <= {self.max:g}"
        return f"{self.column} {self.min:g}-{self.max:g}"


class MixEntry(Strict):
    """A source's share of the packed train tokens, and how often its documents may repeat to
    reach it."""
    weight: float = Field(gt=0.0)
    max_epochs: float = Field(default=1.0, ge=1.0)
    # Per-document repeat factors within the source: 1 plus the `add` of every rule a document
    # matches; the source's total is then scaled to its weight as without them.
    repeat_by: list[RepeatRule] | None = Field(default=None, min_length=1, max_length=32)

    @model_validator(mode="after")
    def _distinct_names(self):
        labels = [r.label for r in self.repeat_by or []]
        if len(set(labels)) != len(labels):
            raise ValueError("repeat_by: two rules have the same name; give each a distinct `name:`")
        return self

    def dump(self) -> dict:
        """As the stages see it (RunContext.mix): without repeat_by when there is none, so that a
        mix without it is the same value, and fingerprint, as before repeat_by existed."""
        out = self.model_dump(exclude={"repeat_by"})
        if self.repeat_by:
            out["repeat_by"] = [{**r.model_dump(exclude_none=True), "label": r.label} for r in self.repeat_by]
        return out


class RunConfig(Strict):
    # One source (`input:`), or several (`sources:`, each with its input and chain).
    input: InputConfig | None = None
    sources: dict[Annotated[str, Field(pattern=SOURCE_NAME)], SourceConfig] | None = None
    mix: dict[str, MixEntry] | None = None
    executor: ExecutorConfig = Field(default_factory=ExecutorConfig)

    @field_validator("executor", mode="before")
    @classmethod
    def _executor_shorthand(cls, value):
        # `executor: ray` means {kind: ray}.
        return {"kind": value} if isinstance(value, str) else value
    output_dir: str
    seed: int = 0
    num_proc: int = Field(default=1, ge=1, le=256)
    batch_size: int = Field(default=1000, ge=1, le=1_000_000)
    # Documents per input shard: the unit of work handed to a worker, of resume after an
    # interruption, and of output files (shard NAME in, data/NAME.arrow out).
    shard_size: int = Field(default=10_000, ge=1)
    # Keep the text of removed documents in removed/ (it may carry PHI for stages before phi).
    keep_removed_text: bool = False
    progress: bool = True
    # Write report.html at the end of `pipeline run` (plots, and PHI-redacted removed examples).
    report: bool = True
    # What a finished run keeps. all: every stage's data/ (a rerun or retune starts from any
    # stage). final: final/, tokenizer/, manifest.json, report.html, and each stage's
    # stats.json and removed/ (the record of why each document left); the stages' data/ go,
    # so the next run recomputes them. The manifest's run_folder gives the folder's size.
    keep: Literal["all", "final"] = "all"
    # How finished files are published in the run folder (output_dir may be a URI: s3://...,
    # gs://..., hdfs://...; it is read and written through pyarrow.fs). auto: under a temp name,
    # then renamed, where the filesystem renames (local); elsewhere at their final names.
    # direct: final names everywhere. Either way a shard's marker and a stage's _SUCCESS come
    # after the files they vouch for.
    commit: Literal["auto", "direct"] = "auto"
    cache: CacheConfig = Field(default_factory=CacheConfig)
    card: CardConfig = Field(default_factory=CardConfig)
    # A stage that removes more than this share of its documents says so in one line as it ends
    # (the reasons and the options to look at); 1.0: never.
    warn_removed_share: float = Field(default=0.5, gt=0.0, le=1.0)
    stages: list[dict[str, Any]] = Field(min_length=1)

    @field_validator("stages", mode="before")
    @classmethod
    def _stage_entries(cls, value):
        return stage_entries(value)

    @model_validator(mode="after")
    def _one_or_several_sources(self):
        if (self.input is None) == (self.sources is None):
            raise ValueError("give either input: (one source) or sources: (several), not both or neither")
        if self.mix is not None and self.sources is None:
            raise ValueError("mix: weights sources; it needs sources:")
        return self


def stage_entries(value) -> list[dict]:
    """A chain's entries as {name: options} (a bare name means no options)."""
    if not isinstance(value, list):
        raise ValueError("must be a list of {stage_name: {options}} entries")
    out = []
    for i, entry in enumerate(value):
        if isinstance(entry, str):
            entry = {entry: {}}
        if not isinstance(entry, dict) or len(entry) != 1:
            raise ValueError(f"entry {i} must be a stage name or a one-key mapping {{name: {{options}}}}")
        (name, opts), = entry.items()
        out.append({name: opts if opts is not None else {}})
    return out


@dataclass(frozen=True)
class StageSpec:
    position: int            # 1-based place in the chain (a shared tail: after the longest source chain)
    name: str
    config: BaseModel
    # The source whose chain holds it (a multi-source run's per-source stage), else None.
    source: str | None = None
    where: str = ""          # its entry in the config, for errors: stages[3].dedup_exact

    @property
    def key(self) -> str:
        """What names it in a run: `notes.heuristics` for a source's stage, else its name."""
        return f"{self.source}.{self.name}" if self.source else self.name

    @property
    def folder(self) -> str:
        return f"{self.position:02d}_{self.key}"


@dataclass
class Config:
    run: RunConfig
    stages: list[StageSpec]      # every source's chain (in config order), then the shared tail
    source: str = "<config>"
    raw: dict = field(default_factory=dict)

    @property
    def output_dir(self) -> RunPath:
        return RunPath.of(self.run.output_dir, direct=self.run.commit == "direct")

    @property
    def multi_source(self) -> bool:
        return self.run.sources is not None

    @property
    def inputs(self) -> dict[str | None, InputConfig]:
        """Each source's input by name (one source: {None: input})."""
        if self.run.sources is None:
            return {None: self.run.input}
        return {name: src.input for name, src in self.run.sources.items()}

    @property
    def source_names(self) -> list[str]:
        return list(self.run.sources or ())

    def stage(self, name: str) -> StageSpec:
        for spec in self.stages:
            if spec.name == name:
                return spec
        raise KeyError(name)

    def has_stage(self, name: str) -> bool:
        return any(s.name == name for s in self.stages)

    def previous(self, spec: StageSpec) -> list[StageSpec]:
        """The stages whose output is this one's input: none (it reads its source), the one
        before it in its chain, or, for the first stage of a shared tail, every source's last."""
        own = [s for s in self.stages if s.source == spec.source]
        i = own.index(spec)
        if i:
            return [own[i - 1]]
        if spec.source is None and self.multi_source:
            return [[s for s in self.stages if s.source == name][-1] for name in self.source_names]
        return []

    def before(self, spec: StageSpec) -> list[StageSpec]:
        """Every stage whose documents flow into this one, in chain order."""
        if spec.source is not None:
            return [s for s in self.stages if s.source == spec.source and s.position < spec.position]
        return self.stages[:self.stages.index(spec)]

    def chains(self) -> dict[str | None, list[StageSpec]]:
        """Each source's whole chain (its stages, then the shared tail) by source."""
        tail = [s for s in self.stages if s.source is None]
        if not self.multi_source:
            return {None: tail}
        return {name: [s for s in self.stages if s.source == name] + tail for name in self.source_names}

    def reads_source(self, spec: StageSpec) -> bool:
        return not self.previous(spec)


def _loc(loc: tuple) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out or "<root>"


def _errors(exc: ValidationError, prefix: str = "") -> list[str]:
    msgs = []
    for err in exc.errors():
        where = _loc(err["loc"])
        if prefix:
            where = prefix + ("." + where if where != "<root>" else "")
        msg = err["msg"]
        if err["type"] == "extra_forbidden":
            msg = "unknown key"
        msgs.append(f"{where}: {msg}")
    return msgs


def load_config(path: str | os.PathLike, *, input_paths: list[str] | None = None,
                output_dir: str | None = None, text_unit: str | None = None,
                check_inputs: bool = True, executor: str | None = None) -> Config:
    """Read and validate a config (a file, or a shipped config's name); raise ConfigError
    listing every problem by key path."""
    from pipeline.resources import find_config, is_shipped_config, resource_root, shipped_configs
    path = find_config(str(path))
    if not path.is_file():
        raise ConfigError(f"{path}: config file not found (or give the name of a shipped config: "
                          f"{', '.join(shipped_configs())})")
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark else ""
        raise ConfigError(f"{path}:{where} not valid YAML ({getattr(exc, 'problem', exc)})") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: top level must be a mapping of keys")
    raw = dict(raw)
    # Files the config names are looked for beside it first (in a shipped config: among the
    # shipped files, whose paths are the repository's), then in the current directory; files
    # given on the command line only in the current directory.
    resolve = _Resolver(resource_root() if is_shipped_config(path) else path.parent)
    if isinstance(raw.get("input"), dict) and isinstance(raw["input"].get("paths"), list):
        raw["input"] = {**raw["input"], "paths": [resolve(p) for p in raw["input"]["paths"]]}
    if isinstance(raw.get("stages"), list):
        raw["stages"] = [_resolve_stage_paths(entry, resolve) for entry in raw["stages"]]
    if isinstance(raw.get("sources"), dict):
        raw["sources"] = {name: _resolve_source(src, resolve) for name, src in raw["sources"].items()}
        if input_paths:
            raise ConfigError(f"{path}: --input replaces the one input of a config; this one has several "
                              "sources (sources:): run one source's stage with --input instead "
                              "(python -m pipeline.stage SOURCE.STAGE --input ...)")
    if input_paths:
        # Files given on the command line are read by their suffix, not the config's format.
        raw["input"] = {**(raw.get("input") or {}), "paths": list(input_paths), "format": "auto"}
    if output_dir:
        raw["output_dir"] = output_dir
    if text_unit and isinstance(raw.get("sources"), dict):
        raw["sources"] = {name: {**src, "input": {**(src.get("input") or {}), "text_unit": text_unit}}
                          if isinstance(src, dict) else src for name, src in raw["sources"].items()}
    elif text_unit:
        raw["input"] = {**(raw.get("input") or {}), "text_unit": text_unit}
    if executor:
        current = raw.get("executor")
        current = {"kind": current} if isinstance(current, str) else dict(current or {})
        raw["executor"] = {**current, "kind": executor}
    return validate_config(raw, source=str(path), check_inputs=check_inputs, locate=resolve.where)


def _resolve_source(src, resolve):
    """A source entry with its input paths and its stages' `*_path` options resolved."""
    if not isinstance(src, dict):
        return src
    src = dict(src)
    if isinstance(src.get("input"), dict) and isinstance(src["input"].get("paths"), list):
        src["input"] = {**src["input"], "paths": [resolve(p) for p in src["input"]["paths"]]}
    if isinstance(src.get("stages"), list):
        src["stages"] = [_resolve_stage_paths(entry, resolve) for entry in src["stages"]]
    return src


def _resolve_stage_paths(entry, resolve):
    """A stage entry with its `*_path` options resolved, and the `path` or `*_path` keys of the
    mappings nested in them (a list of benchmark files); other entries as they are."""
    if not isinstance(entry, dict) or len(entry) != 1:
        return entry
    (name, opts), = entry.items()
    if not isinstance(opts, dict):
        return entry

    def nested(value):
        if isinstance(value, list):
            return [nested(v) for v in value]
        if isinstance(value, dict):
            return {k: resolve(v) if isinstance(k, str) and (k == "path" or k.endswith("_path")) else nested(v)
                    for k, v in value.items()}
        return value
    return {name: {k: resolve(v) if k.endswith("_path") else nested(v) for k, v in opts.items()}}


class _Resolver:
    """Relative paths in a config: the config file's folder first (a shipped config's: the
    shipped files' root, pipeline/resources.py), then the current directory, then the shipped
    files (a copy of a shipped config still finds the model it names). A path found nowhere
    stays as written; `where` names the places for the error, and how to fetch a file
    `medprep fetch` provides."""

    def __init__(self, base: Path):
        from pipeline.resources import resource_root
        self.base = base
        self.shipped = resource_root()

    def __call__(self, value):
        if not isinstance(value, str) or not value or Path(value).is_absolute():
            return value
        # Found paths are made absolute: a fingerprint then names the same file the same way
        # whichever config (a copy elsewhere, a shipped one) and folder it was found from.
        beside = self.base / value
        if _matches(str(beside)):
            return os.path.abspath(beside)
        if _matches(value):
            return os.path.abspath(value)                 # in the current directory
        shipped = self.shipped / value
        if _matches(str(shipped)):
            return str(shipped)
        return value

    def where(self, value: str) -> str:
        if Path(value).is_absolute():
            return value
        places = []
        for folder in (self.base.absolute(), Path.cwd(), self.shipped):
            place = f"{(folder / value).parent}/"
            if place not in places:
                places.append(place)
        from pipeline.fetch import fetch_hint
        return f"{value} (looked in {', '.join(places[:-1])} and {places[-1]})" + fetch_hint(value) \
            if len(places) > 1 else value + fetch_hint(value)


def _matches(path: str) -> bool:
    if any(ch in path for ch in "*?["):
        return bool(glob.glob(path, recursive=True))
    return Path(path).exists()


def _chains(run: RunConfig | None, raw: dict) -> list[tuple[str, list[dict], str | None]]:
    """(key path, entries, source) of each chain the config gives: every source's, then the
    shared tail (one source: its chain)."""
    def entries(value):
        try:
            return stage_entries(value)
        except ValueError:
            return []
    if run is not None:
        out = [(f"sources.{n}.stages", src.stages, n) for n, src in (run.sources or {}).items()]
        return out + [("stages", run.stages, None)]
    sources = raw.get("sources") if isinstance(raw.get("sources"), dict) else {}
    out = [(f"sources.{n}.stages", entries(src.get("stages")), n) for n, src in sources.items()
           if isinstance(src, dict)]
    return out + [("stages", entries(raw.get("stages")), None)]


def validate_config(raw: dict, *, source: str = "<config>", check_inputs: bool = True,
                    locate=lambda value: value) -> Config:
    from pipeline.stages import REGISTRY

    problems: list[str] = []
    try:
        run = RunConfig.model_validate(raw)
    except ValidationError as exc:
        # Top-level problems are reported together with the stages' own.
        problems.extend(_errors(exc))
        run = None
    chains = _chains(run, raw)
    multi = len(chains) > 1 or isinstance(raw.get("sources"), dict)
    longest = max([len(entries) for _, entries, src in chains if src is not None], default=0)

    specs: list[StageSpec] = []
    if run is not None and run.executor.kind == "ray":
        import importlib.util
        if importlib.util.find_spec("ray") is None:
            problems.append("executor.kind: ray needs Ray, which is not installed here: pip install 'medprep[ray]' "
                            "(or run on this machine: executor: local)")
    if run is not None:
        for name in run.executor.workers:
            if name not in REGISTRY:
                problems.append(f"executor.workers.{name}: unknown stage (known: {', '.join(REGISTRY.names())})")
    for prefix, entries, src in chains:
        for i, entry in enumerate(entries):
            (name, opts), = entry.items()
            where = f"{prefix}[{i}].{name}"
            if name not in REGISTRY:
                problems.append(f"{prefix}[{i}]: unknown stage '{name}' (known: {', '.join(REGISTRY.names())})")
                continue
            if not isinstance(opts, dict):
                problems.append(f"{where}: options must be a mapping")
                continue
            try:
                cls = REGISTRY[name]
                cfg = cls.Config.model_validate(opts)
            except ConfigError as exc:           # a stage from another package that cannot be loaded
                problems.append(f"{prefix}[{i}]: {exc}")
                continue
            except ValidationError as exc:
                problems.extend(_errors(exc, where))
                continue
            if multi and src is not None and cls.placement.where == "shared":
                problems.append(f"{where}: a stage over the whole corpus goes in the shared tail (stages:), "
                                "not in a source's chain")
            if multi and src is None and cls.placement.where == "source":
                problems.append(f"{where}: a per-source stage (it depends on what the source is); "
                                "put it in each source's stages: (sources.NAME.stages)")
            position = i + 1 + (longest if multi and src is None else 0)
            specs.append(StageSpec(position=position, name=name, config=cfg, source=src if multi else None,
                                   where=where))

    config = Config(run=run, stages=specs, source=source, raw=raw)
    for key, chain in _spec_chains(config, chains, specs).items():
        names = [s.name for s in chain]
        what = f"sources.{key} and stages" if key else "stages"
        if len(set(names)) != len(names):
            problems.append(f"{what}: a stage is listed twice")
        order = [REGISTRY.rank(n) for n in names]
        if order != sorted(order):
            problems.append(f"{what}: out of order; the chain is " + " -> ".join(REGISTRY.names()))
    if run is not None and run.sources is not None:
        problems.extend(_source_problems(run, specs))
    elif run is not None:
        for spec in specs:
            problems.extend(f"{spec.where}.{p}" for p in REGISTRY[spec.name].source_problems(spec.config, []))

    if check_inputs and run is not None:
        for name, input_cfg in config.inputs.items():
            at = f"sources.{name}.input.paths" if name else "input.paths"
            files = expand_paths(input_cfg.paths)
            missing = [locate(str(f)) for f in files if not f.exists()]
            if missing:
                problems.append(f"{at}: not found: {', '.join(missing[:5])}")
            elif not files:
                problems.append(f"{at}: no input files matched: {', '.join(locate(p) for p in input_cfg.paths)}")
    from pipeline.preflight import missing_model_files
    missing, reported = missing_model_files(specs)
    problems.extend(missing)
    for spec in specs:
        for key, value in spec.config.model_dump().items():
            # Stage options that name a model or file must exist before the run starts.
            if key.endswith("_path") and value and value not in reported and not Path(value).exists():
                problems.append(f"{spec.where}.{key}: file not found: {locate(value)}")
    if problems:
        raise ConfigError(f"{source}: " + "; ".join(problems))
    return config


def _spec_chains(config: Config, chains, specs: list[StageSpec]) -> dict:
    """Each source's chain of validated specs, its own stages then the tail (one source: None)."""
    tail = [s for s in specs if s.source is None]
    sources = [src for _, _, src in chains if src is not None]
    if not sources:
        return {None: tail}
    return {src: [s for s in specs if s.source == src] + tail for src in sources}


def _repeat_by_problems(source: str, rules: list[RepeatRule], input_cfg: InputConfig) -> list[str]:
    """A repeat_by rule on a column the source's documents do not have, or of the wrong kind,
    from the columns the reader gives (the format as the readers detect it): MEDLINE and JATS XML
    (their typed columns), JSON/CSV (`input.columns`, strings), Parquet files and datasets folders
    (their schema, read without the data). Inputs not there yet are checked by pack."""
    import pyarrow as pa

    columns, what = _reader_columns(input_cfg)
    if columns is None:
        return []
    problems = []
    for i, rule in enumerate(rules):
        where = f"mix.{source}.repeat_by[{i}]"
        kind = columns.get(rule.column)
        if kind is None:
            known = ", ".join(c for c in columns if c not in ("id", "text")) or "none"
            problems.append(f"{where}.column: '{rule.column}' is not a column of {what} (columns: {known})")
        elif rule.any_of is not None and not (pa.types.is_string(kind) or (
                pa.types.is_list(kind) and pa.types.is_string(kind.value_type))):
            problems.append(f"{where}.any_of: '{rule.column}' holds {kind}, not text: use min:/max:")
        elif rule.any_of is None and not (pa.types.is_integer(kind) or pa.types.is_floating(kind)):
            problems.append(f"{where}: min:/max: need a number column; '{rule.column}' holds {kind}: use any_of:")
    return problems


def _reader_columns(input_cfg: InputConfig) -> tuple[dict | None, str]:
    """{column: Arrow type} of the documents the input's reader gives, and what to call the
    input in a message; None when they cannot be known before reading (files missing, mixed
    formats, plain text, Arrow shards)."""
    import pyarrow as pa

    from pipeline.readers import detect_format, jats, pubmed_xml
    from pipeline.readers import expand_paths as reader_paths
    try:
        files = reader_paths(input_cfg.paths)
        formats = {input_cfg.format} if input_cfg.format != "auto" else {detect_format(f) for f in files}
    except (OSError, UserError):
        return None, ""
    if len(formats) != 1 or not files or not all(f.exists() for f in files):
        return None, ""
    fmt = formats.pop()
    if fmt in ("pubmed_xml", "jats"):
        schema = {"pubmed_xml": pubmed_xml.SCHEMA, "jats": jats.SCHEMA}[fmt]
        return {f.name: f.type for f in schema}, {"pubmed_xml": "MEDLINE XML", "jats": "JATS XML"}[fmt]
    if fmt in ("jsonl", "json", "csv", "tsv"):
        return ({c: pa.string() for c in input_cfg.columns},
                "this input (JSON and CSV fields are columns when listed in input.columns, as strings)")
    if fmt in ("parquet", "hf"):
        try:
            if fmt == "parquet":
                import pyarrow.parquet as pq
                schema = pq.read_schema(files[0])
            else:
                from datasets import DatasetDict, load_from_disk
                ds = load_from_disk(str(files[0]))
                schema = (ds["train"] if isinstance(ds, DatasetDict) else ds).features.arrow_schema
        except (OSError, KeyError, ValueError, pa.ArrowInvalid):
            return None, ""                   # the reader names what is wrong with the file
        renamed = {input_cfg.text_field: "text", input_cfg.id_field: "id"}
        return {renamed.get(f.name, f.name): f.type for f in schema}, f"{files[0].name} (its columns)"
    return None, ""


def _source_problems(run: RunConfig, specs: list[StageSpec]) -> list[str]:
    """What a multi-source config can get wrong beyond one chain: a mix of sources it does not
    have, a stage option naming one (dedup's priority), PHI that could reach the shared tail."""
    from pipeline.stages import REGISTRY
    names = list(run.sources)
    problems = []
    for key in run.mix or {}:
        if key not in names:
            problems.append(f"mix.{key}: unknown source (sources: {', '.join(names)})")
        elif run.mix[key].repeat_by:
            problems.extend(_repeat_by_problems(key, run.mix[key].repeat_by, run.sources[key].input))
    if run.mix is not None:
        for name in names:
            if name not in run.mix:
                problems.append(f"mix: no weight for source '{name}' (every source needs one)")
    for spec in specs:
        problems.extend(f"{spec.where}.{p}" for p in REGISTRY[spec.name].source_problems(spec.config, names))
    for name, src in run.sources.items():
        chain = [s for s in specs if s.source == name]
        if src.private and not any(REGISTRY[s.name].placement.clears_phi for s in chain):
            problems.append(f"sources.{name}: its documents carry PHI (private: true) but its chain has no stage "
                            "that removes it (phi); PHI must be removed before the shared tail")
    return problems
