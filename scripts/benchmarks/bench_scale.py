"""The whole default chain (configs/pubmed.yaml's stages) at growing corpus sizes, with 1 and 2
workers: what each stage costs per document and in memory as the corpus grows (issue 38).

The corpus is made once from the real MEDLINE abstracts of data/raw/pubmed21n1298.xml.gz and
reused (bench/work/scale/corpus-N/, Parquet shards of 50,000 documents):
- a distinct document is k real sentences drawn at random from the ~150k sentences of the
  corpus (k drawn from the real abstracts' sentence counts), so distinct documents share
  almost no 5-grams and every stage does real work on real sentences;
- planted, each at a known rate (--help): exact copies of an earlier document, near duplicates
  (two words changed, or a copyright line appended), short junk (one sentence: under
  heuristics' 50 words), repeated-line junk, foreign text (sentences of MEDLINE's non-English
  OtherAbstracts), retracted records (`retraction` column) and documents that hold a PubMedQA
  context (decontamination's benchmark).
A smaller size reads the first N documents of the same corpus (`input.limit`).

Each (size, workers) pair is one `python -m pipeline run` in a child process in a fresh folder;
per stage, from its stats.json: documents in and kept, wall, CPU seconds (driver and workers),
docs per CPU-second, peak RSS of the driver and of the largest worker, bytes written; per run:
wall, CPU, the summed PSS of all processes (sampled), the near-duplicate recall against the
planted pairs that reached dedup_minhash (and documents it removed that were no planted pair's),
the exact-copy recall of dedup_exact. Per stage and size: `cost_ratio_vs_smallest` (CPU seconds
per document over the smallest size's, same workers); per size and stage: `wall_2_vs_1`.

    python scripts/benchmarks/bench_scale.py [--docs 1000000] [--sizes 20000,200000] [--workers 1,2]
                                             [--out bench/scale.json]
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
import pyarrow.parquet as pq
import yaml

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
WORK = ROOT / "bench/work/scale"
SOURCE = ROOT / "data/raw/pubmed21n1298.xml.gz"
SHARD_DOCS = 50_000
# Planted kinds and their default rates (share of all documents).
RATES = {"exact_copy": 0.02, "near_duplicate": 0.04, "short_junk": 0.01, "repeated_junk": 0.005,
         "foreign": 0.005, "retracted": 0.001, "contaminated": 0.0002}

from scripts.benchmarks.bench_minhash_scale import run_measured  # noqa: E402


def real_text() -> tuple[list[str], list[int], list[str]]:
    """The English sentences of the corpus, its abstracts' sentence counts, and the sentences of
    its non-English OtherAbstracts."""
    from pipeline.config import InputConfig
    from pipeline.readers import read_documents
    split = re.compile(r"(?<=[.!?])\s+")
    pool, counts, foreign = [], [], []
    for batch in read_documents(InputConfig(paths=[str(SOURCE)]), 2000):
        t = batch.table
        for kind, text in zip(t["abstract_type"].to_pylist(), t["text"].to_pylist()):
            sentences = [s for s in split.split(text.replace("\n", " ")) if len(s.split()) >= 6]
            if kind == "Publisher":
                foreign.extend(sentences)
            elif sentences:
                pool.extend(sentences)
                counts.append(len(sentences))
    return pool, counts, foreign


def pubmedqa_contexts() -> list[str]:
    items = json.loads((ROOT / "data/pubmedqa/ori_pqal.json").read_text(encoding="utf-8"))
    return [" ".join(item["CONTEXTS"]) for _, item in sorted(items.items())]


def build(n: int, rates: dict, folder: Path, seed: int = 0) -> dict:
    """Writes the corpus; returns what was planted: {kind: [row, ...]} and, for copies,
    [[row, source row], ...]."""
    pool, counts, foreign = real_text()
    contexts = pubmedqa_contexts()
    counts = np.clip(np.asarray(counts), 3, 30)
    rng = np.random.default_rng(seed)
    tmp = folder.with_name(folder.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    kinds = list(rates)
    cut = np.cumsum([rates[k] for k in kinds])
    planted: dict[str, list] = {k: [] for k in kinds}
    schema = pa.schema([("id", pa.string()), ("pmid", pa.string()), ("text", pa.string()),
                        ("retraction", pa.string())])
    recent: list[tuple[int, str]] = []  # (row, text) of the last distinct documents
    for shard, start in enumerate(range(0, n, SHARD_DOCS)):
        m = min(SHARD_DOCS, n - start)
        draw = rng.random(m)
        sizes = counts[rng.integers(0, len(counts), m)]
        texts, retraction = [], [None] * m
        for i in range(m):
            row = start + i
            k = int(np.searchsorted(cut, draw[i], side="right"))
            kind = kinds[k] if k < len(kinds) else None
            if kind in ("exact_copy", "near_duplicate") and not recent:
                kind = None
            if kind == "exact_copy":
                src_row, text = recent[rng.integers(len(recent))]
                planted[kind].append([row, src_row])
            elif kind == "near_duplicate":
                src_row, text = recent[rng.integers(len(recent))]
                if rng.random() < 0.5:
                    words = text.split(" ")
                    for _ in range(2):
                        words[rng.integers(len(words))] = "modified"
                    text = " ".join(words)
                else:
                    text = text + " Copyright 2021 The Authors."
                planted[kind].append([row, src_row])
            elif kind == "short_junk":
                text = pool[rng.integers(len(pool))]
                planted[kind].append(row)
            elif kind == "repeated_junk":
                text = "\n".join([pool[rng.integers(len(pool))]] * 12)
                planted[kind].append(row)
            elif kind == "foreign" and foreign:
                text = " ".join(foreign[j] for j in rng.integers(0, len(foreign), int(sizes[i])))
                planted[kind].append(row)
            else:
                text = " ".join(pool[j] for j in rng.integers(0, len(pool), int(sizes[i])))
                if kind == "retracted":
                    retraction[i] = "retracted"
                    planted[kind].append(row)
                elif kind == "contaminated":
                    text = text + " " + contexts[rng.integers(len(contexts))]
                    planted[kind].append(row)
                else:
                    recent.append((row, text))
                    if len(recent) > 2000:
                        recent = recent[-1000:]
            texts.append(text)
        ids = [f"s{start + i:08d}" for i in range(m)]
        pmids = [str(90_000_000 + start + i) for i in range(m)]
        table = pa.table({"id": ids, "pmid": pmids, "text": texts, "retraction": retraction}, schema=schema)
        pq.write_table(table, tmp / f"{shard:05d}.parquet", compression="zstd", row_group_size=5000)
    (tmp / "planted.json").write_text(json.dumps({"docs": n, "rates": rates, "seed": seed, "planted": planted}))
    shutil.rmtree(folder, ignore_errors=True)
    tmp.rename(folder)
    return planted


def corpus(n: int, rates: dict) -> tuple[Path, dict]:
    folder = WORK / f"corpus-{n}"
    if not (folder / "planted.json").exists() or json.loads((folder / "planted.json").read_text())["rates"] != rates:
        t0 = time.perf_counter()
        build(n, rates, folder)
        print(f"corpus: {n} documents in {time.perf_counter() - t0:.0f} s -> {folder}", file=sys.stderr)
    return folder, json.loads((folder / "planted.json").read_text())["planted"]


def chain_config(data: Path, size: int, workers: int, out: Path) -> Path:
    """configs/pubmed.yaml's stages over the corpus' first `size` documents, written to a file."""
    path = WORK / f"chain-{size}-{workers}.yaml"
    path.write_text(yaml.safe_dump(chain_settings(data, size, workers, out), sort_keys=False), encoding="utf-8")
    return path


def chain_settings(data: Path, size: int, workers: int, out: Path) -> dict:
    """configs/pubmed.yaml's stages over the corpus' first `size` documents."""
    cfg = yaml.safe_load((ROOT / "configs/pubmed.yaml").read_text(encoding="utf-8"))
    cfg["input"] = {"paths": [str(data)], "format": "parquet", "columns": ["pmid", "retraction"], "limit": size}
    cfg["output_dir"] = str(out)
    cfg["num_proc"] = workers
    cfg["progress"] = False
    for stage in cfg["stages"]:
        opts = next(iter(stage.values()))
        if isinstance(opts, dict) and "model_path" in opts:
            opts["model_path"] = str(ROOT / opts["model_path"])
        for bench in (opts or {}).get("benchmarks", []) if isinstance(opts, dict) else []:
            bench["path"] = str(ROOT / bench["path"])
    return cfg


def ids_of(folder: Path) -> set[str]:
    out: set[str] = set()
    for f in sorted(folder.glob("*.arrow")):
        with pa.OSFile(str(f), "rb") as src:
            out.update(pa.ipc.open_stream(src).read_all().column("id").to_pylist())
    return out


def folder_bytes(folder: Path) -> int:
    return sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())


def run_chain(data: Path, planted: dict, size: int, workers: int, written: Path | None = None) -> dict:
    out = WORK / f"run-{size}-{workers}"
    shutil.rmtree(out, ignore_errors=True)
    cfg = chain_config(data, size, workers, out)
    code_state = checkout_state(written)    # before the run: what the child imports
    code, usage, wall, pss_peak = run_measured([sys.executable, "-m", "pipeline", "run", "--config", str(cfg)],
                                               stdout=subprocess.DEVNULL)
    if code != 0:
        raise SystemExit(f"the chain at {size} documents with {workers} workers failed (see {out})")
    stages = {}
    folders = sorted(p for p in (out / "stages").iterdir() if p.is_dir())
    for folder in folders:
        st = json.loads((folder / "stats.json").read_text())
        docs = st.get("docs_in", 0)
        cpu = st.get("cpu_seconds")
        stages[st["stage"]] = {
            "docs_in": docs, "docs_out": st.get("docs_out"), "removed": st.get("removed", {}),
            "wall_s": st.get("seconds"), "cpu_s": cpu, "driver_cpu_s": st.get("driver_cpu_seconds"),
            "docs_per_cpu_s": round(docs / cpu, 1) if cpu else None,
            "cpu_ms_per_doc": round(1000 * cpu / docs, 4) if cpu and docs else None,
            "peak_rss_mb": {"driver": st.get("driver_peak_rss_mb"), "worker": st.get("worker_peak_rss_mb")},
            "disk_mb": round(folder_bytes(folder) / 1e6, 1)}
    names = [p.name for p in folders]
    by_name = {n.split("_", 1)[1]: out / "stages" / n for n in names}
    recall = {**near_duplicate_recall(planted, by_name, size), **jaccard_check(planted, by_name, size)}
    cpu = usage.ru_utime + usage.ru_stime
    return {"docs": size, "workers": workers, "code": code_state, "wall_s": round(wall, 1), "cpu_s": round(cpu, 1),
            "docs_per_cpu_s": round(size / cpu, 1), "peak_rss_mb_largest_process": round(usage.ru_maxrss / 1024),
            "peak_pss_mb_all_processes": round(pss_peak / 2**20), "stages": stages, **recall,
            "final_digest": final_digest(out)}


def checkout_state(written: Path | None = None) -> dict:
    """The commit the run's code came from, and whether the checkout had changes beside it
    (other than `written`: the result file this script writes after each run)."""
    def git(*args):
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    skip = []
    if written is not None and written.resolve().is_relative_to(ROOT):
        skip = [f":(exclude){written.resolve().relative_to(ROOT).as_posix()}"]
    return {"commit": git("rev-parse", "HEAD"),
            "dirty": bool(git("status", "--porcelain", "--untracked-files=no", "--", ".", *skip))}


def near_duplicate_recall(planted: dict, stage: dict, size: int) -> dict:
    """Planted pairs both of whose documents reached exact dedup, and how many of them the two
    dedup stages caught (one of the two removed: exact copies by dedup_exact; near duplicates by
    either, as a changed word can be one that normalization folds); documents either removed
    that were in no planted pair."""
    reached = ids_of(stage["phi"] / "data")
    exact = ids_of(stage["dedup_exact"] / "removed")
    near = ids_of(stage["dedup_minhash"] / "removed")
    out, in_pairs = {}, set()
    for kind, removed in (("exact_copy", exact), ("near_duplicate", exact | near)):
        pairs = [(f"s{a:08d}", f"s{b:08d}") for a, b in planted[kind] if a < size]
        in_pairs |= {x for pair in pairs for x in pair}
        eligible = [(a, b) for a, b in pairs if a in reached and b in reached]
        caught = sum(1 for a, b in eligible if a in removed or b in removed)
        out[f"{kind}_pairs_reached"] = len(eligible)
        out[f"{kind}_recall"] = round(caught / len(eligible), 4) if eligible else None
    out["dedup_removed_not_planted"] = len((exact | near) - in_pairs)
    return out


def jaccard_check(planted: dict, stage: dict, size: int, threshold: float = 0.8, ngram: int = 5) -> dict:
    """The planted near-duplicate pairs judged by their true Jaccard similarity (word 5-grams of
    the texts that entered dedup_minhash, as the stage shingles them): the recall among pairs at
    or above the threshold (a pair below it that is kept is a right answer, not a miss; a pair
    is caught when either dedup stage removed one of its two documents, as in
    near_duplicate_recall: two near copies of one source can be identical, and dedup_exact
    takes the second before dedup_minhash sees it), and the true Jaccard of each document
    removed as a near duplicate outside any planted pair with the document it was removed for
    (at or above the threshold: a real duplicate of the random corpus, not a false merge)."""
    from pipeline.engines.minhash import shingle_bytes
    from pipeline.shards import read_shard

    near = stage["dedup_minhash"] / "removed"
    dup_of = {}
    for f in sorted(near.glob("*.arrow")):
        with pa.OSFile(str(f), "rb") as src:
            t = pa.ipc.open_stream(src).read_all()
        dup_of.update(zip(t.column("id").to_pylist(), t.column("duplicate_of").to_pylist()))
    pairs = [(f"s{a:08d}", f"s{b:08d}") for a, b in planted["near_duplicate"] if a < size]
    in_pairs = {x for pair in pairs for x in pair} | {f"s{a:08d}" for a, _ in planted["exact_copy"] if a < size} \
        | {f"s{b:08d}" for _, b in planted["exact_copy"] if b < size}
    outside = [(a, b) for a, b in dup_of.items() if a not in in_pairs]
    wanted = {x for pair in pairs + outside for x in pair}
    texts = {}
    for f in sorted((stage["phi"] / "data").glob("*.arrow")):
        for t in read_shard(f, None, ["id", "text"]):
            for i, text in zip(t.column("id").to_pylist(), t.column("text").to_pylist()):
                if i in wanted:
                    texts[i] = text

    def jaccard(a: str, b: str) -> float:
        x, y = set(shingle_bytes(texts[a], ngram)), set(shingle_bytes(texts[b], ngram))
        return len(x & y) / len(x | y) if x | y else 1.0

    removed = set(dup_of) | ids_of(stage["dedup_exact"] / "removed")
    reached = [(a, b) for a, b in pairs if a in texts and b in texts]
    similar = {(a, b) for a, b in reached if jaccard(a, b) >= threshold}
    caught = sum(1 for a, b in similar if a in removed or b in removed)
    below_removed = sum(1 for a, b in reached if (a in removed or b in removed) and (a, b) not in similar)
    outside_j = sorted(round(jaccard(a, b), 3) for a, b in outside if a in texts and b in texts)
    return {"threshold": threshold, "near_duplicate_pairs_at_or_above_threshold": len(similar),
            "near_duplicate_pairs_below_threshold": len(reached) - len(similar),
            "near_duplicate_recall_at_or_above_threshold": round(caught / len(similar), 4) if similar else None,
            "below_threshold_pairs_removed": below_removed,
            "removed_outside_planted_pairs_jaccard": outside_j,
            "false_merges": sum(1 for j in outside_j if j < threshold)}


def final_digest(run: Path) -> str:
    import hashlib
    h = hashlib.sha256()
    for f in sorted((run / "final").rglob("*.arrow")):
        h.update(f.read_bytes())
    return h.hexdigest()[:16]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--docs", type=int, default=1_000_000, help="corpus size, and the largest run")
    ap.add_argument("--sizes", default="20000,200000", help="smaller sizes run besides --docs")
    ap.add_argument("--workers", default="1,2", help="worker counts (num_proc), each size in turn")
    ap.add_argument("--runs", help="only these SIZExWORKERS runs (e.g. 20000x1,20000x2,1000000x2), in order")
    ap.add_argument("--resume", action="store_true", help="keep the runs --out already holds for this corpus")
    ap.add_argument("--summarize", action="store_true", help="only write --out's tables again from its runs")
    ap.add_argument("--out", type=Path, default=ROOT / "bench/scale.json")
    ap.add_argument("--recheck", action="store_true", help="only add jaccard_check's figures to --out's runs "
                    "whose run folder (bench/work/scale/run-SIZE-WORKERS) is still there, with the same final/ bytes")
    ap.add_argument("--before", type=Path, help="another result file of this script (older code): each run's "
                    "docs per CPU-second against it (`against_before`)")
    for kind, rate in RATES.items():
        ap.add_argument(f"--{kind.replace('_', '-')}", type=float, default=rate, help=f"planted share (default {rate})")
    args = ap.parse_args()
    before_file = str(args.before.resolve().relative_to(ROOT)) if args.before else None
    if args.recheck:
        result = json.loads(args.out.read_text())
        _, planted = corpus(args.docs, {k: getattr(args, k) for k in RATES})
        for run in result["runs"]:
            folder = WORK / f"run-{run['docs']}-{run['workers']}" / "stages"
            # A folder of a later run is checked only if its final/ is the recorded run's bytes.
            if folder.is_dir() and final_digest(folder.parent) != run["final_digest"]:
                print(f"not rechecked: {folder.parent} holds other bytes than the run recorded", file=sys.stderr)
            elif folder.is_dir():
                by_name = {p.name.split("_", 1)[1]: p for p in folder.iterdir() if p.is_dir()}
                run.update(jaccard_check(planted, by_name, run["docs"]))
                print(f"rechecked: {folder.parent}", file=sys.stderr)
        args.out.write_text(json.dumps(summarize(result), indent=2) + "\n")
        return 0
    if args.summarize:
        result = json.loads(args.out.read_text())
        if before_file:
            result["before_file"] = before_file
        args.out.write_text(json.dumps(summarize(result), indent=2) + "\n")
        print(f"written: {args.out}")
        return 0
    rates = {k: getattr(args, k) for k in RATES}
    sizes = sorted({int(s) for s in args.sizes.split(",") if s} | {args.docs})
    workers = [int(w) for w in args.workers.split(",")]
    data, planted = corpus(args.docs, rates)
    result = {"command": "python scripts/benchmarks/bench_scale.py " + " ".join(sys.argv[1:]), "corpus_docs": args.docs,
              "corpus": "sentences of data/raw/pubmed21n1298.xml.gz, planted at known rates", "rates": rates,
              "config": "configs/pubmed.yaml (stages unchanged)", "cores": os.cpu_count(),
              "load_average_at_start": [round(x, 1) for x in os.getloadavg()], "runs": [],
              **({"before_file": before_file} if before_file else {})}
    plan = ([tuple(int(x) for x in r.split("x")) for r in args.runs.split(",")] if args.runs
            else [(size, w) for size in sizes for w in workers])
    if args.resume and args.out.exists():
        old = json.loads(args.out.read_text())
        if old.get("corpus_docs") == args.docs and old.get("rates") == rates:
            result["runs"] = [r for r in old["runs"] if (r["docs"], r["workers"]) in plan]
    done = {(r["docs"], r["workers"]) for r in result["runs"]}
    for size, w in plan:
        if (size, w) in done:
            continue
        if size > args.docs:
            raise SystemExit(f"--runs: {size} documents is more than the corpus' {args.docs}")
        run = run_chain(data, planted, size, w, args.out)
        result["runs"].append(run)
        print(json.dumps({k: v for k, v in run.items() if k != "stages"}), file=sys.stderr)
        args.out.write_text(json.dumps(summarize(result), indent=2) + "\n")
    result["load_average_at_end"] = [round(x, 1) for x in os.getloadavg()]
    args.out.write_text(json.dumps(summarize(result), indent=2) + "\n")
    print(f"written: {args.out}")
    return 0


def summarize(result: dict) -> dict:
    """Per stage and size: CPU per document over the smallest size's (same workers); per size and
    stage: the 2-worker wall over the 1-worker wall; whether worker counts gave the same bytes."""
    runs = {(r["docs"], r["workers"]): r for r in result["runs"]}
    smallest = min(d for d, _ in runs)
    table = {}
    for (docs, w), r in sorted(runs.items()):
        base = runs.get((smallest, w))
        for name, st in r["stages"].items():
            row = table.setdefault(name, {}).setdefault(str(docs), {})
            ref = base["stages"].get(name) if base else None
            if st["cpu_ms_per_doc"] and ref and ref["cpu_ms_per_doc"]:
                row[f"cost_ratio_vs_{smallest}_w{w}"] = round(st["cpu_ms_per_doc"] / ref["cpu_ms_per_doc"], 3)
            row[f"docs_per_cpu_s_w{w}"] = st["docs_per_cpu_s"]
            row[f"peak_rss_mb_w{w}"] = st["peak_rss_mb"]
            one, two = runs.get((docs, 1)), runs.get((docs, 2))
            if (same_code(one, two) and name in one["stages"] and name in two["stages"]
                    and one["stages"][name]["wall_s"]):
                row["wall_2_vs_1"] = round(two["stages"][name]["wall_s"] / one["stages"][name]["wall_s"], 3)
    sizes = {}
    for docs in sorted({d for d, _ in runs}):
        one, two = runs.get((docs, 1)), runs.get((docs, 2))
        any_run = two or one
        sizes[str(docs)] = {
            "wall_2_vs_1": round(two["wall_s"] / one["wall_s"], 3) if same_code(one, two) else None,
            "near_duplicate_recall": any_run["near_duplicate_recall"],
            "exact_copy_recall": any_run["exact_copy_recall"],
            **{k: any_run[k] for k in ("near_duplicate_recall_at_or_above_threshold", "false_merges") if k in any_run},
            "same_final_bytes_1_and_2_workers": (one["final_digest"] == two["final_digest"]) if same_code(one, two)
            else None,
            **{f"wall_s_w{w}": r["wall_s"] for w, r in ((1, one), (2, two)) if r},
            **{f"docs_per_cpu_s_w{w}": r["docs_per_cpu_s"] for w, r in ((1, one), (2, two)) if r},
            **{f"peak_rss_mb_largest_process_w{w}": r["peak_rss_mb_largest_process"] for w, r in ((1, one), (2, two))
               if r}}
    largest = str(max(d for d, _ in runs))
    out = {**result, "runs_wall_minutes": round(sum(r["wall_s"] for r in runs.values()) / 60, 1),
           "by_stage": table, "by_size": sizes, "largest": {"docs": int(largest), **sizes[largest]},
           "smallest": {"docs": smallest, **sizes[str(smallest)]}, "projection": projection(runs)}
    if result.get("before_file"):
        out["against_before"] = against_before(runs, ROOT / result["before_file"])
    return out


def same_code(one: dict | None, two: dict | None) -> bool:
    """Whether two runs ran the same commit's code (a run from before commits were recorded: no)."""
    commits = [(r or {}).get("code", {}).get("commit") for r in (one, two)]
    return commits[0] is not None and commits[0] == commits[1]


def against_before(runs: dict, before_file: Path) -> dict:
    """The whole chain's docs per CPU-second of each run against the same size and workers in
    another result file of this script (older code: `code` says which)."""
    before = {(r["docs"], r["workers"]): r for r in json.loads(before_file.read_text())["runs"]}
    out = {"file": str(before_file.relative_to(ROOT)), "runs": {}}
    for key in sorted(set(runs) & set(before)):
        now, then = runs[key], before[key]
        out["runs"][f"{key[0]}x{key[1]}"] = {
            "docs_per_cpu_s": now["docs_per_cpu_s"], "docs_per_cpu_s_before": then["docs_per_cpu_s"],
            "ratio": round(now["docs_per_cpu_s"] / then["docs_per_cpu_s"], 3),
            "code": now["code"], "code_before": then["code"],
            "stages_only_now": sorted(set(now["stages"]) - set(then["stages"]))}
    return out


# The corpora the projection is for, and the text length behind the full texts' factor: the six
# PMC articles of data/raw/pmc average ~29 kB of text per document against the corpus' ~1.5 kB.
PROJECTED = {"pubmed_abstracts": 36_000_000, "pmc_full_texts": 5_000_000}
CORES = (64, 256, 512)


def projection(runs: dict) -> dict | None:
    """Core-hours and wall time for all of PubMed from the largest run's CPU per document, with
    its assumptions: cost per document flat beyond the largest size (the table's ratios say how
    flat it was up to it), a full text costing its length in abstracts, and cores used as well as
    the 2-worker run used its 2 (the measured 2-over-1 wall)."""
    largest = max(d for d, _ in runs)
    run = runs.get((largest, 2)) or runs.get((largest, 1))
    if run is None:
        return None
    text_chars = _mean_text_chars()
    pmc_chars = _mean_pmc_chars()
    efficiency = None
    both = [d for d, _ in runs if same_code(runs.get((d, 1)), runs.get((d, 2)))]
    if both:
        d = max(both)
        efficiency = round(runs[(d, 1)]["wall_s"] / (2 * runs[(d, 2)]["wall_s"]), 3)
    cpu_per_doc = run["cpu_s"] / run["docs"]
    out = {"from_docs": largest, "from_workers": run["workers"], "cpu_s_per_document": round(cpu_per_doc, 6),
           "parallel_efficiency": efficiency, "mean_text_chars": text_chars, "pmc_mean_text_chars": pmc_chars,
           "assumptions": ["CPU per document stays what it was at the largest run",
                           "a full text costs what its length in corpus documents costs",
                           "N cores are used with the parallel efficiency of 2 workers on this machine "
                           "(1-worker wall over twice the 2-worker wall)" if efficiency is not None else
                           "N cores are used fully (no 1- and 2-worker runs of the same code measure the "
                           "parallel efficiency)",
                           "peak memory per worker stays what it was at the largest run (the table's bounds)"]}
    for name, docs in PROJECTED.items():
        factor = (pmc_chars / text_chars) if name == "pmc_full_texts" and pmc_chars and text_chars else 1.0
        core_hours = docs * cpu_per_doc * factor / 3600
        out[name] = {"documents": docs, "core_hours": round(core_hours, 1),
                     "wall_hours": {str(c): round(core_hours / c / (efficiency or 1.0), 2) for c in CORES}}
    out["peak_rss_mb_per_worker"] = max((st["peak_rss_mb"]["worker"] or 0) for st in run["stages"].values())
    out["peak_rss_mb_driver"] = max((st["peak_rss_mb"]["driver"] or 0) for st in run["stages"].values())
    return out


def _mean_text_chars() -> int | None:
    cached = WORK / "corpus-sample-chars.json"
    if cached.exists():
        return json.loads(cached.read_text())["mean"]
    corpora = sorted(WORK.glob("corpus-*/00000.parquet"))
    if not corpora:
        return None
    texts = pq.read_table(corpora[0], columns=["text"])["text"].to_pylist()[:20000]
    mean = round(sum(len(t) for t in texts) / len(texts))
    cached.write_text(json.dumps({"mean": mean}))
    return mean


def _mean_pmc_chars() -> int | None:
    from pipeline.config import InputConfig
    from pipeline.readers import read_documents
    folder = ROOT / "data/raw/pmc"
    if not folder.is_dir():
        return None
    texts = [t for b in read_documents(InputConfig(paths=[str(folder)]), 100) for t in b.table["text"].to_pylist()]
    return round(sum(len(t) for t in texts) / len(texts)) if texts else None


if __name__ == "__main__":
    sys.exit(main())
