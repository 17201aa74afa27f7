"""Benchmarks: each stage beside its raw engine, the whole chain, and datatrove's comparable
chain, on a corpus built from the real MEDLINE abstracts (replicated with planted edits).

    python scripts/bench.py [--docs 20000] [--stages langid,phi,...] [--skip-chain] [--skip-datatrove]

Each measurement runs in its own process (wall time, CPU time and peak RSS are process-level);
per-stage numbers are single-core (one process, batches in order). Prints a markdown table and
writes bench/results.json (also the last line of output). No test asserts on these numbers."""
from __future__ import annotations

import argparse
import json
import os
import platform
import random
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
WORK = ROOT / "bench/work"
STAGES = ["normalize", "langid", "perplexity", "heuristics", "toxicity", "phi", "dedup_exact", "minhash_signatures",
          "dedup_minhash", "split", "tokenizer", "pack"]
# PHI runs ~40 docs/s per core: it is timed on a slice, like any stage can be with --phi-docs.
PHI_DOCS = 1000


def build_corpus(n: int, path: Path) -> None:
    """Real abstracts first, then copies with planted edits until n documents."""
    from pipeline.config import InputConfig
    from pipeline.readers import read_documents

    docs = []
    for batch in read_documents(InputConfig(paths=[str(ROOT / "data/raw/pubmed21n1298.xml.gz")]), 1000):
        docs.extend({"id": r["id"], "text": r["text"]} for r in batch.table.select(["id", "text"]).to_pylist())
    rng = random.Random(0)
    out = list(docs[:n])
    k = 0
    while len(out) < n:
        src = docs[rng.randrange(len(docs))]
        words = src["text"].split(" ")
        for _ in range(max(1, len(words) // 40)):
            words[rng.randrange(len(words))] = rng.choice(["novel", "revised", "additional", "modified"])
        out.append({"id": f"{src['id']}:copy{k}", "text": " ".join(words)})
        k += 1
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as fh:
        for d in out:
            fh.write(json.dumps(d, ensure_ascii=False) + "\n")


def _peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _load_normalized(path: Path, batch_size: int):
    import pyarrow as pa
    from pipeline.config import InputConfig
    from pipeline.readers import read_documents
    from pipeline.stages.normalize import Normalize, NormalizeConfig

    norm = Normalize(NormalizeConfig(), None)
    tables = [norm.process(b.table).drop_columns(["_reason"]) for b in read_documents(InputConfig(paths=[str(path)]), batch_size)]
    return pa.concat_tables(tables)


def _raw_engine(stage: str, texts: list[str]):
    """The engine alone on the same documents: (name, callable)."""
    if stage == "langid":
        import fasttext
        from pipeline.stages.langid import bundled_lid_model
        predict = fasttext.load_model(bundled_lid_model()).f.predict
        lines = [t.replace("\n", " ") + "\n" for t in texts]
        return "fastText predict", lambda: [predict(t, 1, 0.0, "replace") for t in lines]
    if stage == "perplexity":
        import kenlm
        model = kenlm.Model(str(ROOT / "data/models/pubmed_lm.binary"))
        lines = [t.replace("\n", " ") for t in texts]
        return "kenlm score", lambda: [model.score(t, bos=True, eos=True) for t in lines]
    if stage == "toxicity":
        from profanity_check import predict_prob
        return "predict_prob", lambda: predict_prob(texts)
    if stage == "phi":
        from pipeline.phi.engine import NOT_NEEDED, SPACY_MODEL
        import spacy
        nlp = spacy.load(SPACY_MODEL, exclude=NOT_NEEDED)
        return "spaCy NER-only nlp.pipe", lambda: list(nlp.pipe(texts, batch_size=32))
    if stage in ("dedup_minhash", "minhash_signatures"):
        from datasketch import MinHash
        from pipeline.minhash import shingles
        return "datasketch MinHash.bulk", lambda: MinHash.bulk([[s.encode() for s in shingles(t, 5)] for t in texts], num_perm=128)
    if stage == "dedup_exact":
        import xxhash
        return "xxh3_128", lambda: [xxhash.xxh3_128_digest(t.encode()) for t in texts]
    if stage == "pack":
        from tokenizers import Tokenizer
        tok = Tokenizer.from_file(str(WORK / "tokenizer.json"))
        return "tokenizers encode_batch", lambda: tok.encode_batch(texts, add_special_tokens=False)
    if stage == "tokenizer":
        from pipeline.stages.tokenizer import TokenizerConfig, build_trainer
        def train():
            tok, trainer = build_trainer(TokenizerConfig())
            tok.train_from_iterator([texts[i:i + 1000] for i in range(0, len(texts), 1000)], trainer=trainer)
        return "tokenizers BPE train", train
    return None, None


def bench_stage(stage: str, corpus: Path, batch_size: int, phi_docs: int) -> dict:
    """One stage, single core: setup excluded, processing timed; then its raw engine."""
    from pipeline.config import load_config
    from pipeline.stages import REGISTRY
    from pipeline.stages.base import RunContext, StageInputs
    from pipeline.readers import ReaderBatch
    from pipeline.store import StageOutput
    import pyarrow as pa

    table = _load_normalized(corpus, 10**9)
    if stage == "phi":
        table = table.slice(0, phi_docs)
    if stage in ("tokenizer", "pack"):
        table = table.append_column("split", pa.array(["train"] * table.num_rows))
    texts = table["text"].to_pylist()
    mb = sum(len(t.encode()) for t in texts) / 1e6
    if stage == "minhash_signatures":
        return _bench_signatures(texts, mb, batch_size)
    cfg = load_config(ROOT / "configs/pubmed.yaml", check_inputs=False)
    spec = cfg.stage(stage)
    out_dir = WORK / "stage_out" / stage
    ctx = RunContext(run_dir=WORK, stage_dir=out_dir, seed=1, batch_size=batch_size, shard_size=50_000, num_proc=1,
                     progress=False, config=cfg)
    obj = REGISTRY[stage](spec.config, ctx)
    if stage == "pack":
        (WORK / "tokenizer").mkdir(exist_ok=True)
        (WORK / "tokenizer/tokenizer.json").write_bytes((WORK / "tokenizer.json").read_bytes())
    batches = [table.slice(i, batch_size) for i in range(0, table.num_rows, batch_size)]
    t_setup = time.perf_counter()
    if obj.kind == "document":
        obj.setup()
    setup_s = time.perf_counter() - t_setup
    output = StageOutput(out_dir, shard_size=50_000, keep_removed_text=False)
    w0, c0 = time.perf_counter(), time.process_time()
    if obj.kind == "document":
        for b in batches:
            output.write(obj.process(b))
    else:
        obj.run(StageInputs(lambda: (ReaderBatch(b) for b in batches), len(texts)), output)
    wall, cpu = time.perf_counter() - w0, time.process_time() - c0
    if stage == "tokenizer":
        (WORK / "tokenizer.json").write_bytes((output.folder / "tokenizer.json").read_bytes())
    output.abort()
    result = {"stage": stage, "docs": len(texts), "MB": round(mb, 2), "setup_s": round(setup_s, 2),
              "wall_s": round(wall, 3), "cpu_s": round(cpu, 3), "docs_per_s": round(len(texts) / wall, 1),
              "MB_per_s": round(mb / wall, 2)}
    name, raw = _raw_engine(stage, texts)
    if raw is not None:
        r0 = time.perf_counter()
        raw()
        raw_wall = time.perf_counter() - r0
        result.update({"engine": name, "engine_docs_per_s": round(len(texts) / raw_wall, 1),
                       "stage_vs_engine": round(raw_wall / wall, 3)})
    result["peak_rss_mb"] = round(_peak_rss_mb(), 1)
    return result


def _bench_signatures(texts: list[str], mb: float, batch_size: int) -> dict:
    """The signature path of dedup_minhash alone (shingle, hash, permute, min), batch by batch."""
    from pipeline.minhash import MinHasher
    hasher = MinHasher(128, 1, 5, True, "xxh32")
    w0, c0 = time.perf_counter(), time.process_time()
    for i in range(0, len(texts), batch_size):
        hasher.signatures(texts[i:i + batch_size])
    wall, cpu = time.perf_counter() - w0, time.process_time() - c0
    name, raw = _raw_engine("minhash_signatures", texts)
    r0 = time.perf_counter()
    raw()
    raw_wall = time.perf_counter() - r0
    return {"stage": "minhash_signatures", "docs": len(texts), "MB": round(mb, 2), "setup_s": 0.0,
            "wall_s": round(wall, 3), "cpu_s": round(cpu, 3), "docs_per_s": round(len(texts) / wall, 1),
            "MB_per_s": round(mb / wall, 2), "engine": name, "engine_docs_per_s": round(len(texts) / raw_wall, 1),
            "stage_vs_engine": round(raw_wall / wall, 3), "peak_rss_mb": round(_peak_rss_mb(), 1)}


def _child(args: list[str], timeout: int = 7200, python: str = sys.executable) -> tuple[dict | None, float, float, float]:
    """Run a child process; (its last-line JSON or None, wall s, CPU s of children, peak RSS MB)."""
    t0 = time.perf_counter()
    with open(WORK / "child.out", "w+") as out, open(WORK / "child.err", "w+") as err:
        proc = subprocess.Popen([python, *args], cwd=ROOT, stdout=out, stderr=err,
                                env={**os.environ, "PYTHONPATH": str(ROOT)})
        # wait4: this child's own CPU time and peak RSS (RUSAGE_CHILDREN would mix all children).
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t0
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(), err.read()
    if proc.returncode != 0:
        raise RuntimeError(f"{args[:3]} failed:\n{stderr[-2000:]}")
    # The child's descendants (pool workers) are included: it waits for them.
    cpu = usage.ru_utime + usage.ru_stime
    last = stdout.strip().splitlines()[-1] if stdout.strip() else ""
    try:
        data = json.loads(last)
    except json.JSONDecodeError:
        data = None
    return data, wall, cpu, usage.ru_maxrss / 1024


def bench_chain(corpus: Path, docs: int, stages: list[str], name: str, num_proc: int = 1,
                overrides: dict | None = None, tokenizer: Path | None = None) -> dict:
    cfg_text = (ROOT / "configs/pubmed.yaml").read_text()
    cfg_text = cfg_text.replace("paths: [data/raw/pubmed21n1298.xml.gz]", f"paths: [{corpus}]")
    cfg_text = cfg_text.replace("output_dir: runs/pubmed", f"output_dir: {WORK / name}").replace("num_proc: 2", f"num_proc: {num_proc}")
    import yaml
    raw = yaml.safe_load(cfg_text)
    raw["stages"] = [s for s in raw["stages"] if next(iter(s)) in stages]
    for entry in raw["stages"]:
        name_ = next(iter(entry))
        if overrides and name_ in overrides:
            entry[name_] = overrides[name_]
    raw["progress"] = False
    raw["report"] = False           # datatrove's chain writes no report: compare the same work
    path = WORK / f"{name}.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    import shutil
    shutil.rmtree(WORK / name, ignore_errors=True)
    if tokenizer is not None:           # pack without a tokenizer stage reads the run's tokenizer.json
        (WORK / name / "tokenizer").mkdir(parents=True)
        shutil.copy(tokenizer, WORK / name / "tokenizer/tokenizer.json")
    _, wall, cpu, rss = _child(["-m", "pipeline", "run", "--config", str(path)])
    return {"chain": name, "stages": stages, "docs": docs, "num_proc": num_proc, "wall_s": round(wall, 2),
            "cpu_s": round(cpu, 2), "docs_per_s": round(docs / wall, 1), "docs_per_cpu_s": round(docs / cpu, 1),
            "peak_rss_mb": round(rss, 1)}


def versions() -> dict:
    from pipeline.runner import _versions
    v = _versions()
    try:
        from importlib.metadata import version
        v["datatrove"] = version("datatrove")
    except Exception:
        pass
    return v


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--docs", type=int, default=20000)
    ap.add_argument("--stages", default=",".join(STAGES))
    ap.add_argument("--phi-docs", type=int, default=PHI_DOCS)
    ap.add_argument("--batch-size", type=int, default=1000)
    ap.add_argument("--skip-chain", action="store_true")
    ap.add_argument("--skip-datatrove", action="store_true")
    ap.add_argument("--phi-scaling", action="store_true", help="also time the phi stage alone at num_proc 1 and 2")
    ap.add_argument("--one", help=argparse.SUPPRESS)
    args = ap.parse_args()
    corpus = WORK / f"corpus-{args.docs}.jsonl"
    if args.one:
        print(json.dumps(bench_stage(args.one, corpus, args.batch_size, args.phi_docs)))
        return 0
    if not corpus.exists():
        build_corpus(args.docs, corpus)
    results = {"machine": {"cores": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform()},
               "versions": versions(), "docs": args.docs, "stages": [], "chains": []}
    wanted = [s for s in STAGES if s in args.stages.split(",")]
    if "pack" in wanted and "tokenizer" not in wanted and not (WORK / "tokenizer.json").exists():
        wanted.insert(wanted.index("pack"), "tokenizer")
    for stage in wanted:
        data, *_ = _child([__file__, "--docs", str(args.docs), "--one", stage, "--phi-docs", str(args.phi_docs),
                           "--batch-size", str(args.batch_size)])
        results["stages"].append(data)
        print(f"  {stage}: {data['docs_per_s']:,} docs/s", file=sys.stderr)
    if not args.skip_chain:
        chain = ["normalize", "langid", "perplexity", "heuristics", "toxicity", "dedup_exact", "dedup_minhash", "split",
                 "tokenizer", "pack"]
        results["chains"].append(bench_chain(corpus, args.docs, chain, "chain_without_phi"))
        # The matching sub-chain: heuristics with datatrove's own thresholds (Gopher's
        # 50-word minimum), exact and MinHash dedup, and packing with the given tokenizer.
        sub = ["heuristics", "dedup_exact", "dedup_minhash", "pack"]
        results["chains"].append(bench_chain(corpus, args.docs, sub, "subchain", overrides={"heuristics": {"min_words": 50}},
                                             tokenizer=WORK / "tokenizer.json"))
    if args.phi_scaling:
        subset = WORK / f"corpus-phi-{args.phi_docs}.jsonl"
        with open(corpus, encoding="utf-8") as src, open(subset, "w", encoding="utf-8") as dst:
            for _, line in zip(range(args.phi_docs), src):
                dst.write(line)
        for n in (1, 2):
            results["chains"].append(bench_chain(subset, args.phi_docs, ["phi"], f"phi_num_proc_{n}", num_proc=n))
    if not args.skip_datatrove:
        try:
            data, wall, cpu, rss = _child(["scripts/bench_datatrove.py", "--corpus", str(corpus),
                                           "--tokenizer", str(WORK / "tokenizer.json"),
                                           "--work", str(WORK / "datatrove")],
                                          python=str(ROOT / ".venv-bench/bin/python"))
            results["datatrove"] = {**(data or {}), "wall_s": round(wall, 2), "cpu_s": round(cpu, 2),
                                    "docs_per_s": round(args.docs / wall, 1), "docs_per_cpu_s": round(args.docs / cpu, 1),
                                    "peak_rss_mb": round(rss, 1)}
            ours = next(c for c in results["chains"] if c["chain"] == "subchain")
            results["ours_vs_datatrove_docs_per_cpu_s"] = round(ours["docs_per_cpu_s"] / results["datatrove"]["docs_per_cpu_s"], 2)
        except (RuntimeError, StopIteration, FileNotFoundError) as exc:
            results["datatrove"] = {"error": str(exc)[-500:]}
    print_table(results)
    (ROOT / "bench").mkdir(exist_ok=True)
    (ROOT / "bench/results.json").write_text(json.dumps(results, indent=2) + "\n")
    print(json.dumps(results))
    return 0


def print_table(r: dict) -> None:
    print(f"\n{r['docs']:,} documents, {r['machine']['cores']} cores; per-stage figures are one process, one core.\n")
    print("| stage | docs | docs/s | MB/s | peak RSS MB | engine | engine docs/s | stage/engine |")
    print("|---|---:|---:|---:|---:|---|---:|---:|")
    for s in r["stages"]:
        eng = s.get("engine", "-")
        print(f"| {s['stage']} | {s['docs']:,} | {s['docs_per_s']:,} | {s['MB_per_s']} | {s['peak_rss_mb']:,} | {eng} | "
              f"{s.get('engine_docs_per_s', '-'):,} | {s.get('stage_vs_engine', '-')} |" if "engine" in s else
              f"| {s['stage']} | {s['docs']:,} | {s['docs_per_s']:,} | {s['MB_per_s']} | {s['peak_rss_mb']:,} | - | - | - |")
    for c in r["chains"]:
        print(f"\nchain {c['chain']} ({' -> '.join(c['stages'])}), num_proc {c['num_proc']}: {c['wall_s']} s wall, "
              f"{c['docs_per_s']:,} docs/s, {c['docs_per_cpu_s']:,} docs per CPU-second, peak RSS {c['peak_rss_mb']} MB")
    if "datatrove" in r:
        d = r["datatrove"]
        if "error" in d:
            print(f"\ndatatrove: not measured ({d['error'][:200]})")
        else:
            print(f"\ndatatrove 0.10 comparable chain: {d['wall_s']} s wall, {d['docs_per_cpu_s']:,} docs per CPU-second, "
                  f"peak RSS {d['peak_rss_mb']} MB; ours/datatrove (docs per CPU-second): {r.get('ours_vs_datatrove_docs_per_cpu_s')}")


if __name__ == "__main__":
    sys.exit(main())
