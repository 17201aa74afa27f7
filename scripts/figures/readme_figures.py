#!/usr/bin/env python3
"""Figures in README.md and the docs pages (docs/**/*.md), from the result files the benchmark
and evaluation scripts write.

    python scripts/figures/readme_figures.py --check     # exit 1 naming each figure that differs, page by page
    python scripts/figures/readme_figures.py --write     # regenerate them in place
    python scripts/figures/readme_figures.py --check FILE.md ...   # only these files

Without FILE arguments the pages are README.md and every `*.md` under docs/ (of `--root`, by
default the repository): a new docs page is checked as soon as it exists.

Two kinds of marker tie a figure to a result file:
- a block, `<!-- figures:NAME -->` ... `<!-- /figures:NAME -->`: its lines are rendered by
  the function NAME in RENDERERS below (tables and the sentences that quote them);
- an inline value, `<!-- fig FILE:PATH[ FORMAT] -->VALUE<!-- /fig -->`: VALUE is the number at
  PATH in bench/FILE, formatted with the Python format spec FORMAT (default `,`). PATH is
  dot-separated; in a list, a segment picks the element whose stage/chain/name/rule/key field
  equals it (or an integer index).

The result files: bench/results.json (`make bench`: scripts/benchmarks/bench.py and
scripts/benchmarks/bench_minhash_scale.py), bench/heuristics.json (scripts/figures/heuristics_table.py),
bench/phi_eval.json (scripts/evaluation/eval_phi.py), bench/executor.json (scripts/benchmarks/bench_executor.py),
bench/retune.json (scripts/benchmarks/bench_retune.py), bench/default_run.json (scripts/figures/default_run_figures.py),
bench/heuristics_compat.json (scripts/benchmarks/bench_heuristics_compat.py), bench/decontaminate.json
(scripts/benchmarks/bench_decontaminate.py), bench/sources.json (scripts/figures/sources_figures.py),
bench/megatron_blend.json (scripts/evaluation/verify_megatron.py, in its own virtualenv), bench/phi_literature.json
(scripts/evaluation/audit_phi_literature.py), bench/scale.json (scripts/benchmarks/bench_scale.py),
bench/ci_time.json (scripts/benchmarks/ci_time.py).
Standard library only: the check runs in a hook."""
from __future__ import annotations

import argparse
import difflib
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "bench"
# A marker in backticks is an example in the text, not a figure.
BLOCK = re.compile(r"(?<!`)<!-- figures:(?P<name>[\w-]+) -->\n(?P<body>.*?)<!-- /figures:(?P=name) -->", re.S)
INLINE = re.compile(
    r"(?<!`)<!-- fig (?P<file>[\w.-]+):(?P<path>[\w.:-]+)(?: (?P<fmt>[^ ]+))? -->(?P<value>.*?)<!-- /fig -->"
)
LIST_KEYS = ("stage", "chain", "name", "rule", "key")


class MissingSource(Exception):
    pass


def load(name: str, cache: dict) -> dict:
    if name not in cache:
        path = BENCH / name
        if not path.exists():
            raise MissingSource(f"bench/{name} is missing")
        cache[name] = json.loads(path.read_text())
    return cache[name]


def lookup(data, path: str):
    for seg in path.split("."):
        if isinstance(data, list):
            match = [x for x in data if isinstance(x, dict) and any(x.get(k) == seg for k in LIST_KEYS)]
            if match:
                data = match[0]
            elif seg.isdigit() and int(seg) < len(data):
                data = data[int(seg)]
            else:
                raise KeyError(path)
        else:
            data = data[seg]
    return data


def n(x, digits: int = 0) -> str:
    """1234.5 -> '1,234' (digits=0) or '1,234.5' (digits=1)."""
    return f"{x:,.{digits}f}"


def docs_per_s(x: float) -> str:
    return n(x, 1) if x < 100 else n(x)


# --- renderers: one per figures block ------------------------------------------------------

STAGE_LABELS = {
    "phi": "phi ({docs:,} abstracts)",
    "phi_notes": "phi ({docs:,} clinical notes)",
    "minhash_signatures_xxh32": "MinHash signatures, xxh32",
    "minhash_signatures_sha1": "MinHash signatures, sha1",
    "dedup_minhash": "dedup_minhash (whole stage, xxh32)",
    "split": "split (with the LSH leak check)",
    "tokenizer": "tokenizer (train)",
}


def bench_stages(src: dict) -> str:
    r = load("results.json", src)
    lines = [
        "| stage | docs per CPU-second | MB per CPU-second | peak RSS MB | raw engine on the same documents "
        "| engine docs per CPU-second | stage / engine |",
        "|---|---:|---:|---:|---|---:|---:|",
    ]
    for s in r["stages"]:
        if "error" in s:
            lines.append(f"| {s['stage']} | not measured (error in bench/results.json) | | | | | |")
            continue
        label = STAGE_LABELS.get(s["stage"], s["stage"]).format(docs=s["docs"])
        engine = (
            f"{s['engine']} | {docs_per_s(s['engine_docs_per_cpu_s'])} | {s['stage_vs_engine']:.2f}"
            if "engine" in s
            else "– | – | –"
        )
        lines.append(
            f"| {label} | {docs_per_s(s['docs_per_cpu_s'])} | {s['MB_per_cpu_s']} | {n(s['peak_rss_mb'])} | {engine} |"
        )
    return "\n".join(lines) + "\n"


CHAIN_LABELS = {
    "chain_without_phi": "everything but phi (normalize … pack)",
    "subchain": "heuristics (datatrove's rules) → dedup_exact → dedup_minhash → pack",
}


def bench_chains(src: dict) -> str:
    r = load("results.json", src)
    chains = {c["chain"]: c for c in r["chains"]}
    lines = ["| chain | documents | wall | CPU | docs per CPU-second | peak RSS |", "|---|---:|---:|---:|---:|---:|"]
    for key, label in CHAIN_LABELS.items():
        if key in chains:
            c = chains[key]
            lines.append(
                f"| {label} | {c['docs']:,} | {c['wall_s']:.1f} s | {c['cpu_s']:.1f} s | "
                f"{docs_per_s(c['docs_per_cpu_s'])} | {n(c['peak_rss_mb'])} MB |"
            )
    d = r.get("datatrove", {})
    if "docs_per_cpu_s" in d:
        lines.append(
            f"| datatrove {d['datatrove_version']}: Gopher repetition + quality, C4 quality, "
            f"exact dedup, MinHash 14×8, DocumentTokenizer | {r['docs']:,} | {d['wall_s']:.1f} s | "
            f"{d['cpu_s']:.1f} s | {docs_per_s(d['docs_per_cpu_s'])} | {n(d['peak_rss_mb'])} MB |"
        )
    for k in (1, 2):
        c = chains.get(f"phi_num_proc_{k}")
        if c and "error" in c:
            lines.append(f"| phi alone, `num_proc: {k}` | not measured (error in bench/results.json) | | | | |")
        elif c:
            lines.append(
                f"| phi alone, {c['docs']:,} abstracts, `num_proc: {k}` | {c['docs']:,} | {c['wall_s']:.1f} s | "
                f"{c['cpu_s']:.1f} s | {docs_per_s(c['docs_per_cpu_s'])} ({docs_per_s(c['docs_per_s'])} docs/s wall) "
                f"| {n(c['peak_rss_mb'])} MB |"
            )
    return "\n".join(lines) + "\n"


def bench_versus_datatrove(src: dict) -> str:
    r = load("results.json", src)
    d = r["datatrove"]
    ours = next(c for c in r["chains"] if c["chain"] == "subchain")
    st = d["datatrove_steps_s"]
    sp = d.get("spacy_tokenization", {})
    ours_time = ", ".join(f"{k} {v:.1f} s" for k, v in ours["stage_wall_s"].items())
    dt_time = ", ".join(f"{k} {v:.1f} s" for k, v in st.items())
    text = (
        f"**Our sub-chain does {r['ours_vs_datatrove_docs_per_cpu_s']:.1f}x datatrove's documents per CPU-second** "
        f"on the same work ({ours['docs_per_cpu_s']:,.0f} against {d['docs_per_cpu_s']:,.1f}). "
        f"Where the time goes (wall seconds per step): ours {ours_time}; datatrove {dt_time}."
    )
    if sp:
        spacy_ms = (
            sp["gopher_word_tokenize_ms_per_doc"]
            + sp["c4_sentence_split_ms_per_doc"]
            + sp["minhash_simplify_and_word_tokenize_ms_per_doc"]
        )
        text += (
            f" datatrove's spaCy tokenization alone (timed on the first {sp['docs']:,} documents) costs "
            f"{sp['gopher_word_tokenize_ms_per_doc']:.1f} ms per document for the Gopher words, "
            f"{sp['c4_sentence_split_ms_per_doc']:.1f} ms for C4's sentences (every line; datatrove splits only "
            f"the lines that pass the line rules) and {sp['minhash_simplify_and_word_tokenize_ms_per_doc']:.1f} ms "
            f"for MinHash's words: up to {spacy_ms:.1f} of the {1000 / d['docs_per_cpu_s']:.1f} CPU-ms its chain "
            f"spends per document, against {1000 / ours['docs_per_cpu_s']:.2f} for our whole chain."
        )
    fk = d.get("filters_kept")
    if fk:
        text += (
            f" The matched filters are not identical: of the {r['docs']:,} documents datatrove's filters kept "
            f"{fk['datatrove']:,} and ours {fk['ours']:,}, {fk['both']:,} ids in both "
            f"(`python scripts/benchmarks/bench.py --only filters-agreement` recounts them)."
        )
    return text + "\n"


def minhash_scale(src: dict) -> str:
    m = load("results.json", src)["minhash_scale"]
    return (
        f"Measured on one core (`python scripts/benchmarks/bench_minhash_scale.py --docs {m['docs']}`): "
        f"{m['docs']:,} documents "
        f"({m['input_MB'] / 1000:.1f} GB of text built from real MEDLINE sentences, {m['planted_near_duplicates']:,} "
        f"planted near duplicates) in {m['cpu_s']:,.0f} CPU-seconds "
        f"({m['docs'] / m['cpu_s']:,.0f} docs per CPU-second; "
        f"{m['wall_s']:,.0f} s wall on the shared machine), peak RSS {m['peak_rss_MB']:,} MB "
        f"for the whole process; {m['planted_caught']:,} planted duplicates caught (recall {100 * m['recall']:.2f} %), "
        f"{m['false_merges']:,} documents that were not planted removed (false merges), "
        f"`clustering: {m['clustering']}`, "
        f"{m['bands']} bands × {m['rows']} rows.\n"
    )


def minhash_like_for_like(src: dict) -> str:
    stages = {s["stage"]: s for s in load("results.json", src)["stages"]}
    parts = []
    for h in ("xxh32", "sha1"):
        s = stages.get(f"minhash_signatures_{h}")
        if s:
            parts.append(
                f"with {h} on both sides, ours {s['docs_per_cpu_s']:,.0f} and datasketch "
                f"{s['engine_docs_per_cpu_s']:,.0f} docs per CPU-second ({s['stage_vs_engine']:.2f}x)"
            )
    return (
        "Signatures alone on abstracts (`python scripts/benchmarks/bench.py`, the same shingles fed to "
        "`datasketch.MinHash.bulk(hashfunc=...)`): " + "; ".join(parts) + ".\n"
    )


def heuristics_table(src: dict) -> str:
    h = load("heuristics.json", src)
    total = h["documents"]

    def pct(k: int) -> str:
        return f"{k:,} ({100 * k / total:.2f} %)"

    lines = [
        "| rule | datatrove defaults | pubmed.yaml | removes alone, datatrove defaults | removes alone, pubmed.yaml |",
        "|---|---|---|---:|---:|",
    ]
    for row in h["rules"]:
        if (
            row["fires_datatrove_defaults"]
            or row["fires_pubmed_yaml"]
            or row["datatrove_defaults"] != row["pubmed_yaml"]
        ):
            lines.append(
                f"| `{row['rule']}` | {row['datatrove_defaults']} | {row['pubmed_yaml']} | "
                f"{pct(row['fires_datatrove_defaults'])} | {pct(row['fires_pubmed_yaml'])} |"
            )
    rm = h["removed"]
    lines.append("")
    lines.append(
        f"Any rule, on the {total:,} documents: the stage defaults (200-word minimum) remove "
        f"{pct(rm['stage_defaults']['documents'])}, datatrove's defaults (50-word minimum) "
        f"{pct(rm['datatrove_defaults']['documents'])}, `configs/pubmed.yaml` {pct(rm['pubmed_yaml']['documents'])}, "
        f"and pubmed.yaml with C4's line and sentence rules on (`c4_lines: true, c4_min_sentences: 5`) "
        f"{pct(rm['pubmed_yaml_with_c4_lines']['documents'])}."
    )
    return "\n".join(lines) + "\n"


def executor_scaling(src: dict) -> str:
    e = load("executor.json", src)
    labels = {
        "local_1_process": "local, `num_proc: 1`",
        "local_2_processes": "local, `num_proc: 2`",
        "ray_1_worker": "Ray (local instance, 2 CPUs), 1 worker per stage",
        "ray_2_workers": "Ray (local instance, 2 CPUs), 2 workers per stage",
    }
    lines = ["| executor | documents read | chain wall | docs/s | docs/s per worker |", "|---|---:|---:|---:|---:|"]
    for name, run in e["runs"].items():
        workers = 1 if name in ("ray_1_worker", "local_1_process") else 2
        lines.append(
            f"| {labels.get(name, name)} | {run['docs_read']:,} | {run['chain_seconds']:,.1f} s | "
            f"{run['docs_per_s']:,.1f} | {run['docs_per_s'] / workers:,.1f} |"
        )
    lines.append("")
    same = "byte-identical" if e["identical_outputs"] else "NOT identical"
    text = (
        f"The {len(e['runs'])} runs' data/, removed/, tokenizer and final/ files ({e['files_compared']:,} files) are "
        f"{same}. 2 Ray workers do {e['speedup_2_vs_1_ray_workers']:.2f}x the documents per second of 1"
    )
    if "speedup_2_vs_1_local_processes" in e:
        text += (
            f"; 2 local processes {e['speedup_2_vs_1_local_processes']:.2f}x one; 1 Ray worker "
            f"{e['ray_1_worker_vs_local_1_process']:.2f}x one local process, 2 Ray workers "
            f"{e['ray_2_workers_vs_local_2_processes']:.2f}x two"
        )
    text += "."
    if "load_average_at_start" in e:
        text += (
            f" Load average (1, 5, 15 min) at the start {', '.join(f'{x:.1f}' for x in e['load_average_at_start'])}, "
            f"at the end {', '.join(f'{x:.1f}' for x in e['load_average_at_end'])} "
            f"({e['docs']:,} documents, {e['date'][:10]})."
        )
    lines.append(text)
    p = e["projection"]
    d = e["driver_steps"]
    lines.append("")
    lines.append("| 36 M abstracts on | hours | shard tasks | reading the source (per file) | driver |")
    lines.append("|---:|---:|---:|---:|---:|")
    for cores, row in p["cores"].items():
        lines.append(
            f"| {int(cores):,} cores | {row['hours']:.2f} | {row['tasks_hours']:.2f} | {row['ingest_hours']:.3f} | "
            f"{row['driver_hours']:.2f} |"
        )
    lines.append("")
    lines.append(
        f"Driver steps timed at {d['docs']:,} documents: exact dedup's first row per hash "
        f"{d['exact_first_row_s']:.1f} s, "
        f"MinHash star clustering over {d['verified_pairs']:,} verified pairs {d['minhash_star_clusters_s']:.1f} s "
        f"(connected components {d['minhash_components_s']:.1f} s), pack's plan over {d['pack_plan_shards']:,} shards' "
        f"bin counts {d['pack_plan_s']:.2f} s, tokenizer training on a "
        f"{d['tokenizer_train_docs']:,}-document sample {d['tokenizer_train_s']:.1f} s"
        + (
            f" (from the word counts its tasks made, {d['tokenizer_count_words_task_s']:.1f} s of task time in all)"
            if "tokenizer_count_words_task_s" in d
            else ""
        )
        + "."
    )
    return "\n".join(lines) + "\n"


def retune(src: dict) -> str:
    r = load("retune.json", src)
    before, after = r["max_score"]["before"], r["max_score"]["after"]
    lines = [
        "| run (first 1,500 abstracts, configs/pubmed.yaml) | wall | chain | toxicity | phi "
        "| phi cache hits / misses |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for name, label in (
        ("first", f"first run, `max_score: {before}`"),
        ("retune", f"retune to `{after}`, same run folder"),
        ("fresh", f"fresh run with `{after}`, another folder"),
    ):
        run = r[name]
        tox, phi = run["stages"]["toxicity"], run["stages"]["phi"]
        cache = phi.get("cache") or {}
        how = " (stored scores, no model)" if tox.get("decided_from_stored_scores") else ""
        lines.append(
            f"| {label} | {run['wall_s']:,.1f} s | {run['chain_seconds']:,.1f} s | {tox['seconds']:,.1f} s{how} | "
            f"{phi['seconds']:,.1f} s | {cache.get('hits', 0):,} / {cache.get('misses', 0):,} |"
        )
    lines.append("")
    same = "byte-identical" if r["identical_final_and_tokenizer"] else "NOT identical"
    lines.append(
        f"The retune takes {r['retune_vs_first_wall'] * 100:.1f} % of the first run's wall time "
        f"({r['retune_vs_first_chain'] * 100:.1f} % of its chain time); its final/ and tokenizer/ files "
        f"({r['files_compared']} files) are {same} to the fresh run's."
    )
    pairs = r.get("pairs") or []
    if len(pairs) > 1:
        lines[-1] += (
            f" The first and retune rows are the median of {len(pairs)} first/retune pairs, whose ratios were "
            + ", ".join(f"{q['retune_vs_first_wall']:.3f}" for q in pairs)
            + "."
        )
    return "\n".join(lines) + "\n"


def heuristics_compat(src: dict) -> str:
    h = load("heuristics_compat.json", src)
    dt, med = h["compat_datatrove"], h["compat_medprep"]
    names = {
        "gopher_quality": "GopherQualityFilter",
        "gopher_repetition": "GopherRepetitionFilter",
        "c4": "C4QualityFilter",
        "fineweb": "FineWebQualityFilter",
    }
    lines = [
        "| datatrove's filter, or one rule alone | agree, compat: datatrove | datatrove removes, we keep "
        "| we remove, datatrove keeps | agree, compat: medprep |",
        "|---|---:|---:|---:|---:|",
    ]
    for kind in ("per_filter", "per_rule"):
        for name, row in dt[kind].items():
            label = f"**{names[name]}** (defaults)" if kind == "per_filter" else f"`{name}`"
            lines.append(
                f"| {label} | {row['agree_percent']:.2f} % | {row['datatrove_removes_we_keep']:,} | "
                f"{row['we_remove_datatrove_keeps']:,} | {med[kind][name]['agree_percent']:.2f} % |"
            )
    corpus = h["corpus"]
    n, abstracts = corpus["documents"], corpus["by_source"]["medline"]
    c4 = dt["per_filter"]["c4"]
    lines.append("")
    lines.append(
        f"{n:,} documents: {abstracts:,} MEDLINE abstracts and {n - abstracts:,} pages of software documentation. "
        f"Where both keep a document, C4's kept text is identical on {c4['kept_text_identical']:,} of "
        f"{c4['kept_by_both']:,} (compat: datatrove). datatrove {h['versions']['datatrove']}, "
        f"spaCy {h['versions']['spacy_datatrove']} on both sides."
    )
    sp = h.get("speed_abstracts")
    if sp:
        lines.append("")
        lines.append(
            f"The stage alone on {sp['pubmed_yaml_medprep']['docs']:,} abstracts, one process: configs/pubmed.yaml's "
            f"heuristics {sp['pubmed_yaml_medprep']['docs_per_cpu_s']:,.0f} docs per CPU-second in compat: medprep "
            f"and {sp['pubmed_yaml_datatrove']['docs_per_cpu_s']:,.0f} in compat: datatrove; datatrove's defaults "
            f"(FineWeb's rules on) {sp['datatrove_defaults_datatrove']['docs_per_cpu_s']:,.0f} in compat: datatrove."
        )
    return "\n".join(lines) + "\n"


def _leak_cell(result: dict | None, typ: str | None) -> str:
    """'mentions left / values left' of one system on one type (or all types: typ None), in %."""
    if result is None:
        return "not run"
    if typ is None:
        m, v = result["mention_leak"], result["value_leak"]
    else:
        m, v = result["mention_leak_by_type"].get(typ), result["value_leak_by_type"].get(typ)
        if m is None or v is None:
            return "-"
    return f"{m['rate'] * 100:.1f} / {v['rate'] * 100:.1f}"


def _phi_by_type(columns: list[tuple[str, dict | None]], title: str) -> str:
    """A table: per gold type (n mentions), each column's mentions / values left, then all types
    and the other (non-PHI) tokens changed."""
    types = next(r for _, r in columns if r is not None)["mention_leak_by_type"]
    lines = [
        f"| {title} (mentions) | " + " | ".join(name for name, _ in columns) + " |",
        "|---|" + "---:|" * len(columns),
    ]
    for typ in sorted(types, key=lambda t: -types[t]["n"]):
        lines.append(f"| {typ} ({types[typ]['n']:,}) | " + " | ".join(_leak_cell(r, typ) for _, r in columns) + " |")
    total = sum(t["n"] for t in types.values())
    lines.append(
        f"| all types ({total:,}) | "
        + " | ".join(f"**{_leak_cell(r, None)}**" if r else "not run" for _, r in columns)
        + " |"
    )
    lines.append(
        "| other tokens changed | "
        + " | ".join(f"{r['non_phi_tokens']['rate'] * 100:.2f}" if r else "not run" for _, r in columns)
        + " |"
    )
    return "\n".join(lines) + "\n"


def phi_by_type_deid(src: dict) -> str:
    """The deid-dev notes by type: cross-validated by patient, fitted without them (cross-style),
    in-sample, and the anchors (Philter, Presidio), % of mentions / values left."""
    e = load("phi_eval.json", src)
    systems = e["dev"]["systems"]
    return _phi_by_type(
        [
            ("5-fold CV by patient", e["cv"]["at_default"]),
            ("fitted without deid-dev", e["cross_style"]["deid_dev_without_deid"]["at_default"]),
            ("in-sample (not evidence)", systems["medprep_phi"]),
            ("Philter", systems.get("philter")),
            ("Presidio", systems.get("presidio")),
        ],
        "deid-dev type",
    )


def _held_out_by_type(src: dict, section: str, cross_key: str, without: str, title: str) -> str:
    """A source a detector was fitted without (cross-style) by type: that result, the committed
    stage's (in-sample) and the anchors, % of mentions / values left."""
    e = load("phi_eval.json", src)
    systems = e[section]["systems"]
    return _phi_by_type(
        [
            (f"fitted without {without}", e["cross_style"][cross_key]["at_default"]),
            ("in-sample (not evidence)", systems["medprep_phi"]),
            ("Philter", systems.get("philter")),
            ("Presidio", systems.get("presidio")),
        ],
        title,
    )


def phi_by_type_asq(src: dict) -> str:
    """The asq-dev clinical questions by type."""
    return _held_out_by_type(src, "asq_dev", "asq_dev_without_asq", "asq-dev", "asq-dev type")


def phi_by_type_web_ner(src: dict) -> str:
    """The WNUT 2017 and Broad Twitter Corpus test sets by type."""
    return _held_out_by_type(src, "web_ner", "web_ner_without_web", "web-ner", "social media type")


def phi_by_type_litbank(src: dict) -> str:
    """LitBank by type."""
    return _held_out_by_type(src, "litbank", "litbank_without_fiction", "LitBank", "LitBank type")


def _pair(r: dict | None) -> str:
    return "not run" if r is None else f"{100 * r['mention_leak']:.2f} / {100 * r['value_leak']:.2f}"


def _changed(r: dict) -> str:
    """Other tokens changed, and in brackets the same outside the URLs, e-mail addresses and
    @handles the corpus does not label (eval_phi.UNLABELLED_IDENTIFIERS)."""
    outside = r.get("non_phi_tokens_changed_outside_identifiers")
    cell = f"{100 * r['non_phi_tokens_changed']:.2f} %"
    return cell if outside is None else f"{cell} ({100 * outside:.2f} %)"


def phi_held_out(src: dict) -> str:
    """Leave-one-source-out, worst first: each source scored by the stage fitted without it, beside
    the in-sample result and the anchors on the same text (% of mentions / % of values left)."""
    e = load("phi_eval.json", src)["held_out"]
    rows = [
        "| source | how it is held out | mentions | **held out** | other tokens changed (outside URLs, "
        "e-mail addresses, @handles) | in-sample "
        "(not evidence) | Philter | Presidio |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in sorted(e["sources"], key=lambda r: (-r["mention_leak"], r["key"])):
        bold = "**" if r["key"] == e["worst"]["key"] else ""
        in_sample = "= held out" if r["never_fitted"] else _pair(r["in_sample"])
        rows.append(
            f"| {bold}{r['source']}{bold} | {r['held_out']} | {r['mentions']:,} | {bold}{_pair(r)}{bold} | "
            f"{_changed(r)} | {in_sample} | {_pair(r['anchors']['philter'])} | "
            f"{_pair(r['anchors']['presidio'])} |"
        )
    return "\n".join(rows) + "\n"


def phi_held_out_by_type(src: dict) -> str:
    """Leave-one-source-out by type: each source's types, % of mentions / % of values left."""
    e = load("phi_eval.json", src)["held_out"]
    rows = ["| source | type (mentions) | mentions left | values left |", "|---|---|---:|---:|"]
    for r in sorted(e["sources"], key=lambda r: (-r["mention_leak"], r["key"])):
        for typ, t in sorted(r["by_type"].items(), key=lambda kv: (-kv[1]["n"], kv[0])):
            value = "—" if t["value_leak"] is None else f"{100 * t['value_leak']:.1f} %"
            rows.append(f"| {r['key']} | {typ} ({t['n']:,}) | {100 * t['mention_leak']:.1f} % | {value} |")
    return "\n".join(rows) + "\n"


def _never_fitted_by_type(src: dict, section: str, title: str) -> str:
    """A source nothing here was fitted on, by type: ours (held out and in-sample at once) and the
    anchors, % of mentions / values left."""
    systems = load("phi_eval.json", src)[section]["systems"]
    return _phi_by_type(
        [
            ("ours (never fitted on it)", systems["medprep_phi"]),
            ("Philter", systems.get("philter")),
            ("Presidio", systems.get("presidio")),
        ],
        title,
    )


def phi_by_type_web(src: dict) -> str:
    return _never_fitted_by_type(src, "web_ewt", "UNER EWT type")


def phi_by_type_news(src: dict) -> str:
    return _never_fitted_by_type(src, "news", "encyclopedia and news type")


def phi_by_type_mimesis(src: dict) -> str:
    return _never_fitted_by_type(src, "synthetic_mimesis", "mimesis type")


def phi_by_type_mimesis_formats(src: dict) -> str:
    return _never_fitted_by_type(src, "synthetic_mimesis_formats", "mimesis formats type")


def phi_literature_audit(src: dict) -> str:
    """Every placeholder the literature profile wrote into the audited abstracts, with the text it
    replaced and the verdict given by hand (scripts/evaluation/audit_phi_literature.py)."""
    e = load("phi_literature.json", src)
    rows = ["| abstract | type | replaced | in context | verdict |", "|---|---|---|---|---|"]
    for item in e["items"]:
        context = item["context"].replace("|", "\\|")
        rows.append(f"| {item['id']} | {item['type']} | {item['value']} | {context} | {item['verdict']} |")
    return "\n".join(rows) + "\n"


def chain_at_scale(src: dict) -> str:
    """bench/scale.json (scripts/benchmarks/bench_scale.py): per stage, docs per CPU-second at each size and
    worker count, cost per document against the smallest size, peak RSS, the 2-over-1 wall."""
    d = load("scale.json", src)
    runs = {(r["docs"], r["workers"]): r for r in d["runs"]}
    sizes = sorted({k[0] for k in runs})
    smallest, largest = sizes[0], sizes[-1]
    cols = [(size, w) for size in sizes for w in (1, 2) if (size, w) in runs]
    both = [s for s in sizes if d["by_size"][str(s)]["wall_2_vs_1"] is not None]   # 1 and 2 workers, same code
    head = ["stage"] + [f"{size:,} docs, {w} worker{'s' if w > 1 else ''}" for size, w in cols]
    head += [f"CPU/doc at {largest:,} vs {smallest:,}", f"peak RSS MB at {largest:,} (driver / worker)",
             "wall 2 vs 1 worker" + (f" ({max(both):,})" if both else "")]
    lines = ["| " + " | ".join(head) + " |", "|---" + "|---:" * (len(head) - 1) + "|"]
    w_big = 2 if (largest, 2) in runs else 1
    for name in runs[cols[0]]["stages"]:
        cells = [f"`{name}`"]
        for key in cols:
            st = runs[key]["stages"].get(name) or {}
            cells.append(f"{st['docs_per_cpu_s']:,.0f}" if st.get("docs_per_cpu_s") else "—")
        ratio = d["by_stage"].get(name, {}).get(str(largest), {}).get(f"cost_ratio_vs_{smallest}_w{w_big}")
        cells.append(f"{ratio:.2f}" if ratio is not None else "—")
        rss = runs[(largest, w_big)]["stages"][name]["peak_rss_mb"]
        cells.append(f"{rss['driver'] or '—'} / {rss['worker'] or '—'}")
        if both:
            one, two = runs[(both[-1], 1)]["stages"][name], runs[(both[-1], 2)]["stages"][name]
            cells.append(f"{two['wall_s'] / one['wall_s']:.2f}" if one["wall_s"] else "—")
        else:
            cells.append("—")
        lines.append("| " + " | ".join(cells) + " |")
    cells = ["**whole chain**"] + [f"**{runs[k]['docs_per_cpu_s']:,.0f}**" for k in cols]
    first, last = runs[(smallest, w_big)], runs[(largest, w_big)]
    cells.append(f"{first['docs_per_cpu_s'] / last['docs_per_cpu_s']:.2f}")
    cells.append(f"{last['peak_rss_mb_largest_process']:,} (largest process)")
    cells.append(f"{runs[(both[-1], 2)]['wall_s'] / runs[(both[-1], 1)]['wall_s']:.2f}" if both else "—")
    lines.append("| " + " | ".join(cells) + " |")
    out = "\n".join(lines) + "\n\n"
    for size in sizes:
        r = runs.get((size, 2)) or runs[(size, 1)]
        walls = ", ".join(f"{runs[(size, w)]['wall_s']:,.0f} s wall with {w} worker{'s' if w > 1 else ''}"
                          for w in (1, 2) if (size, w) in runs)
        same = d["by_size"][str(size)]["same_final_bytes_1_and_2_workers"]
        out += (f"- {size:,} documents: {walls}; near-duplicate recall {100 * r['near_duplicate_recall']:.2f} % of "
                f"{r['near_duplicate_pairs_reached']:,} planted pairs, exact copies "
                f"{100 * r['exact_copy_recall']:.2f} % of {r['exact_copy_pairs_reached']:,}, "
                f"{r['dedup_removed_not_planted']:,} documents removed that "
                f"were in no planted pair"
                + (f" ({len(r['removed_outside_planted_pairs_jaccard'])} of them by dedup_minhash, "
                   f"{r['false_merges']} below true Jaccard {r['threshold']}: false merges); of the "
                   f"{r['near_duplicate_pairs_at_or_above_threshold']:,} planted pairs at or above true Jaccard "
                   f"{r['threshold']} (word 5-grams of the texts dedup_minhash read), "
                   f"{100 * r['near_duplicate_recall_at_or_above_threshold']:.2f} % found by either dedup stage"
                   if "false_merges" in r else "")
                + ("; `final/` the same bytes with 1 and 2 workers" if same else
                   "; `final/` DIFFERS between 1 and 2 workers" if same is False else "") + ".\n")
    return out


def chain_at_scale_workers(src: dict) -> str:
    """bench/scale_workers_1m.json (scripts/benchmarks/bench_scale.py): the largest size with 1 and 2
    workers, run back to back at one commit; per stage the wall of each and their ratio (the
    file's `by_stage`), the CPU of each, and the CPU the driver spent with 2 workers (work not
    split across them)."""
    d = load("scale_workers_1m.json", src)
    runs = {(r["docs"], r["workers"]): r for r in d["runs"]}
    size = max(k[0] for k in runs)
    one, two = runs[(size, 1)], runs[(size, 2)]
    lines = [f"| stage | wall s, {size:,} docs, 1 worker | wall s, 2 workers | 2 vs 1 | CPU s, 1 worker "
             "| CPU s, 2 workers | of it in the driver |", "|---|---:|---:|---:|---:|---:|---:|"]
    for name, st1 in one["stages"].items():
        st2 = two["stages"][name]
        ratio = d["by_stage"][name][str(size)].get("wall_2_vs_1")
        lines.append(f"| `{name}` | {st1['wall_s']:,.1f} | {st2['wall_s']:,.1f} | "
                     f"{'—' if ratio is None else f'{ratio:.2f}'} | {st1['cpu_s']:,.1f} | {st2['cpu_s']:,.1f} | "
                     f"{st2['driver_cpu_s']:,.1f} |")
    by_size = d["by_size"][str(size)]
    lines.append(f"| **whole chain** | **{one['wall_s']:,.0f}** | **{two['wall_s']:,.0f}** | "
                 f"**{by_size['wall_2_vs_1']:.3f}** | **{one['cpu_s']:,.0f}** | **{two['cpu_s']:,.0f}** | "
                 f"**{sum(st['driver_cpu_s'] for st in two['stages'].values()):,.0f}** |")
    same = by_size["same_final_bytes_1_and_2_workers"]
    return ("\n".join(lines) + f"\n\n`final/` digest with 1 worker {one['final_digest']}, with 2 "
            f"{two['final_digest']}: {'the same bytes' if same else 'DIFFERENT bytes'}.\n")


def core_scaling(src: dict) -> str:
    """bench/core_scaling.json (scripts/benchmarks/core_scaling.py): each stage alone and as two
    copies at once, one process each: the best 2-over-1 wall this machine gives that work."""
    d = load("core_scaling.json", src)
    lines = [f"| stage, {d['docs']:,} docs a copy | wall s, alone | wall s, two copies at once | best 2 vs 1 "
             "| CPU per document beside another copy |", "|---|---:|---:|---:|---:|"]
    for name, st in d["stages"].items():
        lines.append(f"| `{name}` | {st['alone']['wall_s']:,.1f} | {max(r['wall_s'] for r in st['pair']):,.1f} | "
                     f"{st['best_2_vs_1']:.3f} | {st['cpu_per_doc_pair_vs_alone']:.3f}× |")
    return "\n".join(lines) + "\n"


def scale_projection(src: dict) -> str:
    """One sentence: all of PubMed from the largest run of bench/scale.json, with its basis."""
    p = load("scale.json", src)["projection"]
    a, f = p["pubmed_abstracts"], p["pmc_full_texts"]
    return (f"Projected from the {p['from_docs']:,}-document run with {p['from_workers']} workers "
            f"(`python scripts/benchmarks/bench_scale.py`, bench/scale.json `projection`: its CPU per document held "
            f"flat, a full "
            f"text costing its length, "
            + (f"{100 * p['parallel_efficiency']:.0f} % parallel efficiency as measured on 2 cores"
               if p["parallel_efficiency"] is not None else "every core used fully: no 1- and 2-worker runs of "
               "the same code measured the parallel efficiency")
            + f"): {a['documents'] / 1e6:,.0f} M abstracts take {a['core_hours']:,.0f} core-hours "
            f"({a['wall_hours']['64']:,.1f} h on 64 cores, {a['wall_hours']['512']:,.2f} h on 512) and "
            f"{f['documents'] / 1e6:,.0f} M full texts {f['core_hours']:,.0f} core-hours "
            f"({f['wall_hours']['64']:,.1f} h on 64 cores), at {p['peak_rss_mb_per_worker']:,} MB per worker.\n")


RENDERERS = {
    f.__name__.replace("_", "-"): f
    for f in (
        bench_stages,
        bench_chains,
        bench_versus_datatrove,
        minhash_scale,
        minhash_like_for_like,
        heuristics_table,
        executor_scaling,
        retune,
        heuristics_compat,
        phi_by_type_deid,
        phi_by_type_asq,
        phi_by_type_web_ner,
        phi_by_type_litbank,
        phi_by_type_news,
        phi_literature_audit,
        phi_held_out,
        phi_held_out_by_type,
        phi_by_type_web,
        phi_by_type_mimesis,
        phi_by_type_mimesis_formats,
        chain_at_scale,
        chain_at_scale_workers,
        core_scaling,
        scale_projection,
    )
}


# --- check / write --------------------------------------------------------------------------


def pages(root: Path) -> list[Path]:
    """The files whose figures are checked: README.md and every docs page under root."""
    readme = root / "README.md"
    return ([readme] if readme.exists() else []) + sorted((root / "docs").rglob("*.md"))


def render(text: str, src: dict | None = None) -> tuple[str, list[str]]:
    """The page with every figure regenerated, and a message per figure that differed. `src`
    caches the result files across pages."""
    src = {} if src is None else src
    problems: list[str] = []

    def block(m: re.Match) -> str:
        name, body = m["name"], m["body"]
        if name not in RENDERERS:
            problems.append(f"figures block '{name}': no renderer in scripts/figures/readme_figures.py")
            return m[0]
        try:
            want = RENDERERS[name](src)
        except (MissingSource, KeyError, StopIteration, TypeError) as exc:
            problems.append(
                f"figures block '{name}': cannot render from the result files ({type(exc).__name__}: {exc})"
            )
            return m[0]
        if want != body:
            diff = [
                ln
                for ln in difflib.unified_diff(
                    body.splitlines(), want.splitlines(), "page", "results", n=0, lineterm=""
                )
                if ln[:1] in "+-" and not ln.startswith(("---", "+++"))
            ]
            problems.append(f"figures block '{name}' is stale:\n  " + "\n  ".join(diff))
        return f"<!-- figures:{name} -->\n{want}<!-- /figures:{name} -->"

    def inline(m: re.Match) -> str:
        try:
            value = lookup(load(m["file"], src), m["path"])
            want = format(value, m["fmt"] or ",")
        except (MissingSource, KeyError, ValueError, TypeError) as exc:
            problems.append(f"figure {m['file']}:{m['path']}: cannot read it ({type(exc).__name__}: {exc})")
            return m[0]
        if want != m["value"]:
            problems.append(
                f"figure {m['file']}:{m['path']} is stale: the page has {m['value']!r}, the result file gives {want!r}"
            )
        fmt = f" {m['fmt']}" if m["fmt"] else ""
        return f"<!-- fig {m['file']}:{m['path']}{fmt} -->{want}<!-- /fig -->"

    out = BLOCK.sub(block, text)
    out = INLINE.sub(inline, out)
    return out, problems


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    mode = ap.add_mutually_exclusive_group(required=True)
    mode.add_argument("--check", action="store_true")
    mode.add_argument("--write", action="store_true")
    ap.add_argument("files", nargs="*", type=Path, help="pages to check (default: README.md and docs/**/*.md)")
    ap.add_argument(
        "--root", type=Path, default=ROOT, help="where README.md and docs/ are (result files stay in bench/)"
    )
    ap.add_argument("--readme", type=Path, action="append", default=[], help=argparse.SUPPRESS)  # older name of FILE
    args = ap.parse_args()
    root = args.root.resolve()
    files = args.files + args.readme or pages(root)
    src: dict = {}
    failed = 0
    for path in files:
        label = path.resolve().relative_to(root) if path.resolve().is_relative_to(root) else path
        text = path.read_text(encoding="utf-8")
        new, problems = render(text, src)
        if args.write:
            if new != text:
                path.write_text(new, encoding="utf-8")
            problems = [p for p in problems if "is stale" not in p]
        for p in problems:
            print(f"{label}: {p}", file=sys.stderr)
        failed += len(problems)
    if failed and args.check:
        print(
            f"{failed} figure(s) differ from the result files: run the commands named beside them, "
            f"then `python scripts/figures/readme_figures.py --write`",
            file=sys.stderr,
        )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
