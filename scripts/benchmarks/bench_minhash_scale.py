"""dedup_minhash at scale, as a user runs it: with 1 worker and with the workers the machine
has (`num_proc`), memory bounded by configuration, not corpus size.

Builds N documents (default 2,000,000) from real MEDLINE sentences: each distinct document is
8 sentences drawn from the ~150k sentences of the default corpus (so distinct documents share
almost no 5-grams), and a fraction (default 10 %) are near duplicates of an earlier document
(a few words changed, or a copyright line appended). Writes them as Arrow shards, then, for
each worker count in turn (default 1 and 2), runs `python -m pipeline.stage dedup_minhash
--input ... --output ...` in a child process with `num_proc` set to it, and reports its wall
time, CPU time (worker processes included), docs/s, the peak RSS of its largest process and
the peak of all its processes together (summed PSS, sampled), the planted duplicates caught
(recall), the documents removed that were not planted (false merges: every distinct document
is its own 8 random sentences, so none of them should go), where the stage's time went
(phase wall seconds, and the driver process's own CPU in each: the part no worker shares),
and whether every run removed the same documents. With --ray, also one run under Ray with the
largest worker count. The result is stored under "minhash_scale" in bench/results.json (the
rest of the file is left as it is); its top-level figures are the first run's (1 worker), and
`wall_local_2_vs_local_1` is the 2-worker wall over the 1-worker wall.

    python scripts/benchmarks/bench_minhash_scale.py [--docs 2000000] [--dup-fraction 0.1] [--workers 1,2] [--ray]
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
WORK = ROOT / "bench/work/minhash_scale"
PAGE_BYTES = os.sysconf("SC_PAGE_SIZE")


def sentences() -> list[str]:
    from pipeline.config import InputConfig
    from pipeline.readers import read_documents
    out = []
    for batch in read_documents(InputConfig(paths=[str(ROOT / "data/raw/pubmed21n1298.xml.gz")]), 2000):
        for text in batch.table["text"].to_pylist():
            out.extend(s for s in re.split(r"(?<=[.!?])\s+", text.replace("\n", " ")) if len(s.split()) >= 6)
    return out


def build(n: int, dup_fraction: float, folder: Path, seed: int = 0) -> np.ndarray:
    """Writes the corpus; returns the row numbers of the planted near duplicates."""
    pool = sentences()
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    schema = pa.schema([("id", pa.string()), ("text", pa.string())])
    planted: list[np.ndarray] = []
    batch = 20_000
    recent: list[str] = []
    shard = 0
    for start in range(0, n, batch):
        m = min(batch, n - start)
        picks = rng.integers(0, len(pool), size=(m, 8))
        texts = [" ".join(pool[j] for j in row) for row in picks]
        is_dup = rng.random(m) < dup_fraction
        if not recent:
            is_dup[0] = False           # the very first document has nothing to copy
        for i in np.flatnonzero(is_dup):
            src = recent[rng.integers(len(recent))] if recent and rng.random() < 0.5 else texts[max(0, i - 1)]
            words = src.split(" ")
            if rng.random() < 0.5:
                for _ in range(2):
                    words[rng.integers(len(words))] = "modified"
                texts[i] = " ".join(words)
            else:
                texts[i] = src + " Copyright 2021 The Authors."
        planted.append(start + np.flatnonzero(is_dup))
        recent = texts[-200:]
        ids = [f"doc{start + i:08d}" for i in range(m)]
        with pa.OSFile(str(folder / f"{shard:05d}.arrow"), "wb") as sink:
            with pa.ipc.new_stream(sink, schema) as w:
                w.write_table(pa.table({"id": ids, "text": texts}, schema=schema), max_chunksize=1000)
        shard += 1
    return np.concatenate(planted).astype(np.int64)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--docs", type=int, default=2_000_000)
    ap.add_argument("--dup-fraction", type=float, default=0.1)
    ap.add_argument("--partitions", type=int, default=256)
    ap.add_argument("--workers", default="1,2", help="worker counts to run the stage with (num_proc), in turn")
    ap.add_argument(
        "--ray", action="store_true", help="also run under Ray (executor: ray) with the largest worker count"
    )
    ap.add_argument(
        "--out",
        help="write the result to this JSON file instead of under minhash_scale in "
        "bench/results.json (a smaller --docs run that should not replace the 2 M figures)",
    )
    args = ap.parse_args()
    data = WORK / f"input-{args.docs}"
    meta = data / "planted.npy"  # row numbers of the planted near duplicates
    if not meta.exists():
        shutil.rmtree(data, ignore_errors=True)
        planted_rows = build(args.docs, args.dup_fraction, data)
        np.save(meta, planted_rows)
    planted_rows = np.load(meta)
    size = sum(f.stat().st_size for f in data.glob("*.arrow"))
    workers = [int(w) for w in args.workers.split(",")]
    runs = [("local", w) for w in workers] + ([("ray", max(workers))] if args.ray else [])
    result = {
        "docs": args.docs,
        "input_MB": round(size / 1e6),
        "planted_near_duplicates": len(planted_rows),
        "partitions": args.partitions,
        "cores": os.cpu_count(),
        "load_average_at_start": [round(x, 1) for x in os.getloadavg()],
        "runs": [],
    }
    outputs = {}
    for executor, n in runs:
        run, digest = run_stage(data, args, executor, n, planted_rows)
        outputs[(executor, n)] = digest
        result["runs"].append(run)
        print(json.dumps(run), file=sys.stderr)
    first = result["runs"][0]
    # The first run's figures at the top level (the keys README's sentence reads), then the
    # comparison between worker counts.
    result.update(
        {
            k: first[k]
            for k in (
                "removed_near_duplicates",
                "planted_caught",
                "recall",
                "false_merges",
                "clustering",
                "wall_s",
                "cpu_s",
                "docs_per_s",
                "peak_rss_MB",
                "peak_rss_bytes_per_doc",
                "bands",
                "rows",
                "clusters",
                "largest_partition_pairs",
            )
        }
    )
    result["same_output_every_run"] = len(set(outputs.values())) == 1
    by = {(r["executor"], r["num_proc"]): r for r in result["runs"]}
    if ("local", 1) in by:
        for (executor, n), r in by.items():
            if (executor, n) != ("local", 1):
                result[f"wall_{executor}_{n}_vs_local_1"] = round(r["wall_s"] / by[("local", 1)]["wall_s"], 3)
    result["load_average_at_end"] = [round(x, 1) for x in os.getloadavg()]
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
        print(json.dumps(result))
        return 0
    results_path = ROOT / "bench/results.json"
    results = json.loads(results_path.read_text()) if results_path.exists() else {}
    results["minhash_scale"] = result
    results_path.write_text(json.dumps(results, indent=2) + "\n")
    print(json.dumps(result))
    return 0


def run_stage(data: Path, args, executor: str, num_proc: int, planted_rows: np.ndarray) -> tuple[dict, str]:
    """One run of the stage in a child process: its figures, and a digest of what it removed."""
    cfg = WORK / f"minhash-{executor}-{num_proc}.yaml"
    cfg.write_text(
        f"input: {{paths: [{data}]}}\noutput_dir: {WORK / 'run'}\nprogress: false\nbatch_size: 2000\n"
        f"shard_size: 200000\nnum_proc: {num_proc}\n"
        + (f"executor: {{kind: ray, num_cpus: {num_proc}}}\n" if executor == "ray" else "")
        + f"stages:\n  - dedup_minhash: {{partitions: {args.partitions}}}\n"
    )
    out = WORK / "out"
    shutil.rmtree(out, ignore_errors=True)
    code, usage, wall, pss_peak = run_measured(
        [sys.executable, "-m", "pipeline.stage", "dedup_minhash", "--config", str(cfg), "--input",
         *sorted(str(f) for f in data.glob("*.arrow")), "--output", str(out)])
    if code != 0:
        raise SystemExit(f"the {executor} run with {num_proc} workers failed")
    stats = json.loads((out / "stats.json").read_text())
    removed_rows = removed_row_numbers(out / "removed")
    is_planted = np.zeros(args.docs, bool)
    is_planted[planted_rows] = True
    caught = int(is_planted[removed_rows].sum())
    cpu = usage.ru_utime + usage.ru_stime
    import hashlib

    digest = hashlib.sha256(b"".join(f.read_bytes() for f in sorted((out / "removed").glob("*.arrow")))).hexdigest()
    run = {
        "name": f"{executor}_{num_proc}",
        "executor": executor,
        "num_proc": num_proc,
        "removed_near_duplicates": stats["removed"].get("near_duplicate", 0),
        "planted_caught": caught,
        "recall": round(caught / max(len(planted_rows), 1), 4),
        "false_merges": int(len(removed_rows) - caught),
        "clustering": stats.get("clustering"),
        "wall_s": round(wall, 1),
        "cpu_s": round(cpu, 1),
        "docs_per_s": round(args.docs / wall),
        "docs_per_cpu_s": round(args.docs / cpu),
        # The largest single process (wait4), and all of the run's processes at once (the
        # largest sum of their proportional set sizes, sampled every 0.2 s).
        "peak_rss_MB": round(usage.ru_maxrss / 1024),
        "peak_rss_bytes_per_doc": round(usage.ru_maxrss * 1024 / args.docs, 1),
        "peak_all_processes_pss_MB": round(pss_peak / 2**20),
        "bands": stats["bands"],
        "rows": stats["rows"],
        "clusters": stats["clusters"],
        "largest_partition_pairs": stats["largest_partition_pairs"],
        "stage_seconds": {k: stats[k] for k in ("seconds_ingest", "seconds_tasks") if k in stats}
        | stats.get("phase_seconds", {}),
        "driver_cpu_seconds": stats.get("driver_cpu_seconds", {}),
        "peak_rss_MB_by_pass": stats.get("peak_rss_mb", {}),
        "load_average_after": [round(x, 1) for x in os.getloadavg()],
    }
    return run, digest


def run_measured(cmd: list[str], **popen) -> tuple[int, object, float, int]:
    """Run a child process from the checkout: (exit code, its rusage by wait4 — CPU time with
    its worker processes' included, peak RSS of the largest —, wall seconds, the peak of the
    summed PSS of it and its descendants, sampled)."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, **popen)
    memory = TreeMemory(proc.pid)
    memory.start()
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    memory.stop()
    return os.waitstatus_to_exitcode(status), usage, wall, memory.peak


class TreeMemory:
    """Samples the summed PSS (/proc/PID/smaps_rollup) of a process and its descendants.

    Reading PSS walks each process's page tables: ~16 ms for three processes of ~500 MB here
    (timed once: 100 readings of a tree of three processes touching 600 + 2 × 500 MB),
    8 % of a core at 5 readings a second, taken from the run's workers when they keep both cores
    busy (a 2-worker run paid it, a 1-worker run's spare core did not). So the cheap resident
    size (/proc/PID/statm, ~0.05 ms) is read every `interval`, and PSS (never above it) only
    when the summed resident size is 1 % above the highest seen at a PSS reading, or
    `every` seconds after the last one."""

    def __init__(self, pid: int, interval: float = 0.2, every: float = 30.0):
        import threading

        self.pid, self.interval, self.every, self.peak = pid, interval, every, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        read_at, last = 0, float("-inf")
        while not self._stop.wait(self.interval):
            tree = _tree(self.pid)
            resident = sum(_rss(p) for p in tree)
            if resident > read_at * 1.01 or time.monotonic() - last >= self.every:
                self.peak = max(self.peak, sum(_pss(p) for p in tree))
                read_at, last = max(read_at, resident), time.monotonic()


def _tree(pid: int) -> list[int]:
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        for task in Path(f"/proc/{p}/task").glob("*/children"):
            try:
                todo.extend(int(c) for c in task.read_text().split())
            except OSError:
                pass
    return out


def _rss(pid: int) -> int:
    try:
        return int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * PAGE_BYTES
    except (OSError, IndexError, ValueError):
        return 0


def _pss(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def removed_row_numbers(folder: Path) -> np.ndarray:
    """Row numbers (from the docNNNNNNNN ids) of the documents the stage removed."""
    rows = []
    for f in sorted(folder.glob("*.arrow")):
        with pa.OSFile(str(f), "rb") as src:
            ids = pa.ipc.open_stream(src).read_all()["id"]
        rows.append(np.asarray([int(i[3:]) for i in ids.to_pylist()], np.int64))
    return np.concatenate(rows) if rows else np.zeros(0, np.int64)


if __name__ == "__main__":
    sys.exit(main())
