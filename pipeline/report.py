"""Run report: report.html in the run folder, built from the stages' stats and outputs.

Figures are PNGs (matplotlib) embedded in the page. Removed examples are shown only after
redaction by the project's own PHI engine: documents removed before the phi stage still
carry identifiers. The numbers the page shows are also embedded as JSON (id="figures")."""
from __future__ import annotations

import base64
import html
import io
import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pipeline.storage import RunPath, as_run_path
from pipeline.store import read_shard, STATS, is_purged, read_json, shards

DOMAIN_TERMS = ["myocardial", "infarction", "carcinoma", "hypertension", "pharmacokinetics", "immunohistochemistry",
                "dexamethasone", "randomized", "cardiovascular", "chemotherapy", "mitochondrial", "glucocorticoid",
                "osteoarthritis", "schizophrenia", "angiotensin", "thrombocytopenia", "placebo", "cohort"]
EXAMPLES_PER_REASON = 2
SAMPLE = 20_000          # documents read for histograms


def load_stats(run_dir: Path) -> list[dict]:
    return sorted((read_json(p) for p in (run_dir / "stages").glob("*/" + STATS)), key=lambda s: s["position"])


def _stage_dir(run_dir: Path, s: dict) -> Path:
    return run_dir / "stages" / f"{s['position']:02d}_{s['stage']}"


def _read(folder: Path, sub: str = "data", columns=None, limit=SAMPLE) -> pa.Table | None:
    tables, n = [], 0
    for f in shards(folder, sub):
        for t in read_shard(f, None, list(columns) if columns else None):
            tables.append(t)
            n += t.num_rows
        if n >= limit:
            break
    return pa.concat_tables(tables).slice(0, limit) if tables else None


def _png(fig) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90, bbox_inches="tight")
    _pyplot().close(fig)
    return "<img alt='figure' src='data:image/png;base64," + base64.b64encode(buf.getvalue()).decode() + "'>"


def _pyplot():
    import matplotlib
    matplotlib.use("Agg")            # files only, no display
    import matplotlib.pyplot as plt
    return plt


def _hist(values, title, xlabel, line=None, log=False):
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(5.2, 2.8))
    values = np.asarray(values, dtype=float)
    values = values[np.isfinite(values)]
    if log:
        values = np.log10(np.maximum(values, 1e-9))
        xlabel = f"log10 {xlabel}"
        line = np.log10(line) if line else None
    ax.hist(values, bins=50, color="#4C78A8")
    if line is not None:
        ax.axvline(line, color="#E45756", linestyle="--", label="threshold")
        ax.legend()
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    ax.set_ylabel("documents")
    return _png(fig)


def _bars(labels, values, title, horizontal=True):
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6.4, max(2.2, 0.32 * len(labels) + 0.8)))
    if horizontal:
        ax.barh(labels[::-1], values[::-1], color="#4C78A8")
        for i, v in enumerate(values[::-1]):
            ax.text(v, i, f" {v:,}", va="center", fontsize=8)
    else:
        ax.bar(labels, values, color="#4C78A8")
    ax.set_title(title)
    return _png(fig)


def _table(header, rows) -> str:
    head = "".join(f"<th>{html.escape(str(h))}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in r) + "</tr>" for r in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def _texts_of(folder: Path, ids: set[str], id_map=None) -> dict[str, str]:
    """Texts of the given ids, streamed shard by shard (a stage is never held in memory).
    `id_map` turns the folder's ids into the wanted ones (phi's input ids into pseudonyms)."""
    found: dict[str, str] = {}
    wanted = pa.array(sorted(ids), pa.string())
    for f in shards(folder):
        for batch in read_shard(f, None, ["id", "text"]):
            batch_ids = batch["id"]
            if id_map is not None:
                batch_ids = pa.array(id_map(batch_ids.to_pylist()), pa.string())
            hit = pc.is_in(batch_ids, wanted)
            found.update(zip(batch_ids.filter(hit).to_pylist(), batch["text"].filter(hit).to_pylist()))
        if len(found) == len(ids):
            break
    return found


def _examples(run_dir: Path, stats: list[dict], manifest: dict) -> list[tuple[str, str, str, str]]:
    """(stage, reason, id, redacted text) for a few removed documents per reason. With a phi
    stage, documents removed before it are shown under their pseudonyms (as removed/ holds
    them once the run has purged its raw data), never under their raw ids."""
    from pipeline.phi.identifiers import report_ids
    phi = next((s for s in stats if s["stage"] == "phi"), None)
    to_pseudonym = report_ids(manifest, phi)
    picks = []
    for i, s in enumerate(stats):
        if not s["removed"] or s["stage"] in ("tokenizer", "pack"):
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
        elif i:
            # phi's removed ids are pseudonyms of the ids its input holds.
            texts = _texts_of(_stage_dir(run_dir, stats[i - 1]), {doc_id for _, doc_id in chosen},
                              to_pseudonym if s is phi else None)
        purged = is_purged(folder) or (i > 0 and is_purged(_stage_dir(run_dir, stats[i - 1])))
        raw_ids = to_pseudonym is not None and s["position"] < phi["position"] and not is_purged(folder)
        for reason, doc_id in chosen:
            shown = doc_id
            if raw_ids and not reason.startswith("malformed_"):       # malformed: file:line, kept
                shown = to_pseudonym([doc_id])[0]
            missing = "(no text: removed from the run folder after the run)" if purged \
                else "(no text: set aside by the reader)"
            picks.append((s["stage"], reason, shown, texts.get(doc_id), missing))
    texts = [text for *_, text, _ in picks if text]
    redacted = iter([])
    if texts:
        from pipeline.phi.engine import PhiEngine
        # Redact the whole text, then cut: a value on the cut would otherwise show in part.
        redacted = iter(t[:1500] for t in PhiEngine().setup().redact_batch(texts)[0])
    return [(stage, reason, doc_id, next(redacted) if text else missing)
            for stage, reason, doc_id, text, missing in picks]


def write_report(run_dir) -> RunPath:
    run_dir = as_run_path(run_dir)
    stats = load_stats(run_dir)
    by = {s["stage"]: s for s in stats}
    manifest = read_json(run_dir / "manifest.json") if (run_dir / "manifest.json").exists() else {}
    figures: dict = {"funnel": [[s["stage"], s["docs_in"], s["docs_out"]] for s in stats],
                     "removed": {s["stage"]: s["removed"] for s in stats}}
    parts = ["<h2>Documents through the stages</h2>"]
    if stats:
        labels = ["read"] + [s["stage"] for s in stats]
        counts = [stats[0]["docs_in"]] + [s["docs_out"] for s in stats]
        parts.append(_bars(labels, counts, "documents kept after each stage"))
    parts.append(_table(["stage", "in", "out", "removed", "by reason", "seconds", "docs/s"],
                        [[s["stage"], s["docs_in"], s["docs_out"], sum(s["removed"].values()),
                          ", ".join(f"{k}: {v}" for k, v in s["removed"].items()) or "-", s["seconds"],
                          f"{s['docs_in'] / s['seconds']:,.0f}" if s["seconds"] else "-"] for s in stats]))
    from pipeline.inspect import reason_commands
    commands = reason_commands(run_dir, stats, manifest)
    if commands:
        parts.append("<h3>Removed documents by reason, and the command that lists them</h3>"
                     + _table(["stage", "reason", "documents", "command"], commands))

    last_docs = next((_stage_dir(run_dir, s) for s in reversed(stats) if s["stage"] in ("split", "dedup_minhash",
                      "dedup_exact", "phi", "toxicity", "heuristics")), None)
    sample = _read(last_docs) if last_docs else None
    hists = []
    if sample is not None:
        if "lang_score" in sample.column_names:
            cfg = manifest.get("config", {})
            hists.append(_hist(sample["lang_score"].to_numpy(zero_copy_only=False), "language score (kept)", "fastText probability",
                               line=_option(cfg, "langid", "min_score", 0.65)))
        if "perplexity" in sample.column_names:
            hists.append(_hist(sample["perplexity"].to_numpy(zero_copy_only=False), "KenLM perplexity (kept)", "perplexity",
                               line=_option(manifest.get("config", {}), "perplexity", "max_perplexity", 5000.0), log=True))
        tok_path = run_dir / "tokenizer/tokenizer.json"
        if tok_path.exists():
            from tokenizers import Tokenizer
            tok = Tokenizer.from_str(tok_path.read_text())
            texts = sample["text"].to_pylist()
            lengths = np.array([len(e.ids) for e in tok.encode_batch(texts, add_special_tokens=False)])
            words = sum(len(t.split()) for t in texts)
            hists.append(_hist(lengths, "document length", "tokens"))
            figures["tokens_per_word"] = round(float(lengths.sum() / max(words, 1)), 3)
            figures["domain_terms"] = {t: len(tok.encode(" " + t, add_special_tokens=False).ids) for t in DOMAIN_TERMS}
    if hists:
        parts.append("<h2>Scores and lengths</h2>" + "".join(hists))

    if "phi" in by:
        ents = by["phi"].get("entities", {})
        figures["phi_entities"] = ents
        parts.append("<h2>PHI replaced, by type</h2>")
        parts.append(f"<p>{by['phi'].get('docs_with_phi', 0):,} documents had at least one identifier replaced "
                     f"({by['phi'].get('mode', 'placeholder')} mode). Counts only: no value is ever recorded.</p>")
        if ents:
            parts.append(_bars(list(ents), list(ents.values()), "entities replaced"))
    if "dedup_minhash" in by:
        sizes = by["dedup_minhash"].get("cluster_sizes", {})
        figures["cluster_sizes"] = sizes
        m = by["dedup_minhash"]
        parts.append(f"<h2>Near-duplicate clusters</h2><p>{m.get('bands')} bands x {m.get('rows')} rows, threshold "
                     f"{m.get('threshold')}, {m.get('candidate_pairs', 0):,} candidate pairs.</p>")
        parts.append(_table(["cluster size", "clusters"], sorted(sizes.items(), key=lambda kv: int(kv[0]))) if sizes
                     else "<p>No near-duplicate clusters.</p>")
    if "tokens_per_word" in figures:
        parts.append("<h2>Tokenizer</h2>")
        parts.append(f"<p>{figures['tokens_per_word']} tokens per word on the kept documents.</p>")
        parts.append(_table(["domain term", "tokens"], list(figures["domain_terms"].items())))
    if (by.get("tokenizer") or {}).get("comparison"):
        parts.append(_tokenizer_comparison(by["tokenizer"], figures))
    if "sequences" in manifest:
        figures.update({k: manifest[k] for k in ("tokens", "sequences", "leftover_tokens", "steps_per_epoch", "seq_len",
                                                  "batch_size") if k in manifest})
        figures["validation_near_train"] = manifest.get("validation_near_train")
        rows = [[s, v["documents"], v["tokens"], v["sequences"], v["leftover_tokens"]] for s, v in manifest["splits"].items()]
        parts.append("<h2>Packed sequences</h2>" + _table(["split", "documents", "tokens", "sequences", "leftover tokens"], rows))
        parts.append(f"<p>{manifest['sequences']:,} sequences of {manifest['seq_len']} tokens; "
                     f"{manifest['steps_per_epoch']:,} steps per epoch at batch size {manifest['batch_size']}. "
                     f"Validation documents sharing an LSH bucket with a train document: "
                     f"{manifest.get('validation_near_train', 'not checked')}.</p>")
    examples = _examples(run_dir, stats, manifest)
    if examples:
        parts.append("<h2>Removed examples (after PHI redaction)</h2>")
        parts.append(_table(["stage", "reason", "id", "text (redacted, then cut to 1,500 characters)"], examples))
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


def _tokenizer_comparison(stats: dict, figures: dict) -> str:
    """The run's tokenizer beside general ones on the validation split (stats of the tokenizer stage)."""
    comp, corpus, examples = stats["comparison"], stats["comparison_corpus"], stats["comparison_examples"]
    figures["tokenizer_comparison"] = comp
    general = ("gpt2", "cl100k", "o200k")
    # The run's tokenizer (and an extension's base, and named files) first, then the general ones.
    names = [n for n in comp if n not in general] + [n for n in general if n in comp]
    rows = [[n, f"{c['vocab_size']:,}", c["tokens_per_word"], c["chars_per_token"],
             "-" if c["domain_terms_one_token"] is None else f"{c['domain_terms_one_token']:.1%}",
             c["median_doc_tokens"], c["p90_doc_tokens"], c["docs_per_sequence"]] for n, c in ((n, comp[n]) for n in names)]
    out = [f"<h2>Tokenizers compared</h2><p>On the {corpus['documents']:,} validation documents "
           f"({corpus['words']:,} words), never on training text. Domain terms: the "
           f"{corpus['domain_terms']} most frequent lower-case words of these documents that are rare in "
           f"general English (wordfreq Zipf below 3.5), each after a space.</p>",
           _table(["tokenizer", "vocabulary", "tokens per word", "characters per token", "domain terms in one token",
                   "median document (tokens)", "p90 document (tokens)", f"documents per {corpus['seq_len']:,}-token sequence"],
                  rows)]
    terms = list(next(iter(examples.values()))) if examples else []
    out.append(_table(["term"] + names, [[t] + [" | ".join(p.strip() or p for p in examples[n][t]) for n in names]
                                         for t in terms]))
    return "".join(out)


def _option(config: dict, stage: str, key: str, default):
    for entry in config.get("stages", []):
        if isinstance(entry, dict) and stage in entry:
            return (entry[stage] or {}).get(key, default)
    return default
