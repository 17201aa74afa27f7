"""decontaminate's speed and memory, written to bench/decontaminate.json.

Corpus: every abstract of the default corpus (data/raw/pubmed21n1298.xml.gz), normalized as
the chain does. Benchmarks:
- `pubmedqa`: the shipped 1,000 PubMedQA items (data/pubmedqa), fields QUESTION, CONTEXTS,
  LONG_ANSWER;
- `synthetic_100k`: PubMedQA plus 100,000 synthetic items (the issue's speed target);
- `synthetic_1m`: 1,000,000 synthetic items, for the build's time and memory only.
A synthetic item is a question of 12 words and one context of `--context-words` words (default
60) drawn at random, by frequency, from the words of the other MEDLINE file
(pubmed20n0014): text that reads nothing like the corpus, so the corpus side finds nothing and
its time is the lookups'. (A PubMedQA item holds ~200 n-grams, a synthetic one ~48: memory is
quoted per million n-grams.)

Measured, each in a child process of its own (one core: the figures are per CPU-second):
- the set's build: wall and CPU seconds, n-grams, the bytes each worker holds (12 per n-gram)
  and the child's peak RSS;
- the corpus side: the stage's batch function over the corpus in batches of 500, after the
  set is loaded: docs and MB per CPU-second, the child's peak RSS;
- what is found: each of the 1,000 PubMedQA abstracts copied into a document verbatim, edited
  (lowercase, no punctuation, doubled spaces), with a word changed every k words, cut in half,
  one context, the question or the conclusion alone, 12 words of a context: the share found;
- the whole stage as a run runs it (`python -m pipeline run` of a one-stage chain on the
  normalized corpus, num_proc 1: reading and writing shards included), against pubmedqa.

    python scripts/benchmarks/bench_decontaminate.py [--context-words 60] [--skip-1m]
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
WORK = ROOT / "bench/work/decontaminate"
OUT = ROOT / "bench/decontaminate.json"
CORPUS = ROOT / "data/raw/pubmed21n1298.xml.gz"
OTHER = ROOT / "data/raw/pubmed20n0014.xml.gz"
PUBMEDQA = {"name": "pubmedqa", "path": str(ROOT / "data/pubmedqa/ori_pqal.json"),
            "fields": ["QUESTION", "CONTEXTS", "LONG_ANSWER"]}
BATCH = 500


def _peak_rss_mb() -> float:
    """This process's peak RSS since it started its program: VmHWM, which exec resets (a child's
    ru_maxrss starts from its parent's at the fork)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return round(int(line.split()[1]) / 1024, 1)
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


def normalized_corpus(path: Path) -> dict:
    """The default corpus normalized, as Parquet (id, text)."""
    from pipeline.config import InputConfig
    from pipeline.engines.text_normalize import NormalizeOptions as NormalizeConfig
    from pipeline.engines.text_normalize import normalize_text
    from pipeline.readers import read_documents
    tables = []
    for batch in read_documents(InputConfig(paths=[str(CORPUS)]), 5000):
        t = batch.table.select(["id", "text"])
        tables.append(t.set_column(1, "text", normalize_text(t["text"], NormalizeConfig())))
    table = pa.concat_tables(tables)
    pq.write_table(table, path)
    return {"documents": table.num_rows, "text_mb": round(pc.sum(pc.binary_length(table["text"])).as_py() / 1e6, 2)}


def synthetic_items(n: int, context_words: int, path: Path, seed: int = 0) -> None:
    """n items of random words (by their frequency in pubmed20n0014), written as Parquet."""
    from pipeline.config import InputConfig
    from pipeline.readers import read_documents
    counts = {}
    for batch in read_documents(InputConfig(paths=[str(OTHER)], limit=20000), 5000):
        words = pc.list_flatten(pc.utf8_split_whitespace(batch.table["text"]))
        for v in pc.value_counts(words).to_pylist():
            counts[v["values"]] = counts.get(v["values"], 0) + v["counts"]
    vocab = pa.array(sorted(counts), pa.string())
    p = np.asarray([counts[w] for w in vocab.to_pylist()], float)
    p /= p.sum()
    rng = np.random.default_rng(seed)
    writer = None
    for lo in range(0, n, 100_000):
        m = min(100_000, n - lo)
        cols = {"id": pa.array([f"syn{i}" for i in range(lo, lo + m)], pa.string())}
        for field, k in (("question", 12), ("context", context_words)):
            picks = vocab.take(pa.array(rng.choice(len(vocab), size=m * k, p=p)))
            lists = pa.ListArray.from_arrays(pa.array(np.arange(0, m * k + 1, k, dtype=np.int32)), picks)
            cols[field] = pc.binary_join(lists, " ")
        table = pa.table(cols)
        writer = writer or pq.ParquetWriter(path, table.schema)
        writer.write_table(table)
    writer.close()


def _specs(names: list[str], synthetic: dict) -> list[dict]:
    out = []
    for name in names:
        out.append(PUBMEDQA if name == "pubmedqa" else
                   {"name": name, "path": str(synthetic[name]), "fields": ["question", "context"], "id_field": "id"})
    return out


def child_build(specs: list[dict]) -> dict:
    from pipeline.stages.decontaminate import BYTES_PER_NGRAM, BenchmarkConfig, BenchmarkSet
    from pipeline.stages.normalize import NormalizeConfig
    out = {}
    base = _peak_rss_mb()
    for spec in specs:
        t0, c0 = time.perf_counter(), time.process_time()
        bench = BenchmarkSet.build(BenchmarkConfig(**spec), 13, NormalizeConfig())
        out[spec["name"]] = {"items": bench.stats["items"], "ngrams": bench.stats["ngrams"],
                             "build_wall_s": round(time.perf_counter() - t0, 2),
                             "build_cpu_s": round(time.process_time() - c0, 2),
                             "worker_mb": round(bench.stats["ngrams"] * BYTES_PER_NGRAM / 1e6, 1)}
    return {"sets": out, "peak_rss_mb": _peak_rss_mb(), "rss_before_mb": base}


def child_corpus(specs: list[dict], corpus: Path) -> dict:
    """The stage's batch function over the corpus, on sets built and saved as a run does."""
    from collections import Counter, defaultdict

    from pipeline.runpath import RunPath
    from pipeline.stages.decontaminate import BenchmarkSet, Decontaminate, DecontaminateConfig
    from pipeline.stages.normalize import NormalizeConfig
    config = DecontaminateConfig(benchmarks=specs)
    stage = Decontaminate(config, None)
    work = RunPath.of(WORK / "sets")
    work.mkdir(exist_ok=True)
    t0 = time.perf_counter()
    for spec in config.benchmarks:
        BenchmarkSet.build(spec, config.ngram, NormalizeConfig()).save(work)
    build_s = time.perf_counter() - t0
    stage.use_sets([BenchmarkSet.load(work, b.name) for b in config.benchmarks])
    table = pq.read_table(corpus)
    mb = pc.sum(pc.binary_length(table["text"])).as_py() / 1e6
    batches = [table.slice(i, BATCH) for i in range(0, table.num_rows, BATCH)]
    tally, found = Counter(), defaultdict(lambda: defaultdict(list))
    c0, t0 = time.process_time(), time.perf_counter()
    removed = 0
    for b in batches:
        out = stage.decontaminate_batch(b, tally, found)
        if "_reason" in out.column_names:
            removed += int(out["_reason"].is_valid().to_numpy(zero_copy_only=False).sum())
    cpu, wall = time.process_time() - c0, time.perf_counter() - t0
    return {"documents": table.num_rows, "text_mb": round(mb, 2), "cpu_s": round(cpu, 2), "wall_s": round(wall, 2),
            "docs_per_cpu_s": round(table.num_rows / cpu), "mb_per_cpu_s": round(mb / cpu, 2),
            "removed": removed, "set_build_wall_s": round(build_s, 2), "peak_rss_mb": _peak_rss_mb()}


def _variants(items: list[dict]) -> dict[str, list[str]]:
    """Each PubMedQA item's abstract, rewritten in the ways a copy in a corpus differs."""
    import re

    def abstract(v):
        parts = [f"{label}: {text}" for label, text in zip(v["LABELS"], v["CONTEXTS"])]
        return "\n\n".join(parts + [f"CONCLUSIONS: {v['LONG_ANSWER']}"])

    def every(text, k):
        words = text.split(" ")
        return " ".join(f"zq{i}" if i % k == k - 1 else w for i, w in enumerate(words))
    out = {"verbatim": [abstract(v) for v in items],
           "lowercase_no_punctuation_spaces": [re.sub(r"[^\w\s]", "", abstract(v).lower()).replace(" ", "  ")
                                               for v in items],
           "first_half": [" ".join(abstract(v).split(" ")[:len(abstract(v).split(" ")) // 2]) for v in items],
           "second_context_only": [v["CONTEXTS"][min(1, len(v["CONTEXTS"]) - 1)] for v in items],
           "question_only": [v["QUESTION"] for v in items],
           "long_answer_only": [v["LONG_ANSWER"] for v in items],
           "twelve_words_of_a_context": [" ".join(re.findall(r"[A-Za-z0-9]+", v["CONTEXTS"][0])[:12]) for v in items]}
    for k in (6, 8, 10, 12, 13, 14, 16, 20, 30):
        out[f"word_changed_every_{k}"] = [every(abstract(v), k) for v in items]
    return out


def child_detection() -> dict:
    """What share of the 1,000 PubMedQA items a 13-gram rule finds, per way of copying them."""
    from collections import Counter, defaultdict

    from pipeline.engines.text_normalize import NormalizeOptions as NormalizeConfig
    from pipeline.engines.text_normalize import normalize_text
    from pipeline.stages.decontaminate import BenchmarkSet, Decontaminate, DecontaminateConfig
    config = DecontaminateConfig(benchmarks=[PUBMEDQA])
    stage = Decontaminate(config, None)
    stage.use_sets([BenchmarkSet.build(config.benchmarks[0], config.ngram, NormalizeConfig())])
    items = list(json.loads(Path(PUBMEDQA["path"]).read_text()).values())
    out = {}
    for name, texts in _variants(items).items():
        table = pa.table({"id": [str(i) for i in range(len(texts))],
                          "text": normalize_text(pa.array(texts, pa.string()), NormalizeConfig())})
        marked = stage.decontaminate_batch(table, Counter(), defaultdict(lambda: defaultdict(list)))
        found = int(marked["_reason"].is_valid().to_numpy(zero_copy_only=False).sum()) \
            if "_reason" in marked.column_names else 0
        out[name] = {"items": len(texts), "found": found, "share": round(found / len(texts), 3)}
    return out


def whole_stage(corpus: Path) -> dict:
    """`python -m pipeline run` of [decontaminate] on the normalized corpus, one worker."""
    out = WORK / "run"
    shutil.rmtree(out, ignore_errors=True)
    cfg = WORK / "run.yaml"
    cfg.write_text(json.dumps({"input": {"paths": [str(corpus)]}, "output_dir": str(out), "num_proc": 1,
                               "batch_size": BATCH, "shard_size": 5000, "report": False,
                               "stages": [{"decontaminate": {"benchmarks": [PUBMEDQA]}}]}))
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "pipeline", "run", "--config", str(cfg)], cwd=ROOT,
                          capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode:
        raise SystemExit(proc.stderr[-2000:])
    stats = json.loads(next((out / "stages").glob("*decontaminate/stats.json")).read_text())
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"documents": stats["docs_in"], "removed": stats["removed"], "stage_seconds": stats["seconds"],
            "process_wall_s": round(wall, 2), "process_cpu_s": round(cpu, 2),
            "docs_per_cpu_s": round(stats["docs_in"] / cpu), "peak_rss_mb": round(after.ru_maxrss / 1024, 1),
            "items_found": stats["benchmarks"]["pubmedqa"]["items_found"]}


def _child(*args) -> dict:
    proc = subprocess.run([sys.executable, __file__, *args], cwd=ROOT, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    if proc.returncode:
        raise SystemExit(proc.stderr[-3000:])
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--context-words", type=int, default=60)
    ap.add_argument("--skip-1m", action="store_true", help="leave out the 1,000,000-item build")
    ap.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    args = ap.parse_args()
    WORK.mkdir(parents=True, exist_ok=True)
    synthetic = {"synthetic_100k": WORK / "synthetic_100k.parquet", "synthetic_1m": WORK / "synthetic_1m.parquet"}
    corpus = WORK / "corpus.parquet"
    if args.child:
        kind, *names = args.child
        specs = _specs(names, synthetic)
        result = child_build(specs) if kind == "build" else child_detection() if kind == "detection" \
            else child_corpus(specs, corpus)
        print(json.dumps(result))
        return 0
    t0 = time.perf_counter()
    corpus_info = normalized_corpus(corpus)
    synthetic_items(100_000, args.context_words, synthetic["synthetic_100k"])
    if not args.skip_1m:
        synthetic_items(1_000_000, args.context_words, synthetic["synthetic_1m"])
    result = {
        "command": "python scripts/benchmarks/bench_decontaminate.py" + (" --skip-1m" if args.skip_1m else ""),
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                    "load_avg_1m_at_start": round(os.getloadavg()[0], 2)},
        "ngram": 13, "synthetic_context_words": args.context_words, "corpus": corpus_info,
        "build": {"pubmedqa": _child("--child", "build", "pubmedqa"),
                  "synthetic_100k": _child("--child", "build", "synthetic_100k")},
        "corpus_side": {"pubmedqa": _child("--child", "corpus", "pubmedqa"),
                        "pubmedqa_and_synthetic_100k": _child("--child", "corpus", "pubmedqa", "synthetic_100k")},
        "whole_stage_pubmedqa": whole_stage(corpus),
        "detection_pubmedqa": _child("--child", "detection"),
    }
    if not args.skip_1m:
        result["build"]["synthetic_1m"] = _child("--child", "build", "synthetic_1m")
    built = result["build"].get("synthetic_1m") or result["build"]["synthetic_100k"]
    ngrams = next(iter(built["sets"].values()))["ngrams"]
    result["worker_mb_per_million_ngrams"] = 12.0
    grown = built["peak_rss_mb"] - built["rss_before_mb"]
    result["build_peak_rss_mb_per_million_ngrams"] = round(grown / (ngrams / 1e6), 1)
    result["machine"]["load_avg_1m_at_end"] = round(os.getloadavg()[0], 2)
    result["seconds"] = round(time.perf_counter() - t0, 1)
    OUT.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
