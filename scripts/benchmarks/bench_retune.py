"""Retune a threshold on a finished run: the default chain (configs/pubmed.yaml) on its first
`--docs` abstracts, then toxicity `max_score` changed in the same run folder, against a fresh
run with the new threshold.

    python scripts/benchmarks/bench_retune.py [--docs 1500] [--before 0.9] [--after 0.5]   # make bench-retune
    python scripts/benchmarks/bench_retune.py --input OTHER.jsonl --out bench/work/retune-other.json  # another corpus

1. first: a fresh run with max_score = --before (run folder A);
2. retune: the same config with max_score = --after, run again on folder A: toxicity decides
   from its stored scores (no model), phi takes what its cache holds, the stages after them
   rerun;
3. fresh: a run with max_score = --after in its own folder B (the reference).
Steps 1-2 are done `--repeat` times (3 by default), each pair in a new folder A: this machine's
CPU speed varies by half from minute to minute, so one pair's ratio moves by a few hundredths.
The ratio reported is the median pair's (every pair's walls are in `pairs`), and first/retune
are that pair's runs.
Each run is its own process (`python -m pipeline run`), timed from the outside (wall) and by
the manifest. Compared: every file of final/ and tokenizer/ of A after the retune against B,
byte for byte. Also written: each run's per-stage seconds, toxicity's decided_from_stored_scores
and phi's cache counts, and the run folder's size against the input text.

Writes bench/retune.json (also printed). No test asserts on these numbers."""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
WORK = ROOT / "bench/work/retune"


def write_config(name: str, docs: int, max_score: float, out: Path, input_path: str | None = None) -> Path:
    import yaml
    raw = yaml.safe_load((ROOT / "configs/pubmed.yaml").read_text())
    raw["input"] = {**raw["input"], "limit": docs}
    if input_path:                  # another corpus (a .jsonl of {"id", "text"} rows, or any reader's format)
        raw["input"] = {"paths": [str(Path(input_path).resolve())], "limit": docs}
    raw["output_dir"] = str(out)
    raw["report"] = False
    raw["stages"] = [{"toxicity": {**(e["toxicity"] or {}), "max_score": max_score}} if "toxicity" in e else e
                     for e in raw["stages"]]
    cfg = WORK / f"{name}.yaml"
    cfg.write_text(yaml.safe_dump(raw, sort_keys=False))
    return cfg


def run(cfg: Path) -> dict:
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "pipeline", "run", "--config", str(cfg)], cwd=ROOT,
                          capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"{cfg.name}: run failed:\n{proc.stderr[-3000:]}")
    import yaml
    out = Path(yaml.safe_load(cfg.read_text())["output_dir"])
    manifest = json.loads((out / "manifest.json").read_text())
    stages = {}
    for s in manifest["stages"]:
        entry = {"docs_in": s["docs_in"], "docs_out": s["docs_out"], "seconds": s["seconds"]}
        for key in ("decided_from_stored_scores", "cache"):
            if key in s:
                entry[key] = s[key]
        stages[s["stage"]] = entry
    skipped = [line.split("]")[0].lstrip("[") for line in proc.stderr.splitlines() if "] skipped" in line]
    return {"wall_s": round(wall, 2), "chain_seconds": manifest["seconds"], "docs_read": manifest["docs_read"],
            "sequences": manifest.get("sequences"), "tokens": manifest.get("tokens"), "skipped": skipped,
            "run_folder": manifest.get("run_folder"), "stages": stages}


def other_corpus(n: int, path: Path) -> Path:
    """A corpus the default one is not: abstracts of the other committed MEDLINE file
    (data/raw/pubmed20n0014.xml.gz) with 8 % near or exact duplicates of earlier ones, 4 % junk
    (number tables, repeated words) and 2 % with planted PHI (a name, a record number, a date,
    a phone number), shuffled, as JSONL. Deterministic (seed 0)."""
    import random
    sys.path.insert(0, str(ROOT))
    from pipeline.config import InputConfig
    from pipeline.readers import read_documents
    rng = random.Random(0)
    n_dup, n_junk, n_phi = n * 8 // 100, n * 4 // 100, n * 2 // 100
    base = []
    for batch in read_documents(InputConfig(paths=[str(ROOT / "data/raw/pubmed20n0014.xml.gz")]), 1000):
        for row in batch.table.select(["id", "text"]).to_pylist():
            if len((row["text"] or "").split()) >= 60:
                base.append(row)
        if len(base) >= n - n_dup - n_junk:
            break
    base = base[:n - n_dup - n_junk]
    docs = [dict(d) for d in base]
    for i in range(n_phi):        # PHI planted in real abstracts, mid-text
        d = docs[rng.randrange(len(docs))]
        words = d["text"].split()
        cut = len(words) // 2
        d["text"] = " ".join(
            words[:cut]
            + [
                f"Patient Maria Lopez-{i}, MRN {4400000 + i}, seen on 03/{i % 28 + 1:02d}/2019 "
                f"(phone 617-555-{1000 + i}) at Mercy General Hospital."
            ]
            + words[cut:]
        )
    for i in range(n_dup):
        src = base[rng.randrange(len(base))]
        words = src["text"].split()
        if i % 2:
            words[rng.randrange(len(words))] = "notably"
        docs.append({"id": f"dup{i:04d}", "text": " ".join(words)})
    for i in range(n_junk):
        if i % 2:
            text = " ".join(str(rng.randrange(10**6)) for _ in range(120))
        else:
            text = " ".join(["click here subscribe now"] * 40)
        docs.append({"id": f"junk{i:04d}", "text": text})
    rng.shuffle(docs)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as fh:
        for d in docs:
            fh.write(json.dumps({"id": d["id"], "text": d["text"]}, ensure_ascii=False) + "\n")
    return path


def digests(run_dir: Path) -> dict[str, str]:
    """final/ and tokenizer/ files by content, except the dataset card (final/README.md), which
    names the run folder and the config file: the retuned and the fresh run differ there by
    design."""
    return {
        rel: hashlib.sha256(p.read_bytes()).hexdigest()
        for sub in ("final", "tokenizer")
        for p in sorted((run_dir / sub).rglob("*"))
        if p.is_file()
        for rel in [p.relative_to(run_dir).as_posix()]
        if rel != "final/README.md"
    }


def comparison(a: Path, b: Path) -> dict:
    da, db = digests(a), digests(b)
    return {
        "files_compared": len(da),
        "identical_final_and_tokenizer": sorted(da) == sorted(db) and all(da[k] == db[k] for k in da),
        "differing": sorted(k for k in set(da) | set(db) if da.get(k) != db.get(k)),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--docs", type=int, default=1500)
    ap.add_argument("--before", type=float, default=0.9)
    ap.add_argument("--after", type=float, default=0.5)
    ap.add_argument("--input", help="another corpus instead of configs/pubmed.yaml's input (same chain)")
    ap.add_argument(
        "--other-corpus",
        action="store_true",
        help="build the other corpus (see other_corpus) and use it as --input; writes "
        "bench/retune_other.json unless --out says otherwise",
    )
    ap.add_argument("--repeat", type=int, default=3, help="first/retune pairs (the median pair's ratio is reported)")
    ap.add_argument("--out", default=str(ROOT / "bench/retune.json"))
    ap.add_argument(
        "--recompare",
        action="store_true",
        help="only compare again the run folders the last run left in bench/work/retune, and update "
        "the comparison in --out (after a change to what is compared)",
    )
    args = ap.parse_args()
    WORK.mkdir(parents=True, exist_ok=True)
    if args.recompare:
        result = json.loads(Path(args.out).read_text())
        result.update(comparison(WORK / "retuned", WORK / "fresh"))
        Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
        print(json.dumps({k: result[k] for k in ("files_compared", "identical_final_and_tokenizer", "differing")}))
        return
    if args.other_corpus:
        args.input = str(other_corpus(args.docs, WORK / f"other-corpus-{args.docs}.jsonl").relative_to(ROOT))
        if args.out == str(ROOT / "bench/retune.json"):
            args.out = str(ROOT / "bench/retune_other.json")
    a, b = WORK / "retuned", WORK / "fresh"
    for d in (a, b):
        shutil.rmtree(d, ignore_errors=True)
    load_at_start = [round(x, 1) for x in os.getloadavg()]
    pairs = []
    for _ in range(max(1, args.repeat)):
        shutil.rmtree(a, ignore_errors=True)
        first = run(write_config("first", args.docs, args.before, a, args.input))
        retune = run(write_config("retune", args.docs, args.after, a, args.input))
        pairs.append((retune["wall_s"] / first["wall_s"], first, retune))
    _, first, retune = sorted(pairs, key=lambda p: p[0])[len(pairs) // 2]
    fresh = run(write_config("fresh", args.docs, args.after, b, args.input))
    result = {
        "command": f"python scripts/benchmarks/bench_retune.py --docs {args.docs} --before {args.before} "
                   f"--after {args.after}"
        + (f" --repeat {args.repeat}" if args.repeat != 3 else "")
        + (" --other-corpus" if args.other_corpus else f" --input {args.input}" if args.input else ""),
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "config": "configs/pubmed.yaml",
        "input": args.input or "configs/pubmed.yaml's",
        "docs": args.docs,
        "max_score": {"before": args.before, "after": args.after},
        "first": first,
        "retune": retune,
        "fresh": fresh,
        "pairs": [
            {"first_wall_s": f["wall_s"], "retune_wall_s": r["wall_s"], "retune_vs_first_wall": round(x, 3)}
            for x, f, r in pairs
        ],
        "retune_vs_first_wall": round(retune["wall_s"] / first["wall_s"], 3),
        "retune_vs_first_chain": round(retune["chain_seconds"] / first["chain_seconds"], 3),
        **comparison(a, b),
        # Other processes on the machine stretch the wall times (and the first run's more: phi).
        "load_average_at_start": load_at_start,
        "load_average_at_end": [round(x, 1) for x in os.getloadavg()],
    }
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
