"""What a second core of this machine gives the chain's own work, measured without our executor:
each stage named by --stages runs on the same DOCS documents of the scale corpus
(scripts/benchmarks/bench_scale.py) once alone, then as two copies at once, every copy one
process (`python -m pipeline.stage NAME --config C --input F`, num_proc 1, its own run folder
and cache).

Two copies at once do twice the work; a stage split perfectly over two workers can at best take
`pair_wall / (2 × alone_wall)` of one worker's wall here (`best_2_vs_1`): 0.5 where the two cores
do not slow each other down, more where they share a physical core, caches or memory bandwidth
(a 2-vCPU virtual machine's cores can be one core's two hyperthreads). `cpu_per_doc_pair_vs_alone`:
the CPU seconds each copy spends on the same documents beside another against alone.
`bench_scale.py`'s 2-over-1 walls are read against these.

    python scripts/benchmarks/core_scaling.py [--docs 30000] [--stages langid,heuristics,toxicity,phi]
                                             [--out bench/core_scaling.json]
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
WORK = ROOT / "bench/work/core_scaling"

from scripts.benchmarks.bench_scale import RATES, chain_settings, checkout_state, corpus  # noqa: E402


def run_copies(chain: dict, stage: str, data: Path, copies: int, label: str) -> list[dict]:
    """`copies` processes of the stage started together: each one's wall and CPU seconds."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    procs = []
    for i in range(copies):
        out = WORK / f"{stage}-{label}-{i}"
        shutil.rmtree(out, ignore_errors=True)
        # Its own run folder and cache: a copy must not decide from scores another one kept.
        cfg = WORK / f"{stage}-{label}-{i}.yaml"
        cfg.write_text(yaml.safe_dump({**chain, "output_dir": str(out), "cache": {"folder": str(out)}},
                                      sort_keys=False), encoding="utf-8")
        cmd = [sys.executable, "-m", "pipeline.stage", stage, "--config", str(cfg), "--input", str(data)]
        procs.append((time.perf_counter(), subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL)))
    results = []
    for t0, proc in procs:
        _, status, usage = os.wait4(proc.pid, 0)
        if os.waitstatus_to_exitcode(status) != 0:
            raise SystemExit(f"core_scaling: `{' '.join(proc.args)}` failed")
        results.append({"wall_s": round(time.perf_counter() - t0, 2),
                        "cpu_s": round(usage.ru_utime + usage.ru_stime, 2)})
    return results


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--docs", type=int, default=30_000, help="documents each copy works on")
    ap.add_argument("--stages", default="langid,heuristics,toxicity,phi", help="stages of configs/pubmed.yaml, in turn")
    ap.add_argument("--corpus-docs", type=int, default=1_000_000, help="the scale corpus to read (its first shard)")
    ap.add_argument("--out", type=Path, default=ROOT / "bench/core_scaling.json")
    args = ap.parse_args()
    folder, _ = corpus(args.corpus_docs, RATES)
    data = sorted(folder.glob("*.parquet"))[0]
    shutil.rmtree(WORK, ignore_errors=True)
    WORK.mkdir(parents=True)
    chain = chain_settings(folder, args.docs, 1, WORK)
    names = [s for s in args.stages.split(",") if s]
    known = [next(iter(s)) for s in chain["stages"]]
    unknown = [s for s in names if s not in known]
    if unknown:
        raise SystemExit(f"core_scaling: --stages {','.join(unknown)}: not a stage of configs/pubmed.yaml")
    stages = {}
    code = checkout_state(args.out)     # before the runs: what the children import
    load0 = os.getloadavg()[0]
    for stage in names:
        alone = run_copies(chain, stage, data, 1, "alone")[0]
        pair = run_copies(chain, stage, data, 2, "pair")
        pair_wall = max(r["wall_s"] for r in pair)
        pair_cpu = sum(r["cpu_s"] for r in pair) / 2
        stages[stage] = {"alone": alone, "pair": pair,
                         "best_2_vs_1": round(pair_wall / (2 * alone["wall_s"]), 3),
                         "cpu_per_doc_pair_vs_alone": round(pair_cpu / alone["cpu_s"], 3)}
        print(f"{stage}: alone {alone['wall_s']} s, two at once {pair_wall} s: best 2 vs 1 "
              f"{stages[stage]['best_2_vs_1']}", file=sys.stderr)
    result = {"command": "python " + " ".join([str(Path(sys.argv[0]).resolve().relative_to(ROOT)), *sys.argv[1:]]),
              "code": code, "docs": args.docs, "input": str(data.relative_to(ROOT)), "cores": os.cpu_count(),
              "load_average_at_start": round(load0, 2), "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
              "stages": stages}
    args.out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
