"""Leak rate of the phi stage on the labeled synthetic set (scripts/phi_synth.py), by type,
and eponym survival and token change rate on real abstracts.

    python scripts/eval_phi.py [--docs 400] [--abstracts 600] [--seed 7]

A gold value leaks if it survives verbatim in the de-identified text. Prints JSON last."""
from __future__ import annotations

import argparse
import json
import re
import sys
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from phi_synth import make_documents  # noqa: E402


EPONYM_MENTIONS = re.compile(
    r"\b(?:Parkinson|Alzheimer|Crohn|Hodgkin|Down|Cushing|Gram|Apgar|Kaplan|Meier|Cox|Bonferroni|Fisher|"
    r"Wilcoxon|Mann|Whitney|Huntington|Graves|Hashimoto|Kawasaki|Guillain|Barr[eé]|Sj[oö]gren|Raynaud|Wilson|"
    r"Addison|Barrett|Burkitt|Ewing|Kaposi|Tourette|Marfan|Duchenne|Turner|Klinefelter|Paget|Whipple|Lewy|"
    r"Langerhans|Schwann|Purkinje|Golgi|Western|Doppler|Likert|Pearson|Spearman|Student|Tukey|Cohen|Glasgow|"
    r"Karnofsky|Charlson|Gleason|Child|Pugh)(?:['’]s)?\b")


def _survives(value: str, text: str) -> bool:
    """Verbatim survival; a number must stand as a number of its own ("97" is not in "97%")."""
    if value.isdigit() and len(value) <= 4:
        return re.search(rf"(?<![\d.]){value}(?![\d%.])", text) is not None
    return value in text


def leak_rates(engine, n_docs: int, seed: int) -> dict:
    docs = make_documents(n_docs, seed)
    texts = [d["text"] for d in docs]
    t0 = time.perf_counter()
    redacted, _ = engine.redact_batch(texts)
    seconds = time.perf_counter() - t0
    total, leaked = Counter(), Counter()
    examples = {}
    for doc, out in zip(docs, redacted):
        for kind, value in doc["gold"]:
            total[kind] += 1
            if _survives(value, out):
                leaked[kind] += 1
                examples.setdefault(kind, []).append(value)
    by_type = {k: {"gold": total[k], "leaked": leaked[k], "leak_rate": round(leaked[k] / total[k], 4)}
               for k in sorted(total)}
    return {"documents": n_docs, "gold_values": sum(total.values()), "leaked": sum(leaked.values()),
            "leak_rate": round(sum(leaked.values()) / sum(total.values()), 4), "by_type": by_type,
            "docs_per_second": round(n_docs / seconds, 1),
            "leak_examples_count": {k: len(v) for k, v in examples.items()}}


class PresidioDefaults:
    """Out-of-the-box Presidio (default recognizers, the full sm pipeline): the baseline."""

    def __init__(self):
        from presidio_analyzer import AnalyzerEngine
        from presidio_analyzer.nlp_engine import NlpEngineProvider
        from presidio_anonymizer import AnonymizerEngine

        from pipeline.phi.engine import SPACY_MODEL, offline_tldextract
        offline_tldextract()
        nlp = NlpEngineProvider(nlp_configuration={"nlp_engine_name": "spacy",
                                                   "models": [{"lang_code": "en", "model_name": SPACY_MODEL}]}).create_engine()
        self.analyzer = AnalyzerEngine(nlp_engine=nlp, supported_languages=["en"])
        self.anonymizer = AnonymizerEngine()

    def redact_batch(self, texts):
        out = []
        for t in texts:
            res = self.analyzer.analyze(t, language="en")
            out.append(self.anonymizer.anonymize(text=t, analyzer_results=res).text)
        return out, None


def real_abstracts(n: int) -> list[str]:
    from pipeline.config import InputConfig
    from pipeline.readers import read_documents
    from pipeline.stages.normalize import Normalize, NormalizeConfig

    norm = Normalize(NormalizeConfig(), None)
    out = []
    for batch in read_documents(InputConfig(paths=[str(ROOT / "data/raw/pubmed21n1298.xml.gz")]), 1000):
        t = norm.process(batch.table)
        out.extend(x for x, lang in zip(t["text"].to_pylist(), t["language"].to_pylist()) if lang == "eng")
        if len(out) >= n:
            break
    return out[:n]


def abstract_effects(engine, n: int) -> dict:
    texts = real_abstracts(n)
    results = engine.analyze_batch(texts)
    redacted, counts = engine.redact_batch(texts)
    before = sum(len(EPONYM_MENTIONS.findall(t)) for t in texts)
    after = sum(len(EPONYM_MENTIONS.findall(t)) for t in redacted)
    words = sum(len(t.split()) for t in texts)
    changed = sum(len(t[r.start:r.end].split()) for t, rs in zip(texts, results) for r in rs)
    entity_counts = Counter()
    for c in counts:
        entity_counts.update(c)
    return {"abstracts": n, "eponym_mentions": before, "eponym_mentions_after": after,
            "eponym_survival": round(after / before, 4) if before else 1.0,
            "token_change_rate": round(changed / words, 5), "entities": dict(entity_counts)}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--docs", type=int, default=400)
    ap.add_argument("--abstracts", type=int, default=600)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--baseline", action="store_true", help="evaluate out-of-the-box Presidio instead")
    args = ap.parse_args()
    from pipeline.phi.engine import PhiEngine
    engine = PresidioDefaults() if args.baseline else PhiEngine().setup()
    if args.baseline:
        args.abstracts = 0
    report = {"synthetic": leak_rates(engine, args.docs, args.seed)}
    if args.abstracts:
        report["abstracts"] = abstract_effects(engine, args.abstracts)
    syn = report["synthetic"]
    print(f"{'type':16s} {'gold':>6s} {'leaked':>6s} {'leak':>7s}")
    for k, v in syn["by_type"].items():
        print(f"{k:16s} {v['gold']:6d} {v['leaked']:6d} {100 * v['leak_rate']:6.2f}%")
    print(f"{'overall':16s} {syn['gold_values']:6d} {syn['leaked']:6d} {100 * syn['leak_rate']:6.2f}%")
    print(json.dumps(report, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
