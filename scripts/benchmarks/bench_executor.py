"""Scaling: the whole default chain (configs/pubmed.yaml) under the local executor and under
Ray with 1 and 2 workers, then a projection for 36 M abstracts from measured costs.

    python scripts/benchmarks/bench_executor.py [--docs 10000] [--driver-docs 2000000]   # part of `make bench`

1. Four runs of configs/pubmed.yaml on its first `--docs` abstracts (input.limit), each in its
   own process and run folder: local with num_proc 1 and 2; Ray (a local instance with 2 CPUs)
   with 1 worker per stage and with 2 workers per stage (one actor pool per run, rebound to
   each stage in turn). Wall time from the manifest, docs/s, the ratios between them (2 vs 1 Ray
   workers: the median of `--repeat` pairs run back to back; 2 vs 1 local processes; Ray vs
   local at the same worker count), and whether data/, removed/, tokenizer and final/ are
   byte-identical across the four.
2. Per-document costs: each stage's shard-task seconds in the 1-worker Ray run (one core) per
   document read, and its driver seconds (reading the source into shards, combining results).
3. The driver-side steps that do not shrink with more workers, timed at `--driver-docs`
   documents on synthetic inputs shaped like the MinHash benchmark's (8 % of rows near
   duplicates of an earlier row): exact dedup's first-row-per-hash, MinHash's clustering
   (star and connected components) over the verified pairs, pack's plan (the shards' bin
   counts summed and cut into buckets), and tokenizer training on a `train_sample_docs`
   sample (200,000 documents of real abstract text).
4. Projection for N documents on C cores: sum over stages of (task cost per document x
   documents reaching the stage / C) + driver steps scaled from --driver-docs to N (linear)
   + tokenizer training (constant: a fixed sample). Per-file reading is capped at the file
   count (1,334 for PubMed); partition and bucket tasks (MinHash's 256 partitions, pack's
   buckets: about 170 at 36 M with 512 MB) are not capped here, so on 1,024 cores their share
   is underestimated.

Writes bench/executor.json (also printed). No test asserts on these numbers."""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
WORK = ROOT / "bench/work/executor"
def chain_stages() -> list[str]:
    """The default chain's stage names, from configs/pubmed.yaml (every one gets the run's worker count)."""
    import yaml
    return [
        next(iter(e)) if isinstance(e, dict) else e
        for e in yaml.safe_load((ROOT / "configs/pubmed.yaml").read_text())["stages"]
    ]


PUBMED_DOCS = 36_000_000
PUBMED_FILES = 1334
CORES = [64, 512, 1024]
TOKENIZER_SAMPLE = 200_000


def run_variant(name: str, docs: int, executor: dict, num_proc: int) -> dict:
    import yaml

    raw = yaml.safe_load((ROOT / "configs/pubmed.yaml").read_text())
    raw["input"] = {**raw["input"], "limit": docs}
    raw["output_dir"] = str(WORK / name)
    raw["num_proc"] = num_proc
    raw["executor"] = executor
    raw["report"] = False
    cfg = WORK / f"{name}.yaml"
    cfg.write_text(yaml.safe_dump(raw, sort_keys=False))
    # Relative paths of the default config (model_path) are looked for beside the config, then here.
    import shutil

    shutil.rmtree(WORK / name, ignore_errors=True)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "pipeline", "run", "--config", str(cfg)], cwd=ROOT, capture_output=True, text=True
    )
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"{name}: run failed:\n{proc.stderr[-3000:]}")
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    manifest = json.loads((WORK / name / "manifest.json").read_text())
    stages = {
        s["stage"]: {
            "docs_in": s["docs_in"],
            "seconds": s["seconds"],
            "seconds_tasks": s.get("seconds_tasks"),
            "seconds_ingest": s.get("seconds_ingest", 0.0),
            **_fixed_driver_seconds(s),
        }
        for s in manifest["stages"]
    }
    return {
        "executor": manifest["executor"],
        "docs_read": manifest["docs_read"],
        "chain_seconds": manifest["seconds"],
        "process_wall_s": round(wall, 1),
        "docs_per_s": round(manifest["docs_read"] / manifest["seconds"], 1),
        # The driver process: Ray's workers are not its waited-for children, so their memory is not in it.
        "driver_peak_rss_MB": round(after.ru_maxrss / 1024) if after.ru_maxrss > before.ru_maxrss else None,
        "stages": stages,
    }


def _fixed_driver_seconds(stage: dict) -> dict:
    """A stage's driver seconds that do not grow with the corpus: decontaminate's build of each
    benchmark's n-gram set (the same 1,000 PubMedQA items at any corpus size)."""
    builds = [b["build_seconds"] for b in (stage.get("benchmarks") or {}).values() if "build_seconds" in b]
    return {"seconds_fixed": round(sum(builds), 3)} if builds else {}


def contract_files(run: Path) -> dict[str, str]:
    """Digests of the files whose bytes are the contract: stages/, tokenizer/ and final/,
    except stats (timings) and the dataset card (final/README.md quotes the config: executor,
    num_proc, the run folder)."""
    import hashlib

    out = {}
    for path in sorted(run.rglob("*")):
        rel = path.relative_to(run).as_posix()
        if (
            path.is_file()
            and rel.split("/")[0] in ("stages", "tokenizer", "final")
            and not rel.endswith(("stats.json",))
            and "/shards/" not in rel
            and rel != "final/README.md"
        ):
            out[rel] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out


def compare_runs(names: list[str]) -> dict:
    digests = {name: contract_files(WORK / name) for name in names}
    first = next(iter(digests.values()))
    return {"identical_outputs": all(d == first for d in digests.values()), "files_compared": len(first)}


def driver_steps(n: int) -> dict:
    """The driver's own work at n documents, on synthetic inputs (see the module docstring)."""
    from pipeline.stages.dedup_minhash import ShardSignatures, component_clusters, star_clusters

    rng = np.random.default_rng(0)
    out = {"docs": n}
    # exact dedup: first row per 128-bit hash (8 % repeats)
    hashes = rng.integers(0, 2**63, size=(n, 2), dtype=np.uint64)
    dup = rng.random(n) < 0.08
    src = rng.integers(0, n, size=n)
    earlier = np.minimum(src, np.arange(n))
    hashes[dup] = hashes[earlier[dup]]
    t0 = time.perf_counter()
    keyed = np.ascontiguousarray(hashes).view([("hi", np.uint64), ("lo", np.uint64)]).ravel()
    _, first, inverse = np.unique(keyed, return_index=True, return_inverse=True)
    _ = first[inverse]
    out["exact_first_row_s"] = round(time.perf_counter() - t0, 2)
    del hashes, keyed
    # MinHash clustering over verified pairs: each planted row paired with its source (and a
    # few with two), signatures 128 x uint32 per row on disk as shards of 100k rows.
    work = WORK / "driver_sigs"
    work.mkdir(parents=True, exist_ok=True)
    num_perm, shard = 128, 100_000
    names, offsets = [], []
    for i, lo in enumerate(range(0, n, shard)):
        m = min(shard, n - lo)
        sig = rng.integers(0, 2**32, size=(m, num_perm), dtype=np.uint32)
        names.append(f"{i:05d}")
        offsets.append(lo)
        np.save(work / f"sig-{names[-1]}.npy", sig)
    rows = np.flatnonzero(dup & (earlier < np.arange(n)))
    u, v = earlier[rows].astype(np.int64), rows.astype(np.int64)
    # Make the planted rows near copies of their source (90 % equal values).
    sigs = ShardSignatures(work, names, offsets, num_perm)
    for i in range(0, len(v), 50_000):
        uu, vv = u[i : i + 50_000], v[i : i + 50_000]
        copy = sigs[uu]
        noise = rng.random(copy.shape) < 0.1
        copy[noise] = rng.integers(0, 2**32, size=int(noise.sum()), dtype=np.uint32)
        for s in np.unique(np.searchsorted(offsets, vv, side="right") - 1).tolist():
            sel = (np.searchsorted(offsets, vv, side="right") - 1) == s
            arr = np.load(work / f"sig-{names[s]}.npy", mmap_mode="r+")
            arr[vv[sel] - offsets[s]] = copy[sel]
            arr.flush()
            del arr
        sigs.release()
    out["verified_pairs"] = int(len(u))
    t0 = time.perf_counter()
    star_clusters(ShardSignatures(work, names, offsets, num_perm), n, u, v, 0.75)
    out["minhash_star_clusters_s"] = round(time.perf_counter() - t0, 2)
    t0 = time.perf_counter()
    component_clusters(n, u, v)
    out["minhash_components_s"] = round(time.perf_counter() - t0, 2)
    import shutil

    shutil.rmtree(work)
    # tokenizer training on a fixed sample of real abstract text
    from pipeline.config import InputConfig
    from pipeline.readers import read_documents
    from pipeline.stages.tokenizer import TokenizerConfig, build_trainer
    from pipeline.stages.tokenizer.word_counts import WordCounter, merge_counts, train_from_counts

    texts = []
    for batch in read_documents(InputConfig(paths=[str(ROOT / "data/raw/pubmed21n1298.xml.gz")]), 2000):
        texts.extend(batch.table["text"].to_pylist())
    sample = [texts[i % len(texts)] for i in range(TOKENIZER_SAMPLE)]
    # The stage's tasks count the words (spread over the workers, in the projection's task
    # costs); the driver sums the counts and learns the merges from them: that is timed here.
    t0 = time.perf_counter()
    parts = []
    for i in range(0, len(sample), 10_000):  # one shard's counts per 10,000 documents
        counter = WordCounter()
        counter.add(sample[i : i + 10_000])
        parts.append(counter.table())
    out["tokenizer_count_words_task_s"] = round(time.perf_counter() - t0, 2)
    tok, trainer = build_trainer(TokenizerConfig(vocab_size=32000))
    t0 = time.perf_counter()
    train_from_counts(tok, trainer, merge_counts(parts))
    out["tokenizer_train_s"] = round(time.perf_counter() - t0, 2)
    out["tokenizer_train_docs"] = TOKENIZER_SAMPLE
    out["tokenizer_train_note"] = (
        "the driver's part: summing the shards' word counts and learning the merges from "
        "them (counting is the tasks' work, tokenizer_count_words_task_s in all); real "
        "abstracts repeated to the sample size: BPE training time grows with the text's "
        "distinct words, so a sample of 200,000 distinct abstracts may take longer"
    )
    return out


def pack_plan_step(n: int, shard_size: int = 10_000) -> dict:
    """pack's driver step at n documents: read every shard's bin counts (as the tokenize tasks
    write them, n / shard_size shards), sum them, cut the buckets, make the bucket tasks."""
    import shutil

    from pipeline.runpath import RunPath, save_npy
    from pipeline.stages.pack import BINS, COUNTS, Pack, PackConfig

    rng = np.random.default_rng(1)
    work = RunPath.of(WORK / "driver_pack")
    shutil.rmtree(WORK / "driver_pack", ignore_errors=True)
    names = [f"{i:05d}" for i in range(-(-n // shard_size))]
    for name in names:
        counts = np.zeros((BINS, len(COUNTS)), np.int64)
        rows = rng.multinomial(shard_size, np.full(BINS, 1 / BINS))
        counts[:, 0] = rows
        counts[:, 1] = rows  # all train: the same work as any split mix
        counts[:, 3] = rows * 330  # ~330 tokens per abstract
        save_npy(work / "tokens" / f"{name}.counts.npy", counts)
    t0 = time.perf_counter()
    tasks, _, stats = Pack(PackConfig(), None)._plan(work, names, 0)
    seconds = time.perf_counter() - t0
    shutil.rmtree(WORK / "driver_pack")
    return {"pack_plan_s": round(seconds, 2), "pack_plan_shards": len(names), "pack_plan_buckets": len(tasks)}


def projection(one_worker: dict, driver: dict, docs_read: int) -> dict:
    """Hours for PUBMED_DOCS documents on C cores. Shard tasks and per-file reading divide by
    the cores (reading by at most PUBMED_FILES); the driver's part does not: exact dedup's and
    MinHash's driver steps as timed at 2 M documents, other stages' driver seconds per
    document at the bench size, scaled to N, less their fixed steps (decontaminate's benchmark
    build), counted once; tokenizer training is constant (a fixed `train_sample_docs` sample),
    plus its comparison. The tokenizer's tasks (passing documents through, counting the words
    of those in its sample) are scaled per document like the others': with a fixed sample they
    count fewer words than that, so their share is overestimated."""
    stages = one_worker["stages"]
    scale = PUBMED_DOCS / docs_read
    task_s = {s: v["seconds_tasks"] for s, v in stages.items()}
    per_doc_ms = {s: round(1000 * task_s[s] / docs_read, 4) for s in stages}
    ingest_s = sum(v["seconds_ingest"] for v in stages.values())
    fixed_s = {s: v.get("seconds_fixed", 0.0) for s, v in stages.items()}
    driver_s = {s: max(0.0, v["seconds"] - v["seconds_tasks"] - v["seconds_ingest"]) for s, v in stages.items()}
    at_2m = {
        "dedup_exact": driver["exact_first_row_s"],
        "dedup_minhash": driver["minhash_star_clusters_s"],
        "pack": driver["pack_plan_s"],
    }
    driver_36m = {}
    for s, sec in driver_s.items():
        if s == "tokenizer":
            driver_36m[s] = driver["tokenizer_train_s"] + sec  # training on the sample + the comparison
            continue
        # Exact dedup's, MinHash's and pack's driver steps as timed at 2 M documents (at the bench
        # size their fixed costs, loading 256 partition files or the tokenizer, would be scaled
        # as if per document).
        # A fixed step (decontaminate's benchmark build) is counted once, not per document.
        fixed = min(fixed_s[s], sec)
        per_doc = at_2m[s] / driver["docs"] if s in at_2m else (sec - fixed) / docs_read
        driver_36m[s] = per_doc * PUBMED_DOCS + fixed
    driver_total = sum(driver_36m.values())
    out = {
        "docs": PUBMED_DOCS,
        "task_ms_per_doc_read": per_doc_ms,
        "ingest_ms_per_doc": round(1000 * ingest_s / docs_read, 4),
        "driver_seconds_at_bench_size": {s: round(v, 2) for s, v in driver_s.items()},
        "driver_seconds_at_36M": {s: round(v) for s, v in driver_36m.items()},
        "cores": {},
    }
    for c in CORES:
        tasks = sum(task_s.values()) * scale / c
        ingest = ingest_s * scale / min(c, PUBMED_FILES)
        hours = (tasks + ingest + driver_total) / 3600
        out["cores"][str(c)] = {
            "hours": round(hours, 2),
            "tasks_hours": round(tasks / 3600, 2),
            "ingest_hours": round(ingest / 3600, 3),
            "driver_hours": round(driver_total / 3600, 2),
        }
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--docs", type=int, default=10_000)
    ap.add_argument("--driver-docs", type=int, default=2_000_000)
    ap.add_argument(
        "--repeat",
        type=int,
        default=3,
        help="Ray 1-worker / 2-worker pairs, run back to back; the median pair is reported",
    )
    ap.add_argument(
        "--keep-driver-steps",
        action="store_true",
        help="take the driver-step timings (2 M documents) from the previous bench/executor.json "
        "instead of timing them again (they do not depend on the executor)",
    )
    ap.add_argument(
        "--project-only",
        action="store_true",
        help="recompute only the projection from the runs in bench/executor.json (and the byte "
        "comparison, from the run folders the last run left in bench/work/executor)",
    )
    args = ap.parse_args()
    if args.repeat < 1:
        ap.error("--repeat: at least 1 pair")
    if args.project_only:
        result = json.loads((ROOT / "bench/executor.json").read_text())
        if "pack_plan_s" not in result["driver_steps"]:
            result["driver_steps"].update(pack_plan_step(result["driver_steps"]["docs"]))
        one = result["runs"]["ray_1_worker"]
        manifest = WORK / "ray_1_worker" / "manifest.json"
        if manifest.exists():  # fixed driver steps, where the stored runs predate them
            for s in json.loads(manifest.read_text())["stages"]:
                one["stages"].get(s["stage"], {}).update(_fixed_driver_seconds(s))
        result["projection"] = projection(one, result["driver_steps"], one["docs_read"])
        if all((WORK / name).is_dir() for name in result["runs"]):  # compare the runs' bytes again
            result.update(compare_runs(list(result["runs"])))
        (ROOT / "bench/executor.json").write_text(json.dumps(result, indent=2) + "\n")
        print(json.dumps(result["projection"], indent=2))
        return 0
    WORK.mkdir(parents=True, exist_ok=True)
    chain = chain_stages()
    stages = {s: 1 for s in chain}
    variants = {
        "local_1_process": ({"kind": "local"}, 1),
        "local_2_processes": ({"kind": "local"}, 2),
        "ray_1_worker": ({"kind": "ray", "num_cpus": 2, "workers": stages}, 1),
        "ray_2_workers": ({"kind": "ray", "num_cpus": 2, "workers": {s: 2 for s in chain}}, 1),
    }
    load_at_start = [round(x, 1) for x in os.getloadavg()]
    result = {
        "command": " ".join(["python scripts/benchmarks/bench_executor.py", *sys.argv[1:]]),
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "docs": args.docs,
        "config": "configs/pubmed.yaml (input.limit = docs, report off)",
        "runs": {},
    }
    for name in ("local_1_process", "local_2_processes"):
        print(f"running {name} ...", file=sys.stderr)
        result["runs"][name] = run_variant(name, args.docs, *variants[name])
    # The Ray pair `--repeat` times, 1 and 2 workers back to back: this machine's CPU speed
    # drifts by tens of percent over minutes, so one pair's ratio is partly the drift. The runs
    # kept are those of the median pair (by ratio); every pair's ratio is listed.
    pairs = []
    for k in range(args.repeat):
        pair = {}
        for name in ("ray_1_worker", "ray_2_workers"):
            print(f"running {name} ({k + 1}/{args.repeat}) ...", file=sys.stderr)
            pair[name] = run_variant(name, args.docs, *variants[name])
        pairs.append(pair)

    def ratio(pair):
        return pair["ray_2_workers"]["docs_per_s"] / pair["ray_1_worker"]["docs_per_s"]

    median = sorted(pairs, key=ratio)[len(pairs) // 2]
    result["runs"].update(median)
    result["ray_pairs"] = [
        {
            "speedup_2_vs_1": round(ratio(p), 3),
            "ray_1_chain_s": p["ray_1_worker"]["chain_seconds"],
            "ray_2_chain_s": p["ray_2_workers"]["chain_seconds"],
        }
        for p in pairs
    ]
    result.update(compare_runs(list(variants)))
    previous = json.loads((ROOT / "bench/executor.json").read_text()) if (ROOT / "bench/executor.json").exists() else {}
    if args.keep_driver_steps and "driver_steps" in previous:
        result["driver_steps"] = {**previous["driver_steps"], "kept_from_previous_run": True}
    else:
        print("timing driver steps ...", file=sys.stderr)
        result["driver_steps"] = {**driver_steps(args.driver_docs), **pack_plan_step(args.driver_docs)}
    runs = result["runs"]
    one = runs["ray_1_worker"]
    result["projection"] = projection(one, result["driver_steps"], one["docs_read"])
    # Chain wall time ratios on the same work (docs/s of one over the other).
    result["speedup_2_vs_1_ray_workers"] = round(runs["ray_2_workers"]["docs_per_s"] / one["docs_per_s"], 2)
    result["speedup_2_vs_1_local_processes"] = round(
        runs["local_2_processes"]["docs_per_s"] / runs["local_1_process"]["docs_per_s"], 2
    )
    result["ray_1_worker_vs_local_1_process"] = round(one["docs_per_s"] / runs["local_1_process"]["docs_per_s"], 2)
    result["ray_2_workers_vs_local_2_processes"] = round(
        runs["ray_2_workers"]["docs_per_s"] / runs["local_2_processes"]["docs_per_s"], 2
    )
    result["load_average_at_start"] = load_at_start
    result["load_average_at_end"] = [round(x, 1) for x in os.getloadavg()]
    (ROOT / "bench/executor.json").write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
