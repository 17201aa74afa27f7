"""Rule-by-rule firing table of the heuristics stage on the real abstracts of the default corpus.

The documents are those the default run hands to `heuristics`: pubmed21n1298 read and
normalized, then `langid` as configs/pubmed.yaml sets it (English kept). For each rule it
counts the documents the rule alone would remove (rules are independent; a document failing
two rules counts in both), under the stage defaults with datatrove's 50-word minimum
("datatrove defaults") and under configs/pubmed.yaml; then the documents any rule removes
under the stage defaults, datatrove defaults, pubmed.yaml, pubmed.yaml with C4's line
and sentence rules on (what a web-text config would add), and datatrove defaults and
pubmed.yaml measured as datatrove measures (compat: datatrove; the others are compat: medprep).

    python scripts/figures/heuristics_table.py          # prints the table, writes bench/heuristics.json

The rule-by-rule table of docs/filters.md ("heuristics") is rendered from bench/heuristics.json
(scripts/figures/readme_figures.py)."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
OUT = ROOT / "bench/heuristics.json"

# The config fields each rule reads (to print the thresholds beside the counts).
RULE_FIELDS = {
    "too_few_words": ["min_words"], "too_much_punctuation": ["max_punctuation_fraction"],
    "gopher_too_many_words": ["max_words"], "gopher_avg_word_length": ["min_avg_word_length", "max_avg_word_length"],
    "gopher_symbol_word_ratio": ["max_symbol_word_ratio"], "gopher_bullet_lines": ["max_bullet_lines_ratio"],
    "gopher_ellipsis_lines": ["max_ellipsis_lines_ratio"], "gopher_alpha_words": ["min_alpha_words_ratio"],
    "gopher_stop_words": ["min_stop_words"], "gopher_dup_lines": ["max_dup_line_fraction"],
    "gopher_dup_paragraphs": ["max_dup_para_fraction"], "gopher_dup_line_chars": ["max_dup_line_char_fraction"],
    "gopher_dup_paragraph_chars": ["max_dup_para_char_fraction"], "c4_lorem_ipsum": ["c4_lorem_ipsum"],
    "c4_curly_braces": ["c4_curly_braces"], "c4_javascript_notice": ["c4_boilerplate_lines"],
    "c4_cookie_notice": ["c4_boilerplate_lines"],
}


def english_abstracts(batch_size: int = 2000) -> pa.Array:
    """What the default run's heuristics stage reads: normalized, langid-kept documents."""
    import pyarrow.compute as pc

    from pipeline.config import InputConfig, load_config
    from pipeline.readers import read_documents
    from pipeline.stages.langid import LanguageId
    from pipeline.stages.normalize import Normalize, NormalizeConfig

    cfg = load_config(ROOT / "configs/pubmed.yaml", check_inputs=False)
    norm = Normalize(NormalizeConfig(), None)
    lid = LanguageId(cfg.stage("langid").config, None)
    lid.setup()
    texts = []
    for batch in read_documents(InputConfig(paths=[str(ROOT / "data/raw/pubmed21n1298.xml.gz")]), batch_size):
        table = norm.process(batch.table.select(["id", "text"]))
        table = table.filter(pc.is_null(table["_reason"])).drop_columns(["_reason"])
        table = lid.process(table)
        texts.append(table.filter(pc.is_null(table["_reason"]))["text"].combine_chunks())
    return pa.concat_arrays(texts)


def threshold(cfg, rule: str) -> str:
    if rule.startswith("gopher_top_"):
        return str(cfg.top_ngram_max_fraction[int(rule[len("gopher_top_"):-4])])
    if rule.startswith("gopher_dup_") and rule.endswith("gram"):
        return str(cfg.dup_ngram_max_fraction[int(rule[len("gopher_dup_"):-4])])
    values = [getattr(cfg, f) for f in RULE_FIELDS[rule]]
    return "-".join("on" if v is True else "off" if v is False else str(v) for v in values)


def fire(stage, text: pa.Array, batch: int = 2000) -> tuple[dict[str, int], int, dict[str, int]]:
    """(documents each rule alone removes, documents any rule removes, first-reason counts)."""
    alone: dict[str, int] = {}
    first: dict[str, int] = {}
    total = 0
    for i in range(0, len(text), batch):
        rules, _, _ = stage.evaluate(text.slice(i, batch))
        taken = np.zeros(min(batch, len(text) - i), bool)
        for name, mask in rules:
            mask = np.asarray(mask, bool)
            alone[name] = alone.get(name, 0) + int(mask.sum())
            first[name] = first.get(name, 0) + int((mask & ~taken).sum())
            taken |= mask
        total += int(taken.sum())
    return alone, total, {k: v for k, v in first.items() if v}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.parse_args()
    from pipeline.config import load_config
    from pipeline.stages.heuristics import Heuristics, HeuristicsConfig

    text = english_abstracts()
    n = len(text)
    pubmed = load_config(ROOT / "configs/pubmed.yaml", check_inputs=False).stage("heuristics").config
    configs = {
        "stage_defaults": HeuristicsConfig(),
        "datatrove_defaults": HeuristicsConfig(min_words=50),
        "pubmed_yaml": pubmed,
        "pubmed_yaml_with_c4_lines": pubmed.model_copy(update={"c4_lines": True, "c4_min_sentences": 5}),
        # The same thresholds measured as datatrove measures them (compat: datatrove).
        "datatrove_defaults_compat_datatrove": HeuristicsConfig(min_words=50, compat="datatrove"),
        "pubmed_yaml_compat_datatrove": pubmed.model_copy(update={"compat": "datatrove"}),
    }
    runs = {}
    for name, cfg in configs.items():
        stage = Heuristics(cfg, None)
        stage.setup()
        runs[name] = fire(stage, text)
    dt_alone, pm_alone = runs["datatrove_defaults"][0], runs["pubmed_yaml"][0]
    rows = []
    for rule in dt_alone:
        rows.append({"rule": rule, "datatrove_defaults": threshold(configs["datatrove_defaults"], rule),
                     "pubmed_yaml": threshold(pubmed, rule) if rule in pm_alone else "off",
                     "fires_datatrove_defaults": dt_alone[rule], "fires_pubmed_yaml": pm_alone.get(rule, 0)})
    result = {"command": "python scripts/figures/heuristics_table.py", "documents": n,
              "corpus": "pubmed21n1298, normalized, kept by langid (configs/pubmed.yaml)",
              "rules": rows,
              "removed": {name: {"documents": r[1], "percent": round(100 * r[1] / n, 2), "by_first_reason": r[2]}
                          for name, r in runs.items()}}
    OUT.parent.mkdir(exist_ok=True)
    OUT.write_text(json.dumps(result, indent=2) + "\n")
    print(f"{n:,} documents; each rule alone (documents it removes):\n")
    print("| rule | datatrove defaults | pubmed.yaml | fires, datatrove defaults | fires, pubmed.yaml |")
    print("|---|---|---|---:|---:|")
    for r in rows:
        print(f"| {r['rule']} | {r['datatrove_defaults']} | {r['pubmed_yaml']} | "
              f"{r['fires_datatrove_defaults']:,} ({100 * r['fires_datatrove_defaults'] / n:.2f} %) | "
              f"{r['fires_pubmed_yaml']:,} ({100 * r['fires_pubmed_yaml'] / n:.2f} %) |")
    print()
    for name, r in result["removed"].items():
        print(f"{name}: {r['documents']:,} removed ({r['percent']} %)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
