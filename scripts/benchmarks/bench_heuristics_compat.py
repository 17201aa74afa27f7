"""Does the heuristics stage decide as datatrove 0.10's filters do, at the same thresholds?

    python scripts/benchmarks/bench_heuristics_compat.py   # `make bench-heuristics-compat`
                                                           # writes bench/heuristics_compat.json

The documents: 2,400 MEDLINE abstracts (pubmed21n1298 as the default run hands them to
heuristics: read, normalized, kept by langid as configs/pubmed.yaml sets it; the first 2,400)
and 600 pages of software documentation as plain text, collected from files installed on this
machine (`software_docs`: reST, Markdown and text files that pip packages ship in the
virtualenv's site-packages and the long descriptions in their METADATA, Debian packages'
/usr/share/doc, CMake's reference pages), in a fixed order.

datatrove runs in its own virtualenv (.venv-bench, bench/requirements-datatrove.txt), as
scripts/benchmarks/bench_datatrove.py does: this script starts itself there with --datatrove-side. Each
datatrove filter runs at its defaults (GopherQualityFilter, GopherRepetitionFilter,
C4QualityFilter, FineWebQualityFilter) and with each of its rules alone (the others None or
set so they cannot fire); our stage runs with the same thresholds, every other rule off, in
compat: datatrove and, for comparison, compat: medprep. Our rules' masks are independent of
one another, so one pass gives every rule alone. For C4 the text each side keeps is compared
too. Written per filter and per rule: documents whose decision agrees, the disagreeing ones
by direction, and their ids.

Speed: the stage alone on the English abstracts of pubmed21n1298 (batches of 1,000, setup
excluded), in docs per CPU-second, for configs/pubmed.yaml's heuristics in both compat modes
and for datatrove's defaults. No test asserts on these numbers."""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import os
import platform
import re
import resource
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
OUT = ROOT / "bench/heuristics_compat.json"
WORK = ROOT / "bench/work/heuristics_compat"
N_ABSTRACTS, N_DOCS = 2400, 600

# datatrove's filters and the run of each rule alone: (run name, filter class, kwargs). The
# kwargs switch the filter's other rules off (None where datatrove allows it).
_GQ_OFF = dict(
    min_doc_words=None,
    max_doc_words=None,
    min_avg_word_length=None,
    max_avg_word_length=None,
    max_symbol_word_ratio=None,
    max_bullet_lines_ratio=None,
    max_ellipsis_lines_ratio=None,
    max_non_alpha_words_ratio=None,
    min_stop_words=None,
)
_GR_OFF = dict(
    dup_line_frac=None,
    dup_para_frac=None,
    dup_line_char_frac=None,
    dup_para_char_frac=None,
    top_n_grams=(),
    dup_n_grams=(),
)
_FW_OFF = dict(line_punct_thr=0.0, short_line_thr=1.0, char_duplicates_ratio=1e9, new_line_ratio=1e9)
_TOP = ((2, 0.2), (3, 0.18), (4, 0.16))
_DUP = ((5, 0.15), (6, 0.14), (7, 0.13), (8, 0.12), (9, 0.11), (10, 0.10))
DATATROVE_RUNS = [
    ("gopher_quality", "GopherQualityFilter", {}),
    ("gopher_repetition", "GopherRepetitionFilter", {}),
    ("c4", "C4QualityFilter", {}),
    ("fineweb", "FineWebQualityFilter", {}),
    ("too_few_words", "GopherQualityFilter", {**_GQ_OFF, "min_doc_words": 50}),
    ("gopher_too_many_words", "GopherQualityFilter", {**_GQ_OFF, "max_doc_words": 100000}),
    ("gopher_avg_word_length", "GopherQualityFilter", {**_GQ_OFF, "min_avg_word_length": 3, "max_avg_word_length": 10}),
    ("gopher_symbol_word_ratio", "GopherQualityFilter", {**_GQ_OFF, "max_symbol_word_ratio": 0.1}),
    ("gopher_bullet_lines", "GopherQualityFilter", {**_GQ_OFF, "max_bullet_lines_ratio": 0.9}),
    ("gopher_ellipsis_lines", "GopherQualityFilter", {**_GQ_OFF, "max_ellipsis_lines_ratio": 0.3}),
    ("gopher_alpha_words", "GopherQualityFilter", {**_GQ_OFF, "max_non_alpha_words_ratio": 0.8}),
    ("gopher_stop_words", "GopherQualityFilter", {**_GQ_OFF, "min_stop_words": 2}),
    ("gopher_dup_paragraphs", "GopherRepetitionFilter", {**_GR_OFF, "dup_para_frac": 0.3}),
    ("gopher_dup_paragraph_chars", "GopherRepetitionFilter", {**_GR_OFF, "dup_para_char_frac": 0.2}),
    ("gopher_dup_lines", "GopherRepetitionFilter", {**_GR_OFF, "dup_line_frac": 0.3}),
    ("gopher_dup_line_chars", "GopherRepetitionFilter", {**_GR_OFF, "dup_line_char_frac": 0.2}),
    *[(f"gopher_top_{n}gram", "GopherRepetitionFilter", {**_GR_OFF, "top_n_grams": ((n, f),)}) for n, f in _TOP],
    *[(f"gopher_dup_{n}gram", "GopherRepetitionFilter", {**_GR_OFF, "dup_n_grams": ((n, f),)}) for n, f in _DUP],
    ("c4_lorem_ipsum", "C4QualityFilter", {"min_num_sentences": -1, "filter_curly_bracket": False}),
    ("c4_curly_braces", "C4QualityFilter", {"min_num_sentences": -1, "filter_lorem_ipsum": False}),
    ("c4_too_few_sentences", "C4QualityFilter", {"filter_lorem_ipsum": False, "filter_curly_bracket": False}),
    ("fineweb_line_punct_ratio", "FineWebQualityFilter", {**_FW_OFF, "line_punct_thr": 0.12}),
    ("fineweb_short_line_ratio", "FineWebQualityFilter", {**_FW_OFF, "short_line_thr": 0.67}),
    ("fineweb_char_dup_ratio", "FineWebQualityFilter", {**_FW_OFF, "char_duplicates_ratio": 0.01}),
    ("fineweb_list_ratio", "FineWebQualityFilter", {**_FW_OFF, "new_line_ratio": 0.3}),
]
FILTER_RULES = {
    "gopher_quality": [
        "too_few_words",
        "gopher_too_many_words",
        "gopher_avg_word_length",
        "gopher_symbol_word_ratio",
        "gopher_bullet_lines",
        "gopher_ellipsis_lines",
        "gopher_alpha_words",
        "gopher_stop_words",
    ],
    "gopher_repetition": [
        "gopher_dup_paragraphs",
        "gopher_dup_paragraph_chars",
        "gopher_dup_lines",
        "gopher_dup_line_chars",
        *[f"gopher_top_{n}gram" for n, _ in _TOP],
        *[f"gopher_dup_{n}gram" for n, _ in _DUP],
    ],
    "c4": ["c4_lorem_ipsum", "c4_curly_braces", "c4_too_few_sentences"],
    "fineweb": ["fineweb_line_punct_ratio", "fineweb_short_line_ratio", "fineweb_char_dup_ratio", "fineweb_list_ratio"],
}
# Our rules that only one of datatrove's filters applies ("empty" is in both repetition and
# FineWeb: a document with no text at all).
EXTRA_RULES = {"gopher_repetition": ["empty"], "fineweb": ["empty", "fineweb_empty"], "c4": ["c4_no_lines_left"]}

# Our stage with every rule off; each filter's comparison turns its own rules on.
RULES_OFF = dict(
    min_words=0,
    max_punctuation_fraction=1.0,
    max_words=10**12,
    min_avg_word_length=-1e9,
    max_avg_word_length=1e9,
    max_symbol_word_ratio=1e9,
    max_bullet_lines_ratio=1e9,
    max_ellipsis_lines_ratio=1e9,
    min_alpha_words_ratio=-1e9,
    min_stop_words=0,
    max_dup_line_fraction=1e9,
    max_dup_para_fraction=1e9,
    max_dup_line_char_fraction=1e9,
    max_dup_para_char_fraction=1e9,
    top_ngram_max_fraction={},
    dup_ngram_max_fraction={},
    c4_lorem_ipsum=False,
    c4_curly_braces=False,
    c4_boilerplate_lines=False,
)
# datatrove's defaults as our stage's options (the stage's own defaults but the 50-word minimum).
DATATROVE_DEFAULTS = dict(
    min_words=50,
    max_words=100000,
    min_avg_word_length=3,
    max_avg_word_length=10,
    max_symbol_word_ratio=0.1,
    max_bullet_lines_ratio=0.9,
    max_ellipsis_lines_ratio=0.3,
    min_alpha_words_ratio=0.8,
    min_stop_words=2,
    max_dup_line_fraction=0.3,
    max_dup_para_fraction=0.3,
    max_dup_line_char_fraction=0.2,
    max_dup_para_char_fraction=0.2,
    top_ngram_max_fraction=dict(_TOP),
    dup_ngram_max_fraction=dict(_DUP),
    fineweb=True,
)
C4_DEFAULTS = dict(c4_lines=True, c4_min_sentences=5, c4_lorem_ipsum=True, c4_curly_braces=True)


# --- the documents ----------------------------------------------------------------------------

_SKIP_NAME = re.compile(
    r"licen[cs]e|copying|notice|authors|contributors|requirements|entry_points|top_level|"
    r"sources|dependency_links|record|installer|wheel|namespace_packages|zip-safe|changelog|"
    r"copyright|news|history|vendor",
    re.I,
)
_DOC_EXT = (".rst", ".md", ".txt", ".markdown")
PER_PACKAGE = 40  # at most this many pages from one package (git ships hundreds of release notes)


def _doc_files():
    """(source, path, bytes) of every documentation file considered, in a fixed order."""
    site = Path(sysconfig.get_paths()["purelib"])
    for p in sorted(site.rglob("*")):
        rel = p.relative_to(site).as_posix()
        if not p.is_file() or "/tests/" in f"/{rel}" or "/test/" in f"/{rel}":
            continue
        if p.name == "METADATA" and p.parent.name.endswith(".dist-info"):
            yield "site-packages", rel, p.read_bytes().partition(b"\n\n")[2]  # the long description
        elif p.suffix in _DOC_EXT and not _SKIP_NAME.search(p.name):
            yield "site-packages", rel, p.read_bytes()
    doc = Path("/usr/share/doc")
    for p in sorted(doc.rglob("*")) if doc.is_dir() else []:
        name = p.name[:-3] if p.name.endswith(".gz") else p.name
        if p.is_file() and (name.endswith(_DOC_EXT) or name.startswith("README")) and not _SKIP_NAME.search(name):
            raw = p.read_bytes()
            yield (
                "usr-share-doc",
                p.relative_to(doc).as_posix(),
                gzip.decompress(raw) if p.name.endswith(".gz") else raw,
            )
    for help_dir in sorted(Path("/usr/share").glob("cmake-*/Help")):
        for p in sorted(help_dir.rglob("*.rst")):
            yield "cmake-help", p.relative_to(help_dir).as_posix(), p.read_bytes()


def software_docs(n: int = N_DOCS) -> list[dict]:
    """n pages of 1,000 to 100,000 characters (UTF-8, distinct texts), ordered by a hash of their
    source and path, at most PER_PACKAGE per package."""
    pages, seen = [], set()
    for source, rel, raw in _doc_files():
        try:
            text = raw.decode("utf-8").strip()
        except UnicodeDecodeError:
            continue
        digest = hashlib.sha1(text.encode()).digest()
        if not 1000 <= len(text) <= 100_000 or digest in seen:
            continue
        seen.add(digest)
        pages.append((hashlib.sha1(f"{source}/{rel}".encode()).hexdigest(), source, rel, text))
    pages.sort()
    out, per_package = [], {}
    for _, source, rel, text in pages:
        package = f"{source}/{rel.split('/')[0].split('-')[0]}"
        if per_package.get(package, 0) >= PER_PACKAGE:
            continue
        per_package[package] = per_package.get(package, 0) + 1
        out.append({"id": f"{source}/{rel}", "text": text, "source": source})
        if len(out) == n:
            break
    return out


# --- datatrove's side (in .venv-bench) ---------------------------------------------------------


def datatrove_side(corpus: Path, out: Path) -> int:
    from importlib.metadata import version

    import datatrove.pipeline.filters as filters
    from datatrove.data import Document
    from datatrove.utils.text import PUNCTUATION, TERMINAL_PUNCTUATION

    docs = [json.loads(line) for line in open(corpus, encoding="utf-8")]
    digest = hashlib.sha256("\0".join(d["text"] for d in docs).encode()).hexdigest()
    runs = [(name, getattr(filters, cls)(**kwargs)) for name, cls, kwargs in DATATROVE_RUNS]
    decisions = {name: [] for name, _ in runs}
    c4_text = []
    # Document by document, every run: the word tokenizer's cache (split_into_parts keeps the
    # last few texts) then tokenizes each text once.
    for d in docs:
        for name, f in runs:
            doc = Document(text=d["text"], id=d["id"])
            try:
                result = f.filter(doc)
            except ZeroDivisionError:
                result = (False, "error:ZeroDivisionError")
            decisions[name].append(None if result is True else result[1])
            if name == "c4":
                c4_text.append(doc.text if result is True else None)
    out.write_text(
        json.dumps(
            {
                "corpus_sha256": digest,
                "datatrove_version": version("datatrove"),
                "spacy_version": version("spacy"),
                "punctuation": PUNCTUATION,
                "terminal_punctuation": sorted(TERMINAL_PUNCTUATION),
                "decisions": decisions,
                "c4_text": c4_text,
            }
        )
    )
    return 0


# --- ours, and the comparison ------------------------------------------------------------------


def our_masks(texts: list[str], compat: str, batch: int = 500) -> tuple[dict[str, list[bool]], list[str | None]]:
    """Every rule's mask at datatrove's defaults (Gopher quality and repetition, FineWeb), and
    the text C4's rules keep (None where they remove the document)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    from pipeline.stages.heuristics import Heuristics, HeuristicsConfig

    stage = Heuristics(HeuristicsConfig(**{**RULES_OFF, **DATATROVE_DEFAULTS, "compat": compat}), None)
    c4 = Heuristics(HeuristicsConfig(**{**RULES_OFF, **C4_DEFAULTS, "compat": compat}), None)
    stage.setup()
    masks: dict[str, list[bool]] = {}
    kept: list[str | None] = []
    for i in range(0, len(texts), batch):
        part = pa.array(texts[i : i + batch], pa.string())
        rules, _, _ = stage.evaluate(part)
        for name, mask in rules:
            masks.setdefault(name, []).extend(np.asarray(mask, bool).tolist())
        c4_rules, _, _ = c4.evaluate(part)
        for name, mask in c4_rules:
            if name.startswith("c4_"):  # the other rules are off in this pass
                masks.setdefault(name, []).extend(np.asarray(mask, bool).tolist())
        out = c4.process(pa.table({"id": [str(j) for j in range(len(part))], "text": part}))
        kept.extend(pc.if_else(pc.is_null(out["_reason"]), out["text"], pa.scalar(None, pa.string())).to_pylist())
    return masks, kept


def compare(ids: list[str], sources: list[str], dt: dict, masks: dict, kept: list) -> dict:
    """Agreement per rule and per filter, and the disagreeing documents by direction."""

    def row(theirs: list[bool], ours: list[bool]) -> dict:
        only_dt = [i for i, (a, b) in enumerate(zip(theirs, ours)) if a and not b]
        only_us = [i for i, (a, b) in enumerate(zip(theirs, ours)) if b and not a]
        n = len(theirs)
        by_source, removes_by_source = {}, {}
        for s in sorted(set(sources)):
            idx = [i for i in range(n) if sources[i] == s]
            by_source[s] = round(100 * sum(theirs[i] == ours[i] for i in idx) / len(idx), 2)
            removes_by_source[s] = {"datatrove": sum(theirs[i] for i in idx), "ours": sum(ours[i] for i in idx)}
        return {
            "documents": n,
            "agree": n - len(only_dt) - len(only_us),
            "agree_percent": round(100 * (n - len(only_dt) - len(only_us)) / n, 2),
            "agree_percent_by_source": by_source,
            "removes_by_source": removes_by_source,
            "datatrove_removes": sum(theirs),
            "we_remove": sum(ours),
            "datatrove_removes_we_keep": len(only_dt),
            "we_remove_datatrove_keeps": len(only_us),
            "ids_datatrove_removes_we_keep": [ids[i] for i in only_dt],
            "ids_we_remove_datatrove_keeps": [ids[i] for i in only_us],
        }

    removed = {name: [r is not None for r in reasons] for name, reasons in dt["decisions"].items()}
    per_filter, per_rule = {}, {}
    for flt, rules in FILTER_RULES.items():
        ours = [False] * len(ids)
        for rule in rules + EXTRA_RULES.get(flt, []):
            if rule in masks:
                ours = [a or b for a, b in zip(ours, masks[rule])]
        per_filter[flt] = row(removed[flt], ours)
        for rule in rules:
            theirs = removed[rule]
            mine = masks[rule]
            if rule == "c4_too_few_sentences":  # ours names "no line left" apart
                mine = [a or b for a, b in zip(mine, masks["c4_no_lines_left"])]
            per_rule[rule] = {"filter": flt, **row(theirs, mine)}
    both = [i for i in range(len(ids)) if kept[i] is not None and dt["c4_text"][i] is not None]
    per_filter["c4"]["kept_by_both"] = len(both)
    per_filter["c4"]["kept_text_identical"] = sum(kept[i] == dt["c4_text"][i] for i in both)
    per_filter["c4"]["ids_kept_text_differs"] = [ids[i] for i in both if kept[i] != dt["c4_text"][i]]
    errors = {name: sum(r == "error:ZeroDivisionError" for r in reasons) for name, reasons in dt["decisions"].items()}
    return {
        "per_filter": per_filter,
        "per_rule": per_rule,
        "datatrove_zero_division_errors": {k: v for k, v in errors.items() if v},
    }


def speed(texts: list[str], configs: dict, batch: int = 1000) -> dict:
    """The stage alone, single core: docs and MB per CPU-second, setup excluded."""
    import pyarrow as pa

    from pipeline.stages.heuristics import Heuristics, HeuristicsConfig

    mb = sum(len(t.encode()) for t in texts) / 1e6
    tables = [
        pa.table({"id": [str(j) for j in range(i, min(i + batch, len(texts)))], "text": texts[i : i + batch]})
        for i in range(0, len(texts), batch)
    ]
    out = {}
    for name, cfg in configs.items():
        stage = Heuristics(HeuristicsConfig(**cfg), None)
        stage.setup()
        stage.process(tables[0].slice(0, 10))  # warm (lazy tables)
        c0 = time.process_time()
        for t in tables:
            stage.process(t)
        cpu = time.process_time() - c0
        out[name] = {
            "docs": len(texts),
            "MB": round(mb, 2),
            "cpu_s": round(cpu, 3),
            "docs_per_cpu_s": round(len(texts) / cpu, 1),
            "MB_per_cpu_s": round(mb / cpu, 2),
            "config": cfg,
        }
    out["peak_rss_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--datatrove-side", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--corpus", help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    ap.add_argument("--skip-speed", action="store_true", help="agreement only")
    ap.add_argument(
        "--reuse-datatrove",
        action="store_true",
        help="reuse datatrove's decisions from the last run when the corpus is the same",
    )
    args = ap.parse_args()
    if args.datatrove_side:
        return datatrove_side(Path(args.corpus), Path(args.out))

    from pipeline.config import load_config
    from pipeline.stages.heuristics.spacy_words import DT_PUNCTUATION, DT_TERMINAL_PUNCTUATION, english_words
    from scripts.figures.heuristics_table import english_abstracts

    WORK.mkdir(parents=True, exist_ok=True)
    abstracts = english_abstracts().to_pylist()
    docs = software_docs()
    corpus = [
        {"id": f"medline/{i}", "text": t, "source": "medline"} for i, t in enumerate(abstracts[:N_ABSTRACTS])
    ] + docs
    path = WORK / "corpus.jsonl"
    with open(path, "w", encoding="utf-8") as fh:
        for d in corpus:
            fh.write(json.dumps(d, ensure_ascii=False) + "\n")
    bench_python = ROOT / ".venv-bench/bin/python"
    if not bench_python.exists():
        print("error: .venv-bench is missing: `make .venv-bench/.installed` makes it", file=sys.stderr)
        return 2
    ids, sources, texts = [d["id"] for d in corpus], [d["source"] for d in corpus], [d["text"] for d in corpus]
    digest = hashlib.sha256("\0".join(texts).encode()).hexdigest()
    cached = WORK / "datatrove.json"
    t0 = time.perf_counter()
    if not (args.reuse_datatrove and cached.exists() and json.loads(cached.read_text()).get("corpus_sha256") == digest):
        subprocess.run(
            [str(bench_python), __file__, "--datatrove-side", "--corpus", str(path), "--out", str(cached)],
            check=True,
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )
    datatrove_s = time.perf_counter() - t0
    dt = json.loads(cached.read_text())
    result = {
        "command": "python scripts/benchmarks/bench_heuristics_compat.py",
        "machine": {
            "cores": os.cpu_count(),
            "python": platform.python_version(),
            "load_average_at_start": [round(x, 1) for x in os.getloadavg()],
        },
        "versions": {
            "datatrove": dt["datatrove_version"],
            "spacy_datatrove": dt["spacy_version"],
            "spacy_ours": english_words().spacy_version,
        },
        # Our copies of datatrove's punctuation sets are datatrove's.
        "datatrove_constants_match": dt["punctuation"] == DT_PUNCTUATION
        and dt["terminal_punctuation"] == sorted(DT_TERMINAL_PUNCTUATION),
        "corpus": {
            "documents": len(corpus),
            "by_source": {s: sources.count(s) for s in sorted(set(sources))},
            "sha256": digest,
            "medline": "pubmed21n1298, normalized, kept by langid (configs/pubmed.yaml), first 2,400",
            "docs": "software_docs(): site-packages docs and METADATA descriptions, /usr/share/doc, "
            "CMake Help pages; 1,000-100,000 characters, ordered by a hash of the path",
        },
        "datatrove_wall_s": round(datatrove_s, 1),
    }
    for compat in ("datatrove", "medprep"):
        masks, kept = our_masks(texts, compat)
        result[f"compat_{compat}"] = compare(ids, sources, dt, masks, kept)
    if not args.skip_speed:
        pubmed = load_config(ROOT / "configs/pubmed.yaml", check_inputs=False).stage("heuristics").config.model_dump()
        result["speed_abstracts"] = speed(
            abstracts,
            {
                "pubmed_yaml_medprep": {**pubmed, "compat": "medprep"},
                "pubmed_yaml_datatrove": {**pubmed, "compat": "datatrove"},
                "datatrove_defaults_datatrove": {**DATATROVE_DEFAULTS, "compat": "datatrove"},
            },
        )
    OUT.write_text(json.dumps(result, indent=2) + "\n")
    print_summary(result)
    return 0


def print_summary(r: dict) -> None:
    for compat in ("datatrove", "medprep"):
        c = r[f"compat_{compat}"]
        print(f"\ncompat: {compat}, {r['corpus']['documents']:,} documents")
        print("| filter / rule | agree | datatrove removes, we keep | we remove, datatrove keeps |")
        print("|---|---:|---:|---:|")
        for name, row in list(c["per_filter"].items()) + list(c["per_rule"].items()):
            print(
                f"| {name} | {row['agree_percent']} % | {row['datatrove_removes_we_keep']} | "
                f"{row['we_remove_datatrove_keeps']} |"
            )
        c4 = c["per_filter"]["c4"]
        print(f"C4 kept text identical: {c4['kept_text_identical']:,} of {c4['kept_by_both']:,}")
    for name, s in r.get("speed_abstracts", {}).items():
        if isinstance(s, dict):
            print(f"speed {name}: {s['docs_per_cpu_s']:,} docs per CPU-second ({s['MB_per_cpu_s']} MB)")


if __name__ == "__main__":
    sys.exit(main())
