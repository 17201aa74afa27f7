"""Run report: report.html in the run folder, built from the stages' stats and outputs.

The page holds the documents through the stages (a funnel and its table), then each stage's
own section (`report_section`, pipeline/sections.py) in chain order, their plots together
under "Scores and lengths", then a few removed documents per reason. Removed examples are
shown only through the redactor a stage of the chain provides (its `privacy()`'s
`report_redactor`), under the ids a stage gives the documents it reads (`report_ids`): documents removed before such a
stage still carry identifiers. A chain without a redactor shows ids and reasons only. The
numbers the page shows are also embedded as JSON (id="figures")."""
from __future__ import annotations

import html
import json

import pyarrow as pa
import pyarrow.compute as pc

from pipeline.finished_run import FinishedRun, FinishedStage, read_documents
from pipeline.runpath import RunPath
from pipeline.sections import Section, bars, table
from pipeline.shards import is_purged, read_shard, shard_paths

EXAMPLES_PER_REASON = 2
EXAMPLE_CHARS = 1500


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


def _renamer(chain: list[FinishedStage]):
    """(position of the first stage that renames the ids it reads, its renaming), or (None, None)."""
    for s in chain:
        privacy = s.stage.privacy() if s.stage is not None else None
        rename = privacy.report_ids(s.stats) if privacy is not None else None
        if rename is not None:
            return s.position, rename
    return None, None


def _examples(run: FinishedRun) -> list[tuple[str, str, str, str]]:
    """(stage, reason, id, redacted text) for a few removed documents per reason, chain by chain
    (a shared tail's documents are looked up in every source's last stage)."""
    picks = []
    for chain in run.chains():
        picks += _chain_examples(run, chain)
    texts = [text for *_, text, _ in picks if text]
    redact = None
    if texts:
        duties = [p for p in (s.stage.privacy() for s in run.stages if s.stage is not None) if p is not None]
        redact = next((r for r in (p.report_redactor() for p in duties) if r), None)
    # Redact the whole text, then cut: a value on the cut would otherwise show in part.
    redacted = iter(t[:EXAMPLE_CHARS] for t in redact(texts)) if redact is not None else None
    unredacted = "(text not shown: no stage of the chain redacts the report's examples)"
    return [(stage, reason, doc_id, (next(redacted) if redacted is not None else unredacted) if text else missing)
            for stage, reason, doc_id, text, missing in picks]


def _chain_examples(run: FinishedRun, chain: list[FinishedStage]) -> list[tuple]:
    """One chain's picks: (stage, reason, id, text or None, what to say without it). Documents
    removed before a stage that renames ids are shown under its names for them (as removed/
    holds them once a purge has run), never under their raw ids."""
    renamed_at, rename = _renamer(chain)
    picks = []
    for s in chain:
        if not s.stats["removed"]:
            continue
        removed = read_documents(s.folder, "removed", limit=10**9)   # ids and reasons only
        if removed is None:
            continue
        chosen = [(reason, doc_id) for reason in sorted(s.stats["removed"]) for doc_id in
                  removed.filter(pc.equal(removed["reason"], reason))["id"].to_pylist()[:EXAMPLES_PER_REASON]]
        previous = run.previous(s)
        texts: dict[str, str] = {}
        if "text" in removed.column_names:
            texts = dict(zip(removed["id"].to_pylist(), removed["text"].to_pylist()))
        else:
            # The renaming stage's removed ids are its names for the ids its input holds.
            for prev in previous:
                texts.update(_texts_of(prev.folder, {doc_id for _, doc_id in chosen},
                                       rename if s.position == renamed_at else None))
        purged = is_purged(s.folder) or any(is_purged(p.folder) for p in previous)
        raw_ids = rename is not None and s.position < renamed_at and not is_purged(s.folder)
        for reason, doc_id in chosen:
            shown = doc_id
            if raw_ids and not reason.startswith("malformed_"):       # malformed: file:line, kept
                shown = rename([doc_id])[0]
            missing = "(no text: removed from the run folder after the run)" if purged \
                else "(no text: set aside by the reader)"
            picks.append((s.label, reason, shown, texts.get(doc_id), missing))
    return picks


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


def _sections(run: FinishedRun) -> list[Section]:
    """Every stage's section, then their subsections, in chain order."""
    out = []
    for s in run.stages:
        section = s.stage.report_section(s.stats, run) if s.stage is not None else None
        if section is not None:
            out += [section, *section.subsections]
    return out


def write_report(run_dir) -> RunPath:
    run = FinishedRun(run_dir)
    run_dir, stats, manifest = run.dir, run.stats, run.manifest
    figures: dict = {"funnel": [[s.label, s.stats["docs_in"], s.stats["docs_out"]] for s in run.stages],
                     "removed": {s.label: s.stats["removed"] for s in run.stages}}
    if manifest.get("sources"):
        figures["sources"] = {name: [[step["stage"], step["docs_in"], step["docs_out"]] for step in f["stages"]]
                              for name, f in manifest["sources"].items()}
    parts = ["<h2>Documents through the stages</h2>"]
    if stats and not manifest.get("sources"):
        labels = ["read"] + [s["stage"] for s in stats]
        counts = [stats[0]["docs_in"]] + [s["docs_out"] for s in stats]
        parts.append(bars(labels, counts, "documents kept after each stage"))
    parts.append(table(["stage", "in", "out", "removed", "by reason", "seconds", "docs/s"],
                       [[r.label, s["docs_in"], s["docs_out"], sum(s["removed"].values()),
                         ", ".join(f"{k}: {v}" for k, v in s["removed"].items()) or "-", s["seconds"],
                         f"{s['docs_in'] / s['seconds']:,.0f}" if s["seconds"] else "-"]
                        for r, s in zip(run.stages, stats)]))
    parts.append(_source_funnels(manifest))
    from pipeline.inspect import reason_commands
    commands = reason_commands(run)
    if commands:
        parts.append("<h3>Removed documents by reason, and the command that lists them</h3>"
                     + table(["stage", "reason", "documents", "command"], commands))
    sections = _sections(run)
    plots = [p for section in sections for p in section.plots]
    if plots:
        parts.append("<h2>Scores and lengths</h2>" + "".join(plots))
    for section in sections:
        figures.update(section.figures)
        if section.title:
            parts.append(f"<h2>{html.escape(section.title)}</h2>{section.body}")
    examples = _examples(run)
    if examples:
        parts.append("<h2>Removed examples (after PHI redaction)</h2>")
        parts.append(table(["stage", "reason", "id", f"text (redacted, then cut to {EXAMPLE_CHARS:,} characters)"],
                           examples))
    page = f"""<!doctype html><html><head><meta charset="utf-8"><title>medprep run report</title>
<style>body{{font-family:system-ui,sans-serif;max-width:1100px;margin:24px auto;color:#222}}
table{{border-collapse:collapse;margin:8px 0 18px}}
td,th{{border:1px solid #ccc;padding:4px 8px;font-size:13px;vertical-align:top}}
th{{background:#f3f3f3}}img{{margin:6px 12px 6px 0}}h2{{margin-top:28px;border-bottom:1px solid #ddd}}</style></head>
<body><h1>medprep run report</h1><p>{html.escape(str(run_dir))}</p>
{"".join(parts)}
<script type="application/json" id="figures">{html.escape(json.dumps(figures, sort_keys=True))}</script>
</body></html>"""
    out = run_dir / "report.html"
    out.write_text(page)
    return out
