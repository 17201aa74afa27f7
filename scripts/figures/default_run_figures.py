#!/usr/bin/env python3
"""Copy the default run's figures from its manifest into bench/default_run.json, the result file
the default-run figures of README.md and docs/ (benchmarks, run folder, tokenizer) are checked
against (scripts/figures/readme_figures.py).

    make prepare CONFIG=configs/pubmed.yaml
    python scripts/figures/default_run_figures.py runs/pubmed      # writes bench/default_run.json
    make bench-default-run                                 # the same in a fresh folder (part of make bench)

Only counts, timings and tokenizer figures are copied (the literature profile keeps PMIDs; no
text, no id)."""
from __future__ import annotations

import argparse
import json
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
KEYS = ("docs_read", "seconds", "tokens", "sequences", "splits", "leftover_tokens", "steps_per_epoch", "batch_size",
        "seq_len", "validation_near_train", "duplicate_ids", "run_folder")
STAGE_KEYS = ("stage", "docs_in", "docs_out", "removed", "seconds")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("run_dir", nargs="?", default="runs/pubmed")
    ap.add_argument("--out", default=str(ROOT / "bench/default_run.json"))
    args = ap.parse_args()
    manifest = json.loads((Path(args.run_dir) / "manifest.json").read_text())
    stages = [{k: s.get(k) for k in STAGE_KEYS} for s in manifest["stages"]]
    for s in stages:
        s["docs_per_s"] = round(s["docs_in"] / s["seconds"], 1) if s.get("seconds") else None
    out = {
        "command": ("make prepare CONFIG=configs/pubmed.yaml; python scripts/figures/default_run_figures.py runs/pubmed"
                    if Path(args.run_dir) == Path("runs/pubmed") else "make bench-default-run"),
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "run_dir": str(args.run_dir),
        **{k: manifest.get(k) for k in KEYS},
        "documents_kept": stages[-1]["docs_out"] if stages else None,
        "stages": stages,
        "tokenizer": manifest.get("tokenizer"),
    }
    Path(args.out).write_text(json.dumps(out, indent=1, sort_keys=True) + "\n")
    print(f"written: {args.out}")


if __name__ == "__main__":
    main()
