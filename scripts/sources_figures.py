#!/usr/bin/env python3
"""The figures of docs/sources.md, into bench/sources.json (checked by scripts/readme_figures.py):

1. what the notes source's heuristics remove from the 1,450 dev notes (data/deid-dev/notes.jsonl),
   with configs/medbot.yaml's notes rules and, for comparison, configs/clinical_notes.yaml's
   (web-text rules): documents in, removed by reason. Runs the notes source's normalize and
   heuristics stages alone (no phi: counts only, no text or id leaves the script);
2. with a finished MedBot run (--run runs/medbot): its per-source funnel, the mix (tokens per
   source before and after, epochs, shares overall and per 1,000-sequence window) and the
   cross-source duplicates.

    python scripts/sources_figures.py                     # 1 only
    make prepare CONFIG=configs/medbot.yaml && python scripts/sources_figures.py --run runs/medbot
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def heuristics_on_notes(config_path: Path, source: str | None) -> dict:
    """normalize then heuristics of one chain of a config, on the dev notes, in a temp folder."""
    import yaml

    from pipeline.config import validate_config
    raw = yaml.safe_load(config_path.read_text())
    chain = raw["sources"][source]["stages"] if source else raw["stages"]
    keep = [e for e in chain if (next(iter(e)) if isinstance(e, dict) else e) in ("normalize", "heuristics")]
    with tempfile.TemporaryDirectory() as tmp:
        cfg = validate_config({"input": {"paths": [str(ROOT / "data/deid-dev/notes.jsonl")]}, "output_dir": tmp,
                               "progress": False, "report": False, "stages": keep})
        from pipeline.runner import run_stage
        stats = [run_stage(cfg, spec) for spec in cfg.stages]
    h = stats[-1]
    return {"config": str(config_path.relative_to(ROOT)), "docs_in": h["docs_in"],
            "removed": sum(h["removed"].values()), "removed_by_reason": h["removed"],
            "removed_percent": round(100 * sum(h["removed"].values()) / h["docs_in"], 2)}


def run_figures(run_dir: Path) -> dict:
    manifest = json.loads((run_dir / "manifest.json").read_text())
    out = {"run": str(run_dir), "docs_read": manifest["docs_read"], "seconds": manifest["seconds"],
           "sources": {n: {"docs_read": f["docs_read"], "docs_out": f["docs_out"],
                           "stages": [{k: s[k] for k in ("stage", "docs_in", "docs_out", "removed")} for s in f["stages"]]}
                       for n, f in manifest["sources"].items()},
           "mix": manifest.get("mix"), "tokens": manifest.get("tokens"), "sequences": manifest.get("sequences")}
    for s in manifest["stages"]:
        if s["stage"] in ("dedup_exact", "dedup_minhash"):
            out[s["stage"]] = s.get("docs_by_source")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--run", type=Path, help="a finished run of configs/medbot.yaml")
    ap.add_argument("--out", type=Path, default=ROOT / "bench/sources.json")
    args = ap.parse_args()
    result = json.loads(args.out.read_text()) if args.out.exists() else {}
    result["notes_heuristics"] = {"medbot": heuristics_on_notes(ROOT / "configs/medbot.yaml", "notes"),
                                  "clinical_notes": heuristics_on_notes(ROOT / "configs/clinical_notes.yaml", None)}
    if args.run:
        result["medbot_run"] = run_figures(args.run)
    args.out.write_text(json.dumps(result, indent=2, sort_keys=True) + "\n")
    print(json.dumps(result["notes_heuristics"], indent=2))


if __name__ == "__main__":
    main()
