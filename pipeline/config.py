"""YAML config -> validated objects. Every error is reported before any work starts,
named by its key path (``stages[3].dedup_exact.hash: ...``)."""
from __future__ import annotations

import glob
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from pipeline.runpath import RunPath
from pipeline.errors import ConfigError
from pipeline.readers import expand_paths  # noqa: F401  (paths are expanded in readers/, once)


# What --config means, for both commands' --help.
CONFIG_HELP = ("the run's YAML file: input, output_dir, options and the chain of stages (configs/pubmed.yaml "
               "is the default run, configs/tiny.yaml a small one). Relative paths in it are looked for "
               "beside the file first, then in the current directory; a relative output_dir is in the "
               "current directory")


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class InputConfig(Strict):
    # Files, folders or glob patterns; a folder means every supported file in it.
    paths: list[str] = Field(min_length=1)
    format: Literal["auto", "jsonl", "parquet", "text", "pubmed_xml", "hf"] = "auto"
    id_field: str = "id"
    text_field: str = "text"
    # Plain text: one document per file, or one per non-empty line.
    text_unit: Literal["file", "line"] = "file"
    # Read at most this many documents (small runs, tests).
    limit: int | None = Field(default=None, ge=1)


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


class RunConfig(Strict):
    input: InputConfig
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
    stages: list[dict[str, Any]] = Field(min_length=1)

    @field_validator("stages", mode="before")
    @classmethod
    def _stage_entries(cls, value):
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
    position: int            # 1-based place in the chain
    name: str
    config: BaseModel

    @property
    def folder(self) -> str:
        return f"{self.position:02d}_{self.name}"


@dataclass
class Config:
    run: RunConfig
    stages: list[StageSpec]
    source: str = "<config>"
    raw: dict = field(default_factory=dict)

    @property
    def output_dir(self) -> RunPath:
        return RunPath.of(self.run.output_dir, direct=self.run.commit == "direct")

    def stage(self, name: str) -> StageSpec:
        for spec in self.stages:
            if spec.name == name:
                return spec
        raise KeyError(name)

    def has_stage(self, name: str) -> bool:
        return any(s.name == name for s in self.stages)


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
    """Read and validate a config; raise ConfigError listing every problem by key path."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"{path}: config file not found")
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark else ""
        raise ConfigError(f"{path}:{where} not valid YAML ({getattr(exc, 'problem', exc)})") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: top level must be a mapping of keys")
    raw = dict(raw)
    # Files the config names are looked for beside it first, then in the current directory;
    # files given on the command line only in the current directory.
    resolve = _Resolver(path.parent)
    if isinstance(raw.get("input"), dict) and isinstance(raw["input"].get("paths"), list):
        raw["input"] = {**raw["input"], "paths": [resolve(p) for p in raw["input"]["paths"]]}
    if isinstance(raw.get("stages"), list):
        raw["stages"] = [_resolve_stage_paths(entry, resolve) for entry in raw["stages"]]
    if input_paths:
        # Files given on the command line are read by their suffix, not the config's format.
        raw["input"] = {**(raw.get("input") or {}), "paths": list(input_paths), "format": "auto"}
    if output_dir:
        raw["output_dir"] = output_dir
    if text_unit:
        raw["input"] = {**(raw.get("input") or {}), "text_unit": text_unit}
    if executor:
        current = raw.get("executor")
        current = {"kind": current} if isinstance(current, str) else dict(current or {})
        raw["executor"] = {**current, "kind": executor}
    return validate_config(raw, source=str(path), check_inputs=check_inputs, locate=resolve.where)


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
    """Relative paths in a config: the config file's folder first, then the current directory
    (configs/ inside the repo name repo-root paths such as data/raw/...). A path found in
    neither stays as written; `where` says both places for the error."""

    def __init__(self, base: Path):
        self.base = base

    def __call__(self, value):
        if not isinstance(value, str) or not value or Path(value).is_absolute():
            return value
        beside = self.base / value
        if _matches(str(beside)):
            return str(beside)
        return value

    def where(self, value: str) -> str:
        if Path(value).is_absolute():
            return value
        here = Path.cwd() / value
        beside = (self.base / value).absolute()
        return f"{value} (looked in {beside.parent}/ and {here.parent}/)" if beside != here else value


def _matches(path: str) -> bool:
    if any(ch in path for ch in "*?["):
        return bool(glob.glob(path, recursive=True))
    return Path(path).exists()


def validate_config(raw: dict, *, source: str = "<config>", check_inputs: bool = True,
                    locate=lambda value: value) -> Config:
    from pipeline.stages import REGISTRY

    problems: list[str] = []
    try:
        run = RunConfig.model_validate(raw)
        entries = run.stages
    except ValidationError as exc:
        # Top-level problems are reported together with the stages' own.
        problems.extend(_errors(exc))
        run = None
        try:
            entries = RunConfig._stage_entries(raw.get("stages"))
        except ValueError:
            entries = []

    specs: list[StageSpec] = []
    if run is not None:
        for name in run.executor.workers:
            if name not in REGISTRY:
                problems.append(f"executor.workers.{name}: unknown stage (known: {', '.join(REGISTRY.names())})")
    for i, entry in enumerate(entries):
        (name, opts), = entry.items()
        where = f"stages[{i}].{name}"
        if name not in REGISTRY:
            problems.append(f"stages[{i}]: unknown stage '{name}' (known: {', '.join(REGISTRY.names())})")
            continue
        if not isinstance(opts, dict):
            problems.append(f"{where}: options must be a mapping")
            continue
        try:
            cfg = REGISTRY[name].Config.model_validate(opts)
        except ConfigError as exc:           # a stage from another package that cannot be loaded
            problems.append(f"stages[{i}]: {exc}")
            continue
        except ValidationError as exc:
            problems.extend(_errors(exc, where))
            continue
        specs.append(StageSpec(position=i + 1, name=name, config=cfg))

    names = [s.name for s in specs]
    if len(set(names)) != len(names):
        problems.append("stages: a stage is listed twice")
    order = [REGISTRY.rank(n) for n in names]
    if order != sorted(order):
        problems.append("stages: out of order; the chain is " + " -> ".join(REGISTRY.names()))

    if check_inputs and run is not None:
        files = expand_paths(run.input.paths)
        missing = [locate(str(f)) for f in files if not f.exists()]
        if missing:
            problems.append(f"input.paths: not found: {', '.join(missing[:5])}")
        elif not files:
            problems.append(f"input.paths: no input files matched: {', '.join(locate(p) for p in run.input.paths)}")
    from pipeline.preflight import missing_model_files
    missing, reported = missing_model_files(specs)
    problems.extend(missing)
    for spec in specs:
        for key, value in spec.config.model_dump().items():
            # Stage options that name a model or file must exist before the run starts.
            if key.endswith("_path") and value and value not in reported and not Path(value).exists():
                problems.append(f"stages[{spec.position - 1}].{spec.name}.{key}: file not found: {locate(value)}")
    if problems:
        raise ConfigError(f"{source}: " + "; ".join(problems))
    return Config(run=run, stages=specs, source=source, raw=raw)
