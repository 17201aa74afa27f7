"""Run report: report.html in the run folder, built from the stages' stats and outputs.

The page holds the documents through the stages (a funnel and its table), then each stage's
own section (`report_section`, pipeline/sections.py) in chain order, their plots together
under "Scores and lengths", then a few removed documents per reason. Removed examples are
shown only through the redactor a stage of the chain provides (`report_redactor`), under the
ids a stage gives the documents it reads (`report_ids`): documents removed before such a
stage still carry identifiers. A chain without a redactor shows ids and reasons only. The
numbers the page shows are also embedded as JSON (id="figures")."""
from __future__ import annotations

import html
import json

import pyarrow as pa
import pyarrow.compute as pc

from pipeline.runpath import RunPath, as_run_path, read_json
from pipeline.sections import Section, bars, table
from pipeline.shards import STATS, chain_order, is_purged, read_shard, shard_paths

EXAMPLES_PER_REASON = 2
SAMPLE = 20_000          # documents read for histograms
EXAMPLE_CHARS = 1500


def load_stats(run_dir: RunPath) -> list[dict]:
    return sorted((read_json(p) for p in (run_dir / "stages").glob("*/" + STATS)), key=chain_order)



def _stage_dir(run_dir: RunPath, s: dict) -> RunPath:
    return run_dir / "stages" / s.get("folder", f"{s['position']:02d}_{s['stage']}")


def _read(folder: RunPath, sub: str = "data", columns=None, limit=SAMPLE) -> pa.Table | None:
    tables, n = [], 0
    for f in shard_paths(folder, sub):
        for t in read_shard(f, None, list(columns) if columns else None):
            tables.append(t)
            n += t.num_rows
        if n >= limit:
            break
    # A shared tail holds several sources' columns: a column one lacks is null there.
    return pa.concat_tables(tables, promote_options="permissive").slice(0, limit) if tables else None


class ReportRun:
    """What a stage's report_section may ask of the run: its folder, manifest and stats, and a
    sample of the documents the last stage that still holds them kept."""

    def __init__(self, run_dir: RunPath, stats: list[dict], manifest: dict):
        self.dir = run_dir
        self.stats = stats
        self.manifest = manifest
        self._sample: list = []

    def sample(self) -> pa.Table | None:
        if not self._sample:
            last = next((_stage_dir(self.dir, s) for s in reversed(self.stats)
                         if (_stage_dir(self.dir, s) / "data").is_dir()), None)
            self._sample.append(_read(last) if last is not None else None)
        return self._sample[0]


def _stages(stats: list[dict], manifest: dict) -> list:
    """The stage object of each stats entry, with its options from the manifest's config (None
    for a stage this installation does not know)."""
    from pipeline.stages import REGISTRY
    config = manifest.get("config", {})
    chains = {None: config.get("stages", [])}
    chains.update({name: (src or {}).get("stages", []) for name, src in (config.get("sources") or {}).items()})
    options = {}
    for source, entries in chains.items():
        for entry in entries:
            if isinstance(entry, dict) and len(entry) == 1:
                (name, opts), = entry.items()
                options[(source, name)] = opts or {}
            elif isinstance(entry, str):
                options[(source, entry)] = {}
    out = []
    for s in stats:
        stage = None
        if s["stage"] in REGISTRY:
            cls = REGISTRY[s["stage"]]
            for opts in (options.get((s.get("source"), s["stage"]), {}), {}):
                try:
                    stage = cls(cls.Config.model_validate(opts), None)
                    break
                except ValueError:        # options of another version: the defaults
                    continue
        out.append(stage)
    return out


def _texts_of(folder: RunPath, ids: set[str], id_map=None) -> dict[str, str]:
    """Texts of the given ids, streamed shard by shard (a stage is never held in memory).
    `id_map` turns the folder's ids into the wanted ones (a stage's input ids into the ids it
    gave them)."""
    found: dict[str, str] = {}
    wanted = pa.array(sorted(ids), pa.string())
    for f in shard_paths(folder):
        for batch in read_shard(f, None, ["id", "text"]):
            batch_ids = batch["id"]
            if id_map is not None:
                batch_ids = pa.array(id_map(batch_ids.to_pylist()), pa.string())
            hit = pc.is_in(batch_ids, wanted)
            found.update(zip(batch_ids.filter(hit).to_pylist(), batch["text"].filter(hit).to_pylist()))
        if len(found) == len(ids):
            break
    return found


def _renamer(stats: list[dict], stages: list):
    """(position of the first stage that renames the ids it reads, its renaming), or (None, None)."""
    for s, stage in zip(stats, stages):
        rename = stage.report_ids(s) if stage is not None else None
        if rename is not None:
            return s["position"], rename
    return None, None


def _chains(stats: list[dict], stages: list) -> list[tuple[list[dict], list]]:
    """The chains of a run as (stats, stages): one, or a multi-source run's sources' own (each
    with its stages' `source`), then its shared tail."""
    sources = list(dict.fromkeys(s["source"] for s in stats if s.get("source")))
    if not sources:
        return [(stats, stages)]
    pairs = list(zip(stats, stages))
    return [tuple(map(list, zip(*[p for p in pairs if p[0].get("source") == key]))) for key in sources + [None]
            if any(p[0].get("source") == key for p in pairs)]


def _examples(run_dir: RunPath, stats: list[dict], stages: list) -> list[tuple[str, str, str, str]]:
    """(stage, reason, id, redacted text) for a few removed documents per reason, chain by chain
    (a shared tail's documents are looked up in every source's last stage)."""
    picks = []
    chains = _chains(stats, stages)
    last_of_sources = [chain[-1] for chain, _ in chains[:-1]] if len(chains) > 1 else []
    for chain, chain_stages in chains:
        before = last_of_sources if chain and chain[0].get("source") is None else []
        picks += _chain_examples(run_dir, chain, chain_stages, before)
    texts = [text for *_, text, _ in picks if text]
    redact = None
    if texts:
        redact = next((r for r in (st.report_redactor() for st in stages if st is not None) if r), None)
    # Redact the whole text, then cut: a value on the cut would otherwise show in part.
    redacted = iter(t[:EXAMPLE_CHARS] for t in redact(texts)) if redact is not None else None
    unredacted = "(text not shown: no stage of the chain redacts the report's examples)"
    return [(stage, reason, doc_id, (next(redacted) if redacted is not None else unredacted) if text else missing)
            for stage, reason, doc_id, text, missing in picks]


def _chain_examples(run_dir: RunPath, stats: list[dict], stages: list, before: list[dict]) -> list[tuple]:
    """One chain's picks: (stage, reason, id, text or None, what to say without it). Documents
    removed before a stage that renames ids are shown under its names for them (as removed/
    holds them once a purge has run), never under their raw ids. `before`: the stages whose
    output is the chain's input (a shared tail's)."""
    renamed_at, rename = _renamer(stats, stages)
    picks = []
    for i, s in enumerate(stats):
        if not s["removed"]:
            continue
        folder = _stage_dir(run_dir, s)
        removed = _read(folder, "removed", limit=10**9)   # ids and reasons only
        if removed is None:
            continue
        chosen = [(reason, doc_id) for reason in sorted(s["removed"]) for doc_id in
                  removed.filter(pc.equal(removed["reason"], reason))["id"].to_pylist()[:EXAMPLES_PER_REASON]]
        texts: dict[str, str] = {}
        if "text" in removed.column_names:
            texts = dict(zip(removed["id"].to_pylist(), removed["text"].to_pylist()))
        elif i or before:
            # The renaming stage's removed ids are its names for the ids its input holds.
            for prev in ([stats[i - 1]] if i else before):
                texts.update(_texts_of(_stage_dir(run_dir, prev), {doc_id for _, doc_id in chosen},
                                       rename if s["position"] == renamed_at else None))
        previous = [stats[i - 1]] if i else before
        purged = is_purged(folder) or any(is_purged(_stage_dir(run_dir, p)) for p in previous)
        raw_ids = rename is not None and s["position"] < renamed_at and not is_purged(folder)
        for reason, doc_id in chosen:
            shown = doc_id
            if raw_ids and not reason.startswith("malformed_"):       # malformed: file:line, kept
                shown = rename([doc_id])[0]
            missing = "(no text: removed from the run folder after the run)" if purged \
                else "(no text: set aside by the reader)"
            picks.append((_label(s), reason, shown, texts.get(doc_id), missing))
    return picks


def _label(s: dict) -> str:
    """A stage as the report names it: `SOURCE.STAGE` for a source's stage."""
    return f"{s['source']}.{s['stage']}" if s.get("source") else s["stage"]


def _source_funnels(manifest: dict) -> str:
    """A multi-source run's funnel per source (the manifest's `sources`), or nothing."""
    parts = []
    for name, funnel in (manifest.get("sources") or {}).items():
        steps = funnel["stages"]
        labels = ["read"] + [step["stage"] for step in steps]
        counts = [funnel["docs_read"]] + [step["docs_out"] for step in steps]
        parts.append(f"<h3>Source {html.escape(name)}</h3>" + bars(labels, counts, f"{name}: documents kept")
                     + table(["stage", "in", "out", "removed", "by reason"],
                             [[step["stage"], step["docs_in"], step["docs_out"], sum(step["removed"].values()),
                               ", ".join(f"{k}: {v}" for k, v in step["removed"].items()) or "-"]
                              for step in steps]))
    return ("<h2>Documents through the stages, by source</h2>" + "".join(parts)) if parts else ""


def _sections(run: ReportRun, stages: list) -> list[Section]:
    """Every stage's section, then their subsections, in chain order."""
    out = []
    for s, stage in zip(run.stats, stages):
        section = stage.report_section(s, run) if stage is not None else None
        if section is not None:
            out += [section, *section.subsections]
    return out


def write_report(run_dir) -> RunPath:
    run_dir = as_run_path(run_dir)
    stats = load_stats(run_dir)
    manifest = read_json(run_dir / "manifest.json") if (run_dir / "manifest.json").exists() else {}
    stages = _stages(stats, manifest)
    figures: dict = {"funnel": [[_label(s), s["docs_in"], s["docs_out"]] for s in stats],
                     "removed": {_label(s): s["removed"] for s in stats}}
    if manifest.get("sources"):
        figures["sources"] = {name: [[step["stage"], step["docs_in"], step["docs_out"]] for step in f["stages"]]
                              for name, f in manifest["sources"].items()}
    parts = ["<h2>Documents through the stages</h2>"]
    if stats and not manifest.get("sources"):
        labels = ["read"] + [s["stage"] for s in stats]
        counts = [stats[0]["docs_in"]] + [s["docs_out"] for s in stats]
        parts.append(bars(labels, counts, "documents kept after each stage"))
    parts.append(table(["stage", "in", "out", "removed", "by reason", "seconds", "docs/s"],
                       [[_label(s), s["docs_in"], s["docs_out"], sum(s["removed"].values()),
                         ", ".join(f"{k}: {v}" for k, v in s["removed"].items()) or "-", s["seconds"],
                         f"{s['docs_in'] / s['seconds']:,.0f}" if s["seconds"] else "-"] for s in stats]))
    parts.append(_source_funnels(manifest))
    from pipeline.inspect import reason_commands
    commands = reason_commands(run_dir, stats, manifest)
    if commands:
        parts.append("<h3>Removed documents by reason, and the command that lists them</h3>"
                     + table(["stage", "reason", "documents", "command"], commands))
    sections = _sections(ReportRun(run_dir, stats, manifest), stages)
    plots = [p for section in sections for p in section.plots]
    if plots:
        parts.append("<h2>Scores and lengths</h2>" + "".join(plots))
    for section in sections:
        figures.update(section.figures)
        if section.title:
            parts.append(f"<h2>{html.escape(section.title)}</h2>{section.body}")
    examples = _examples(run_dir, stats, stages)
    if examples:
        parts.append("<h2>Removed examples (after PHI redaction)</h2>")
        parts.append(table(["stage", "reason", "id", f"text (redacted, then cut to {EXAMPLE_CHARS:,} characters)"],
                           examples))
    page = f"""<!doctype html><html><head><meta charset="utf-8"><title>medprep run report</title>
<style>body{{font-family:system-ui,sans-serif;max-width:1100px;margin:24px auto;color:#222}}
table{{border-collapse:collapse;margin:8px 0 18px}}td,th{{border:1px solid #ccc;padding:4px 8px;font-size:13px;vertical-align:top}}
th{{background:#f3f3f3}}img{{margin:6px 12px 6px 0}}h2{{margin-top:28px;border-bottom:1px solid #ddd}}</style></head>
<body><h1>medprep run report</h1><p>{html.escape(str(run_dir))}</p>
{''.join(parts)}
<script type="application/json" id="figures">{html.escape(json.dumps(figures, sort_keys=True))}</script>
</body></html>"""
    out = run_dir / "report.html"
    out.write_text(page)
    return out
