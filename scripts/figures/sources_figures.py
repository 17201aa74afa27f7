#!/usr/bin/env python3
"""The figures of docs/sources.md, into bench/sources.json (checked by scripts/figures/readme_figures.py):

1. what the notes source's heuristics remove from the 1,450 dev notes (data/deid-dev/notes.jsonl),
   with configs/medbot.yaml's notes rules and, for comparison, configs/clinical_notes.yaml's
   (web-text rules): documents in, removed by reason. Runs the notes source's normalize and
   heuristics stages alone (no phi: counts only, no text or id leaves the script);
2. with a finished MedBot run (--run runs/medbot): its per-source funnel, the cross-source
   duplicates, the decontamination counts, the mix (tokens per source before and after, epochs,
   the achieved share overall and the lowest and highest over every window of 1,000 consecutive
   sequences, against issue 19's bars: within 1 % of the weight overall, 5 % per window), the
   tokenizer's sample by the same weights, the repeats of a source weighted by metadata
   (repeat_by: per factor and per rule), and the Megatron --data-path line.

    python scripts/figures/sources_figures.py                     # 1 only
    make prepare CONFIG=configs/medbot.yaml && python scripts/figures/sources_figures.py --run runs/medbot
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
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


# The bars of issue 19 for a mix: each source's share of the packed train tokens within 1 % of
# its weight overall, and within 5 % in every window of 1,000 sequences (relative to the weight).
OVERALL_BAR_PERCENT = 1.0
WINDOW_BAR_PERCENT = 5.0


def _off_percent(share: float, weight: float) -> float:
    return round(100 * abs(share - weight) / weight, 3)


def mix_figures(mix: dict) -> dict:
    """Per source: weight, achieved share, epochs, tokens; the lowest and highest share over
    every window (1,000 sequences, and the finer 100), each as its distance from the weight in
    percent of the weight; and whether the bars hold."""
    out = {"train_tokens": mix["train_tokens"], "sources": {}}
    windows = {"windows": mix["windows"], "windows_fine": mix.get("windows_fine")}
    for name, m in mix["sources"].items():
        row = {k: m[k] for k in ("weight", "share", "epochs", "max_epochs", "train_tokens_before",
                                 "train_tokens_after", "repeated_tokens", "validation_tokens")}
        row["share_off_percent"] = _off_percent(m["share"], m["weight"])
        if m.get("repeat_by"):
            # Weighting by metadata: the manifest's repeats per factor and per rule, as they are.
            row["repeat_by"] = m["repeat_by"]
        for key, w in windows.items():
            if w:
                lo, hi = w["min_share"][name], w["max_share"][name]
                row[key] = {"sequences_per_window": w["sequences_per_window"], "windows": w["windows"],
                            "min_share": lo, "max_share": hi,
                            "off_percent": max(_off_percent(lo, m["weight"]), _off_percent(hi, m["weight"]))}
        out["sources"][name] = row
    w = mix["windows"]
    out["window"] = {"sequences_per_window": w["sequences_per_window"], "step_sequences": w.get("step_sequences"),
                     "windows": w["windows"]}
    out["overall_within_bar"] = all(r["share_off_percent"] <= OVERALL_BAR_PERCENT for r in out["sources"].values())
    out["windows_within_bar"] = all(r["windows"]["off_percent"] <= WINDOW_BAR_PERCENT for r in out["sources"].values())
    out["bars_percent"] = {"overall": OVERALL_BAR_PERCENT, "window": WINDOW_BAR_PERCENT}
    return out


def run_figures(run_dir: Path) -> dict:
    manifest = json.loads((run_dir / "manifest.json").read_text())
    out = {
        "run": str(run_dir.resolve().relative_to(ROOT)) if run_dir.resolve().is_relative_to(ROOT) else str(run_dir),
        "config": manifest.get("config_file"),
        "docs_read": manifest["docs_read"],
        "sources": {
            n: {
                "docs_read": f["docs_read"],
                "docs_out": f["docs_out"],
                "stages": [{k: s[k] for k in ("stage", "docs_in", "docs_out", "removed")} for s in f["stages"]],
                # Documents each stage removed, by the stage's name without the source's prefix.
                "removed_by_stage": {s["stage"].split(".")[-1]: sum(s["removed"].values()) for s in f["stages"]},
            }
            for n, f in manifest["sources"].items()
        },
        "tokens": manifest.get("tokens"),
        "sequences": manifest.get("sequences"),
        "train_sequences": manifest["splits"]["train"]["sequences"],
        "decontamination": manifest.get("decontamination"),
    }
    if manifest.get("mix"):
        out["mix"] = mix_figures(manifest["mix"])
    sample = (manifest.get("tokenizer") or {}).get("mix_sample")
    if sample:
        # Bytes per train token (pack's tokens): the tokenizer's sample is weighted in bytes.
        out["tokenizer_sample"] = {
            n: {
                **v,
                "bytes_per_train_token": round(
                    v["bytes_before"] / manifest["mix"]["sources"][n]["train_tokens_before"], 3
                ),
            }
            for n, v in sample.items()
        }
    if manifest.get("megatron"):
        out["megatron"] = manifest["megatron"]
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
    result["notes_heuristics"] = {
        "medbot": heuristics_on_notes(ROOT / "configs/medbot.yaml", "notes"),
        "clinical_notes": heuristics_on_notes(ROOT / "configs/clinical_notes.yaml", None),
    }
    if args.run:
        result["medbot_run"] = run_figures(args.run)
    args.out.write_text(json.dumps(result, indent=2, sort_keys=True) + "\n")
    print(json.dumps(result["notes_heuristics"], indent=2))
    if args.run:
        mix = result["medbot_run"].get("mix")
        print(json.dumps({"mix": mix, "decontamination": result["medbot_run"]["decontamination"]}, indent=2))


if __name__ == "__main__":
    main()
