#!/usr/bin/env python3
"""Every placeholder the literature profile writes into real MEDLINE abstracts, listed for a
judgement by hand (issue: "a literature profile that removes identifiers, not science").

    python scripts/evaluation/audit_phi_literature.py [--docs 2000]     # -> bench/phi_literature.json

The abstracts: the first N/2 English abstracts (after normalize) of each MEDLINE file in data/raw
(pubmed20n0014, pubmed21n1298), run through `python -m pipeline.stage phi --config
configs/pubmed.yaml` as a user runs it. Each placeholder of the output is listed with the text it
replaced and its context, and with the verdict of bench/phi_literature_judgements.json (written by
hand: "id|value" -> "correct: ..." or "wrong: ..."); an unjudged one says so. Counted: placeholders
per 1,000 abstracts, by type, and those glued inside a number (a digit, or a digit and a decimal
mark or thousands separator, against the placeholder)."""
from __future__ import annotations

import argparse
import difflib
import json
import re
import sys
import tempfile
from collections import Counter
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from scripts.evaluation.eval_phi import ABSTRACTS_CONFIG, english_abstracts, git_state, run_stage  # noqa: E402

FILES = ["data/raw/pubmed20n0014.xml.gz", "data/raw/pubmed21n1298.xml.gz"]
JUDGEMENTS = ROOT / "bench/phi_literature_judgements.json"
OUT = ROOT / "bench/phi_literature.json"
PLACEHOLDER = re.compile(r"<\|[A-Z_]+\|>")
GLUED = re.compile(r"\d[.,]?<\|[A-Z_]+\|>|<\|[A-Z_]+\|>[.,]?\d")


def placeholders(original: str, output: str) -> list[dict]:
    """Each placeholder of `output` with the text of `original` it stands for."""
    items = []
    matcher = difflib.SequenceMatcher(None, original, output, autojunk=False)
    for op, i1, i2, j1, j2 in matcher.get_opcodes():
        if op == "equal":
            continue
        for m in PLACEHOLDER.finditer(output, j1, j2):
            context = output[max(0, m.start() - 70):m.end() + 50].replace("\n", " ")
            items.append({"type": m.group()[2:-2], "value": original[i1:i2], "context": context})
    return items


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--docs", type=int, default=2000)
    ap.add_argument("--output", type=Path, default=OUT)
    args = ap.parse_args()
    docs = []
    for path in FILES:
        docs += english_abstracts(ROOT / path, args.docs // len(FILES))
    judged = json.loads(JUDGEMENTS.read_text()) if JUDGEMENTS.exists() else {}
    with tempfile.TemporaryDirectory() as tmp:
        outputs, meta = run_stage(docs, ABSTRACTS_CONFIG, Path(tmp), "abstracts")
    items, glued, altered = [], 0, 0
    for doc in docs:
        out = outputs[doc["id"]]
        glued += len(GLUED.findall(out))
        found = placeholders(doc["text"], out)
        altered += bool(found)
        for item in found:
            verdict = judged.get(f"{doc['id']}|{item['value']}", "unjudged")
            items.append({"id": doc["id"], **item, "verdict": verdict})
    total = len(items)
    report = {
        "command": f"python scripts/evaluation/audit_phi_literature.py --docs {args.docs}",
        "measured": {"date": datetime.now(timezone.utc).isoformat(timespec="seconds"), "git": git_state()},
        "sources": FILES, "config": ABSTRACTS_CONFIG, "docs": len(docs), "docs_altered": altered,
        "placeholders": total, "placeholders_per_1000": round(1000 * total / len(docs), 2),
        "glued_inside_a_number": glued,
        "by_type": dict(sorted(Counter(i["type"] for i in items).items())),
        "judged_wrong": sum(i["verdict"].startswith("wrong") for i in items),
        "unjudged": sum(i["verdict"] == "unjudged" for i in items),
        "items": items, "stage": meta,
    }
    args.output.write_text(json.dumps(report, indent=1, ensure_ascii=False) + "\n")
    print(f"{len(docs)} abstracts: {total} placeholders ({report['placeholders_per_1000']} per 1,000), "
          f"{glued} glued inside a number, {report['judged_wrong']} judged wrong, {report['unjudged']} unjudged "
          f"-> {args.output.relative_to(ROOT) if args.output.is_relative_to(ROOT) else args.output}")


if __name__ == "__main__":
    main()
