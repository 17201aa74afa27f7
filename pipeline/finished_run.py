"""One record of a finished run, read by the report, the dataset card and `inspect`.

A run folder holds each finished stage's stats.json and the manifest (the config after
overrides, the stages' stats in chain order, the sources' funnels). `FinishedRun` turns them
into the stages of the run, each with its label (`SOURCE.STAGE` for a source's stage), its
folder, its options as the config gave them and the stage object built from them, and answers
what all three readers ask: which stages a name means, which stages feed one, how many
documents were read and kept, and which stages' documents are private. Nothing here names a
stage: what a stage shows is its own `report_section`/`card_section`.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import pyarrow as pa

from pipeline.errors import UserError
from pipeline.runpath import RunPath, as_run_path, read_json
from pipeline.shards import STATS, chain_order, read_shard, shard_paths

SAMPLE = 20_000          # kept documents read for a stage's plots


@dataclass
class FinishedStage:
    """One finished stage of a run: its stats.json, and its options from the run's config
    (None when the run folder has no manifest)."""
    stats: dict
    options: dict | None
    folder: RunPath

    @property
    def name(self) -> str:
        return self.stats["stage"]

    @property
    def source(self) -> str | None:
        return self.stats.get("source")

    @property
    def position(self) -> int:
        return self.stats["position"]

    @property
    def label(self) -> str:
        """How a run names it: `SOURCE.STAGE` for a source's stage, else the stage's name."""
        return f"{self.source}.{self.name}" if self.source else self.name

    @cached_property
    def stage(self):
        """The stage object with the run's options, or its defaults where they no longer
        validate (options of another version) or are unknown; None for a stage this
        installation does not know."""
        from pipeline.stages import REGISTRY
        if self.name not in REGISTRY:
            return None
        cls = REGISTRY[self.name]
        for options in (self.options or {}, {}):
            try:
                return cls(cls.Config.model_validate(options), None)
            except ValueError:
                continue
        return None


def _folder_name(stats: dict) -> str:
    return stats.get("folder", f"{stats['position']:02d}_{stats['stage']}")


def _chain_options(config: dict) -> dict[tuple[str | None, str], dict]:
    """{(source, stage name): options} from a run's config (a name is listed once per chain)."""
    chains = {None: config.get("stages") or []}
    chains.update({name: (src or {}).get("stages") or [] for name, src in (config.get("sources") or {}).items()})
    out = {}
    for source, entries in chains.items():
        for entry in entries:
            if isinstance(entry, str):
                out[(source, entry)] = {}
            elif isinstance(entry, dict) and len(entry) == 1:
                (name, options), = entry.items()
                out[(source, name)] = options if isinstance(options, dict) else {}
    return out


class FinishedRun:
    """The stages of a run folder in chain order (a multi-source run's sources' chains, then its
    shared tail). `manifest`: the run's, when the caller holds a newer one than the folder's."""

    def __init__(self, run_dir, manifest: dict | None = None):
        self.dir = as_run_path(run_dir)
        if manifest is None:
            path = self.dir / "manifest.json"
            manifest = read_json(path) if path.exists() else {}
        self.manifest = manifest
        if not (self.dir / "stages").is_dir():
            raise UserError(f"{run_dir}: not a run folder (no stages/)")
        on_disk = {p.parent.name: read_json(p) for p in (self.dir / "stages").glob("*/" + STATS)}
        stats = sorted(on_disk.values(), key=chain_order)
        if manifest.get("stages"):
            # The run's stages, in its order, as their folders hold them now (a stage rerun alone
            # rewrites its stats.json); a folder of a stage the config no longer has is not one.
            stats = [on_disk.get(_folder_name(s), s) for s in manifest["stages"]]
        if not stats:
            raise UserError(f"{run_dir}: no stage has finished yet (no stages/*/stats.json)")
        options = _chain_options(manifest.get("config") or {}) if manifest.get("config") else None
        self.stages = [FinishedStage(s, None if options is None else options.get((s.get("source"), s["stage"]), {}),
                                     self.dir / "stages" / _folder_name(s)) for s in stats]
        self._sample: list = []

    @property
    def stats(self) -> list[dict]:
        return [s.stats for s in self.stages]

    @cached_property
    def sources(self) -> list[str]:
        """A multi-source run's sources in the run's order (the manifest's; by name without one);
        [] for one source."""
        return list(dict.fromkeys(s.source for s in self.stages if s.source))

    def chains(self) -> list[list[FinishedStage]]:
        """Each source's own chain, then the shared tail; one chain for a one-source run."""
        if not self.sources:
            return [list(self.stages)]
        out = [[s for s in self.stages if s.source == name] for name in self.sources]
        tail = [s for s in self.stages if s.source is None]
        return out + ([tail] if tail else [])

    def previous(self, stage: FinishedStage) -> list[FinishedStage]:
        """The stages whose output this one read: the one before it in its chain; for a shared
        tail's first stage every source's last; none for a stage that read its source."""
        own = [s for s in self.stages if s.source == stage.source]
        i = own.index(stage)
        if i:
            return [own[i - 1]]
        if stage.source is None and self.sources:
            return [chain[-1] for chain in self.chains()[:len(self.sources)] if chain]
        return []

    def reads_source(self, stage: FinishedStage) -> bool:
        return not self.previous(stage)

    @property
    def docs_read(self) -> int:
        return sum(s.stats["docs_in"] for s in self.stages if self.reads_source(s))

    @property
    def docs_kept(self) -> int:
        return self.stages[-1].stats["docs_out"]

    def find(self, name: str) -> list[FinishedStage]:
        """The stages a name means: a label (`SOURCE.STAGE`, or `STAGE` in a shared tail or a
        one-source run), a folder (`02_SOURCE.STAGE`), or a stage's name alone (every source's
        stage of that name)."""
        exact = [s for s in self.stages if name in (s.label, s.folder.name)]
        found = exact or [s for s in self.stages if s.name == name]
        if not found:
            raise UserError(f"{self.dir}: no stage '{name}' in this run (its stages: "
                            f"{', '.join(s.label for s in self.stages)})")
        return found

    def is_private(self, stage: FinishedStage) -> bool:
        """Whether the stage's documents are never shown: it, or a stage after it in its own
        chain, says its documents and those before it are private (its `privacy()`'s `private_documents`: the
        clinical de-identification). A shared tail comes after every source's chain."""
        own = [s for s in self.stages if s.source == stage.source]
        later = own[own.index(stage):]
        duties = [s.stage.privacy() for s in later if s.stage is not None]
        return any(p is not None and p.private_documents() for p in duties)

    def sample(self) -> pa.Table | None:
        """Up to SAMPLE documents kept by the last stage that still holds its documents."""
        if not self._sample:
            last = next((s.folder for s in reversed(self.stages) if (s.folder / "data").is_dir()), None)
            self._sample.append(read_documents(last) if last is not None else None)
        return self._sample[0]


def read_documents(folder: RunPath, sub: str = "data", columns=None, limit=SAMPLE) -> pa.Table | None:
    """The first `limit` rows of a stage's shards (`data` or `removed`)."""
    tables, n = [], 0
    for f in shard_paths(folder, sub):
        for t in read_shard(f, None, list(columns) if columns else None):
            tables.append(t)
            n += t.num_rows
        if n >= limit:
            break
    # A shared tail holds several sources' columns: a column one lacks is null there.
    return pa.concat_tables(tables, promote_options="permissive").slice(0, limit) if tables else None
