"""Benchmarks: each stage beside its raw engine, the whole chain, and datatrove's comparable
chain, on a corpus built from the real MEDLINE abstracts (replicated with planted edits).

    python scripts/benchmarks/bench.py --docs 20000 --phi-scaling     # what `make bench` runs
    python scripts/benchmarks/bench.py --only phi                     # refresh only the phi rows in bench/results.json
    python scripts/benchmarks/bench.py --only stages --stages perplexity,minhash_signatures_xxh32   # only these rows
    python scripts/benchmarks/bench.py [--stages langid,phi,...] [--skip-chain] [--skip-datatrove]

Each measurement runs in its own process (wall time, CPU time and peak RSS are process-level);
per-stage numbers are single-core (one process, batches in order) and given per CPU-second,
which other processes on the machine do not inflate. Prints a markdown table and writes
bench/results.json (also the last line of output); `minhash_scale` in that file belongs to
scripts/benchmarks/bench_minhash_scale.py and is carried over. No test asserts on these numbers."""
from __future__ import annotations

import argparse
import json
import os
import platform
import random
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
WORK = ROOT / "bench/work"
STAGES = ["normalize", "langid", "perplexity", "heuristics", "toxicity", "phi", "phi_notes", "dedup_exact",
          "minhash_signatures_xxh32", "minhash_signatures_sha1", "dedup_minhash", "split", "tokenizer", "pack"]
# PHI runs ~40 docs/s per core: it is timed on a slice, like any stage can be with --phi-docs.
PHI_DOCS = 1000
# Real clinical notes (MIMIC-II nursing notes with surrogate PHI, data/deid-dev/README.md): the
# abstracts' PHI speed is flattered by keyword gates that skip nearly every rule; notes trip them.
NOTES = ROOT / "data/deid-dev/notes.jsonl"
# The sub-chain compared with datatrove: heuristics set to datatrove's filters (Gopher quality
# and repetition defaults with its 50-word minimum, C4QualityFilter's line and sentence rules;
# the seeds' punctuation rule and our document-level boilerplate rules off).
# compat: datatrove measures as datatrove does (scripts/benchmarks/bench_heuristics_compat.py: the same
# decisions on real text), so both chains keep the same documents.
DATATROVE_HEURISTICS = {"compat": "datatrove", "min_words": 50, "max_punctuation_fraction": 1.0,
                        "c4_boilerplate_lines": False, "c4_lines": True, "c4_min_sentences": 5}
# Stages timed in alternating rounds against their engines (first: the row's engine; others
# are reported beside it): the ratio to the engine is a bar for these.
ALTERNATING = {"perplexity": ["perplexity", "perplexity_raw_text"]}
# Keys of bench/results.json written by other scripts of `make bench`, kept when this one rewrites it.
OTHER_SCRIPTS_KEYS = ["minhash_scale"]


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
    tables = [
        norm.process(b.table).drop_columns(["_reason"])
        for b in read_documents(InputConfig(paths=[str(path)]), batch_size)
    ]
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
        # KenLM scoring the lines the stage scores (its normalized lines, made beforehand).
        import kenlm
        import pyarrow as pa

        from pipeline.engines.ccnet_norm import scored_lines

        model = kenlm.Model(str(ROOT / "data/models/pubmed_lm.binary"))
        lines = [line for i in range(0, len(texts), 1000) for line in scored_lines(pa.array(texts[i : i + 1000]))[0]]
        return "kenlm score (normalized lines)", lambda: [model.score(t, bos=True, eos=True) for t in lines]
    if stage == "perplexity_raw_text":
        # KenLM scoring the raw text, one line per document: fewer tokens than the normalized
        # lines (punctuation stays on the words), so less work than the stage gives it.
        import kenlm

        model = kenlm.Model(str(ROOT / "data/models/pubmed_lm.binary"))
        lines = [t.replace("\n", " ") for t in texts]
        return "kenlm score (raw text)", lambda: [model.score(t, bos=True, eos=True) for t in lines]
    if stage == "toxicity":
        from profanity_check import predict_prob

        return "predict_prob", lambda: predict_prob(texts)
    if stage == "phi":
        import spacy

        from pipeline.phi.engine import NOT_NEEDED, SPACY_MODEL

        nlp = spacy.load(SPACY_MODEL, exclude=NOT_NEEDED)
        return "spaCy NER-only nlp.pipe", lambda: list(nlp.pipe(texts, batch_size=32))
    if stage == "phi_notes":
        # The clinical profile's spaCy NER is off: its heaviest engine is the learned detector
        # (python-crfsuite), which reads every token of every note.
        from pipeline.phi.detector import DEFAULT_THRESHOLD, PhiDetector

        detector = PhiDetector(threshold=DEFAULT_THRESHOLD)
        return "python-crfsuite detector (PhiDetector.spans)", lambda: [detector.spans(t) for t in texts]
    if stage in ("dedup_minhash", "minhash_signatures_xxh32", "minhash_signatures_sha1"):
        # The same shingles, the same 32-bit hash function (xxh32, the stage's default, or
        # sha1, datasketch's default) and the same permutations on both sides, from text to
        # signatures: datasketch is fed each document's shingles made the cheapest way Python
        # makes them (bytes.split and join, no decode), then MinHash.bulk.
        from datasketch import MinHash

        from pipeline.engines.minhash import HASHFUNCS, shingle_bytes

        hashfunc = "sha1" if stage.endswith("sha1") else "xxh32"
        return (
            f"datasketch MinHash.bulk, {hashfunc}",
            lambda: MinHash.bulk(
                [shingle_bytes(t, 5) for t in texts], num_perm=128, seed=1, hashfunc=HASHFUNCS[hashfunc]
            ),
        )
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
            tok.train_from_iterator([texts[i : i + 1000] for i in range(0, len(texts), 1000)], trainer=trainer)

        return "tokenizers BPE train", train
    return None, None


def bench_stage(stage: str, corpus: Path, batch_size: int, phi_docs: int) -> dict:
    """One stage, single core: setup excluded, processing timed; then its raw engine."""
    import pyarrow as pa

    from pipeline.config import load_config
    from pipeline.inputs import StageInputs
    from pipeline.runpath import RunPath
    from pipeline.shards import ShardWriter, StageOutput
    from pipeline.stages import REGISTRY
    from pipeline.stages.base import DocumentStage, RunContext
    from pipeline.tasks import InputShard

    table = _load_normalized(NOTES if stage == "phi_notes" else corpus, 10**9)
    if stage in ("phi", "phi_notes"):
        table = table.slice(0, phi_docs)
    if stage in ("tokenizer", "pack"):
        table = table.append_column("split", pa.array(["train"] * table.num_rows))
    texts = table["text"].to_pylist()
    mb = sum(len(t.encode()) for t in texts) / 1e6
    if stage.startswith("minhash_signatures"):
        return _bench_signatures(stage, texts, mb, batch_size)
    # phi_notes: the notes through the clinical profile, as configs/clinical_notes.yaml runs them.
    cfg = load_config(
        ROOT / ("configs/clinical_notes.yaml" if stage == "phi_notes" else "configs/pubmed.yaml"), check_inputs=False
    )
    spec = cfg.stage("phi" if stage == "phi_notes" else stage)
    out_dir = WORK / "stage_out" / stage
    upstream = {n: cfg.stage(n).config for n in REGISTRY[spec.name].needs if cfg.has_stage(n)}
    ctx = RunContext(
        run_dir=WORK, seed=1, upstream=upstream, read_paths={"tokenizer.json": WORK / "tokenizer/tokenizer.json"}
    )
    obj = REGISTRY[spec.name](spec.config, ctx)
    if stage == "pack":
        (WORK / "tokenizer").mkdir(exist_ok=True)
        (WORK / "tokenizer/tokenizer.json").write_bytes((WORK / "tokenizer.json").read_bytes())
    # The documents as one input shard on disk (not timed), as a stage reads them in a run: the
    # output of the stage before it (normalize: the source cut into a shard), so a stage that
    # keeps the text writes where the texts are, not the texts again, as it does in a run.
    after_a_stage = stage != "normalize"
    shard_dir = WORK / "stage_in" / stage / "data"
    shutil.rmtree(WORK / "stage_in" / stage, ignore_errors=True)
    writer = ShardWriter(RunPath.of(shard_dir), None, max(table.num_rows, 1))
    writer.write(table)
    writer.close()
    inputs = StageInputs(
        [InputShard("00000", RunPath.of(shard_dir / "00000.arrow"), table.num_rows, stage_output=after_a_stage)],
        batch_size=batch_size,
    )
    document = isinstance(obj, DocumentStage)
    t_setup = time.perf_counter()
    if document:
        obj.setup()
    setup_s = time.perf_counter() - t_setup
    if stage in ALTERNATING:
        return _bench_alternating(stage, obj, inputs, texts, mb, setup_s, out_dir)
    output = StageOutput(out_dir, keep_removed_text=False)
    inputs.bind(output)
    w0, c0 = time.perf_counter(), time.process_time()
    if document:
        # The shard task a worker runs: read the shard, process it batch by batch, write it.
        obj.process_shard(inputs.shard_tasks()[0])
    else:
        obj.run(inputs, output)
    wall, cpu = time.perf_counter() - w0, time.process_time() - c0
    if stage == "tokenizer":
        (WORK / "tokenizer.json").write_bytes((output.folder / "tokenizer.json").read_bytes())
    return _with_engine(
        stage,
        texts,
        {"stage": stage, "docs": len(texts), "MB": round(mb, 2), "setup_s": round(setup_s, 2)},
        wall,
        cpu,
        mb,
    )


def _with_engine(stage: str, texts: list[str], result: dict, wall: float, cpu: float, mb: float) -> dict:
    """Add the timings, then time the raw engine on the same documents. Ratios are of CPU time:
    another process on the machine inflates wall time, not CPU time."""
    n = len(texts)
    result.update(
        {
            "wall_s": round(wall, 3),
            "cpu_s": round(cpu, 3),
            "docs_per_s": round(n / wall, 1),
            "docs_per_cpu_s": round(n / cpu, 1),
            "MB_per_cpu_s": round(mb / cpu, 2),
        }
    )
    name, raw = _raw_engine(stage, texts)
    if raw is not None:
        c0 = time.process_time()
        raw()
        raw_cpu = time.process_time() - c0
        result.update(
            {"engine": name, "engine_docs_per_cpu_s": round(n / raw_cpu, 1), "stage_vs_engine": round(raw_cpu / cpu, 3)}
        )
    result["peak_rss_mb"] = round(_peak_rss_mb(), 1)
    return result


def _alternate(runs: list, rounds: int) -> tuple[list[float], float]:
    """Each callable in turn, for `rounds` rounds, in this process; each one's fastest CPU
    time (a burst of load from another process slows a round, not a side), and the first's
    fastest wall time."""
    cpu = [[] for _ in runs]
    walls = []
    for _ in range(rounds):
        for k, run in enumerate(runs):
            w0, c0 = time.perf_counter(), time.process_time()
            run()
            cpu[k].append(time.process_time() - c0)
            if k == 0:
                walls.append(time.perf_counter() - w0)
    return [min(c) for c in cpu], min(walls)


def _bench_alternating(
    stage: str, obj, inputs, texts: list[str], mb: float, setup_s: float, out_dir: Path, rounds: int = 3
) -> dict:
    """A per-document stage and its engines (ALTERNATING), alternating (_alternate)."""
    import shutil

    from pipeline.shards import StageOutput

    load = [round(x, 1) for x in os.getloadavg()]
    engines = [_raw_engine(e, texts) for e in ALTERNATING[stage]]

    def process():
        # The shard task a worker runs (read, process batch by batch, write), into a fresh folder.
        shutil.rmtree(out_dir, ignore_errors=True)
        inputs.bind(StageOutput(out_dir, keep_removed_text=False))
        obj.process_shard(inputs.shard_tasks()[0])

    (cpu, *engine_cpu), wall = _alternate([process] + [run for _, run in engines], rounds)
    n = len(texts)
    result = _rates(stage, n, mb, setup_s, wall, cpu, rounds, load)
    for k, ((name, _), times) in enumerate(zip(engines, engine_cpu)):
        key = "engine" if k == 0 else f"engine_{ALTERNATING[stage][k].removeprefix(stage + '_')}"
        result.update({key: name, f"{key}_docs_per_cpu_s": round(n / times, 1)})
        result["stage_vs_engine" if k == 0 else f"stage_vs_{key}"] = round(times / cpu, 3)
    result["peak_rss_mb"] = round(_peak_rss_mb(), 1)
    return result


def _rates(stage: str, n: int, mb: float, setup_s: float, wall: float, cpu: float, rounds: int, load) -> dict:
    """A stage's measured rates, as every row of bench/results.json holds them."""
    return {"stage": stage, "docs": n, "MB": round(mb, 2), "setup_s": round(setup_s, 2), "wall_s": round(wall, 3),
            "cpu_s": round(cpu, 3), "docs_per_s": round(n / wall, 1), "docs_per_cpu_s": round(n / cpu, 1),
            "MB_per_cpu_s": round(mb / cpu, 2), "rounds": rounds, "load_average_at_start": load}


def _bench_signatures(stage: str, texts: list[str], mb: float, batch_size: int, rounds: int = 3) -> dict:
    """The signature path of dedup_minhash alone (shingle, hash, permute, min), batch by batch,
    against datasketch on the same documents in the same process, alternating (_alternate).
    Also timed: MinHash.bulk alone, fed shingle lists made beforehand (its permutation-and-min
    cost without the shingling both sides pay)."""
    from datasketch import MinHash

    from pipeline.engines.minhash import HASHFUNCS, MinHasher, shingle_bytes

    hashfunc = "sha1" if stage.endswith("sha1") else "xxh32"
    hasher = MinHasher(128, 1, 5, True, hashfunc)
    name, engine = _raw_engine(stage, texts)
    load = [round(x, 1) for x in os.getloadavg()]

    def ours():
        for i in range(0, len(texts), batch_size):
            hasher.signatures(texts[i : i + batch_size])

    (cpu, engine_cpu), wall = _alternate([ours, engine], rounds)
    prebuilt = [shingle_bytes(t, 5) for t in texts]
    c0 = time.process_time()
    MinHash.bulk(prebuilt, num_perm=128, seed=1, hashfunc=HASHFUNCS[hashfunc])
    bulk_cpu = time.process_time() - c0
    del prebuilt
    n = len(texts)
    return {
        **_rates(stage, n, mb, 0.0, wall, cpu, rounds, load),
        "engine": name,
        "engine_docs_per_cpu_s": round(n / engine_cpu, 1),
        "stage_vs_engine": round(engine_cpu / cpu, 3),
        "engine_bulk_only_docs_per_cpu_s": round(n / bulk_cpu, 1),
        "stage_vs_engine_bulk_only": round(bulk_cpu / cpu, 3),
        "comparison": (
            "same documents, word 5-grams lowercased, the same 32-bit hash (" + hashfunc + "), 128 "
            "permutations, seed 1, identical signatures; both sides from text, in the same process, "
            "alternating, fastest of " + str(rounds) + " rounds each; ours in batches of "
            f"{batch_size} documents (numpy), datasketch one MinHash per document (MinHash.bulk); "
            "bulk_only: datasketch without its shingling, once"
        ),
        "peak_rss_mb": round(_peak_rss_mb(), 1),
    }


def _child(
    args: list[str], timeout: int = 7200, python: str = sys.executable
) -> tuple[dict | None, float, float, float]:
    """Run a child process; (its last-line JSON or None, wall s, CPU s of children, peak RSS MB)."""
    t0 = time.perf_counter()
    with open(WORK / "child.out", "w+") as out, open(WORK / "child.err", "w+") as err:
        proc = subprocess.Popen(
            [python, *args], cwd=ROOT, stdout=out, stderr=err, env={**os.environ, "PYTHONPATH": str(ROOT)}
        )
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


def bench_chain(
    corpus: Path,
    docs: int,
    stages: list[str],
    name: str,
    num_proc: int = 1,
    overrides: dict | None = None,
    tokenizer: Path | None = None,
) -> dict:
    cfg_text = (ROOT / "configs/pubmed.yaml").read_text()
    cfg_text = cfg_text.replace("paths: [data/raw/pubmed21n1298.xml.gz]", f"paths: [{corpus}]")
    cfg_text = cfg_text.replace("output_dir: runs/pubmed", f"output_dir: {WORK / name}").replace(
        "num_proc: 2", f"num_proc: {num_proc}"
    )
    import yaml

    raw = yaml.safe_load(cfg_text)
    raw["stages"] = [s for s in raw["stages"] if next(iter(s)) in stages]
    for entry in raw["stages"]:
        name_ = next(iter(entry))
        if overrides and name_ in overrides:
            entry[name_] = overrides[name_]
    raw["progress"] = False
    raw["report"] = False  # datatrove's chain writes no report: compare the same work
    path = WORK / f"{name}.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    import shutil

    shutil.rmtree(WORK / name, ignore_errors=True)
    if tokenizer is not None:  # pack without a tokenizer stage reads the run's tokenizer.json
        (WORK / name / "tokenizer").mkdir(parents=True)
        shutil.copy(tokenizer, WORK / name / "tokenizer/tokenizer.json")
    _, wall, cpu, rss = _child(["-m", "pipeline", "run", "--config", str(path)])
    seconds = {}
    for stats in sorted((WORK / name / "stages").glob("*/stats.json")):
        st = json.loads(stats.read_text())
        seconds[st["stage"]] = round(st["seconds"], 2)
    return {
        "chain": name,
        "stages": stages,
        "docs": docs,
        "num_proc": num_proc,
        "wall_s": round(wall, 2),
        "cpu_s": round(cpu, 2),
        "docs_per_s": round(docs / wall, 1),
        "docs_per_cpu_s": round(docs / cpu, 1),
        "peak_rss_mb": round(rss, 1),
        "stage_wall_s": seconds,
        **({"overrides": overrides} if overrides else {}),
    }


def versions() -> dict:
    from pipeline.runner import run_versions
    from pipeline.stages import REGISTRY

    v = run_versions(REGISTRY.names())
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
    ap.add_argument(
        "--only",
        choices=["phi", "datatrove", "filters-agreement", "stages"],
        help="rerun only some rows and replace them in the existing bench/results.json. phi: phi, "
        "phi_notes and the phi scaling chains; datatrove: the heuristics row, our sub-chain and "
        "datatrove's chain; filters-agreement: recount which documents each side's filters kept "
        "in the last run's bench/work folders; stages: the per-stage rows named by --stages",
    )
    ap.add_argument("--one", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.only == "phi":
        args.stages, args.skip_chain, args.skip_datatrove, args.phi_scaling = "phi,phi_notes", True, True, True
    if args.only == "datatrove":
        args.stages, args.phi_scaling = "heuristics", False
    if args.only == "stages":
        args.skip_chain, args.skip_datatrove, args.phi_scaling = True, True, False
    if args.only == "filters-agreement":
        path = ROOT / "bench/results.json"
        results = json.loads(path.read_text())
        results["datatrove"]["filters_kept"] = filters_agreement()
        path.write_text(json.dumps(results, indent=2) + "\n")
        print(json.dumps(results["datatrove"]["filters_kept"]))
        return 0
    corpus = WORK / f"corpus-{args.docs}.jsonl"
    if args.one:
        print(json.dumps(bench_stage(args.one, corpus, args.batch_size, args.phi_docs)))
        return 0
    if not corpus.exists():
        build_corpus(args.docs, corpus)
    if "phi_notes" in args.stages.split(",") and not NOTES.exists():
        print(
            f"error: {NOTES} is missing (the phi_notes row times the phi stage on these clinical notes)",
            file=sys.stderr,
        )
        return 2
    results = {
        "machine": {
            "cores": os.cpu_count(),
            "python": platform.python_version(),
            "platform": platform.platform(),
            # Other processes slow even CPU-time figures (shared cores and caches).
            "load_average_at_start": [round(x, 1) for x in os.getloadavg()],
        },
        "versions": versions(),
        "docs": args.docs,
        "stages": [],
        "chains": [],
    }
    wanted = [s for s in STAGES if s in args.stages.split(",")]
    if "pack" in wanted and "tokenizer" not in wanted and not (WORK / "tokenizer.json").exists():
        wanted.insert(wanted.index("pack"), "tokenizer")
    for stage in wanted:
        try:
            data, *_ = _child(
                [
                    __file__,
                    "--docs",
                    str(args.docs),
                    "--one",
                    stage,
                    "--phi-docs",
                    str(args.phi_docs),
                    "--batch-size",
                    str(args.batch_size),
                ]
            )
        except RuntimeError as exc:  # one failing stage does not lose the others' rows
            data = {"stage": stage, "error": str(exc)[-500:]}
            print(f"  {stage}: failed: {str(exc)[-300:]}", file=sys.stderr)
        else:
            print(f"  {stage}: {data['docs_per_cpu_s']:,} docs per CPU-second", file=sys.stderr)
        results["stages"].append(data)
    if not args.skip_chain or not args.skip_datatrove:
        # The sub-chain and datatrove pack with the tokenizer a full run trains (its tokenizer
        # row); a partial run (--only datatrove, on a fresh clone) trains it the same way.
        ensure_tokenizer(args)
    if not args.skip_chain:
        chain = [
            "normalize",
            "langid",
            "perplexity",
            "heuristics",
            "toxicity",
            "dedup_exact",
            "dedup_minhash",
            "split",
            "tokenizer",
            "pack",
        ]
        if args.only != "datatrove":
            results["chains"].append(bench_chain(corpus, args.docs, chain, "chain_without_phi"))
        # The sub-chain datatrove's chain does the same work as: from the same JSONL file to
        # tokenized shards on disk, heuristics set to datatrove's filters, exact and MinHash
        # dedup, and packing with the tokenizer both sides use.
        sub = ["heuristics", "dedup_exact", "dedup_minhash", "pack"]
        results["chains"].append(
            bench_chain(
                corpus,
                args.docs,
                sub,
                "subchain",
                overrides={"heuristics": DATATROVE_HEURISTICS},
                tokenizer=WORK / "tokenizer.json",
            )
        )
    if args.phi_scaling:
        subset = WORK / f"corpus-phi-{args.phi_docs}.jsonl"
        with open(corpus, encoding="utf-8") as src, open(subset, "w", encoding="utf-8") as dst:
            for _, line in zip(range(args.phi_docs), src):
                dst.write(line)
        for n in (1, 2):
            try:
                results["chains"].append(bench_chain(subset, args.phi_docs, ["phi"], f"phi_num_proc_{n}", num_proc=n))
            except RuntimeError as exc:
                results["chains"].append({"chain": f"phi_num_proc_{n}", "error": str(exc)[-500:]})
    if not args.skip_datatrove:
        try:
            ensure_datatrove_venv()
            data, wall, cpu, rss = _child(
                [
                    "scripts/benchmarks/bench_datatrove.py",
                    "--corpus",
                    str(corpus),
                    "--tokenizer",
                    str(WORK / "tokenizer.json"),
                    "--work",
                    str(WORK / "datatrove"),
                ],
                python=str(ROOT / ".venv-bench/bin/python"),
            )
            results["datatrove"] = {
                **(data or {}),
                "wall_s": round(wall, 2),
                "cpu_s": round(cpu, 2),
                "docs_per_s": round(args.docs / wall, 1),
                "docs_per_cpu_s": round(args.docs / cpu, 1),
                "peak_rss_mb": round(rss, 1),
            }
            ours = next(c for c in results["chains"] if c["chain"] == "subchain")
            results["ours_vs_datatrove_docs_per_cpu_s"] = round(
                ours["docs_per_cpu_s"] / results["datatrove"]["docs_per_cpu_s"], 2
            )
            # What datatrove's English word and sentence tokenization (spaCy) costs alone on the corpus.
            data, _, cpu, _ = _child(
                ["scripts/benchmarks/bench_datatrove.py", "--corpus", str(corpus), "--spacy-only"],
                python=str(ROOT / ".venv-bench/bin/python"),
            )
            results["datatrove"]["spacy_tokenization"] = data
            results["datatrove"]["filters_kept"] = filters_agreement()
        except (RuntimeError, StopIteration, FileNotFoundError) as exc:
            results["datatrove"] = {"error": str(exc)[-500:]}
    path = ROOT / "bench/results.json"
    previous = json.loads(path.read_text()) if path.exists() else {}
    if args.only:
        results = merge_rows(previous, results)
    else:
        results.update({k: previous[k] for k in OTHER_SCRIPTS_KEYS if k in previous})
    print_table(results)
    path.parent.mkdir(exist_ok=True)
    path.write_text(json.dumps(results, indent=2) + "\n")
    print(json.dumps(results))
    return 0


def ensure_tokenizer(args) -> None:
    """WORK/tokenizer.json, as the tokenizer row leaves it (that row's own run, its figures not
    kept), when no earlier run left one."""
    if not (WORK / "tokenizer.json").exists():
        print("  training the benchmark tokenizer (bench/work/tokenizer.json)", file=sys.stderr)
        _child([__file__, "--docs", str(args.docs), "--one", "tokenizer", "--batch-size", str(args.batch_size)])


def ensure_datatrove_venv() -> None:
    """.venv-bench, datatrove's own virtualenv, through its Makefile target when missing."""
    if not (ROOT / ".venv-bench/bin/python").exists():
        print("  creating .venv-bench (datatrove, bench/requirements-datatrove.txt)", file=sys.stderr)
        subprocess.run(["make", ".venv-bench/.installed"], cwd=ROOT, check=True)


def filters_agreement() -> dict:
    """Documents kept by datatrove's filters (its filtered JSONL) and by our heuristics stage in
    the sub-chain, and by both: how far apart the matched rules still are."""
    import pyarrow as pa

    theirs = [
        json.loads(line)["id"]
        for f in sorted((WORK / "datatrove/filtered").glob("*.jsonl"))
        for line in open(f, encoding="utf-8")
    ]
    ours: list[str] = []
    for f in sorted((WORK / "subchain/stages").glob("*_heuristics/data/*.arrow")):
        with pa.OSFile(str(f), "rb") as src:
            ours.extend(pa.ipc.open_stream(src).read_all()["id"].to_pylist())
    # The corpus repeats a few ids (MEDLINE): count documents, and ids for the overlap.
    return {"datatrove": len(theirs), "ours": len(ours), "both": len(set(theirs) & set(ours))}


def merge_rows(previous: dict, new: dict) -> dict:
    """previous with new's stage and chain rows put in place of the rows of the same name."""
    merged = {**{k: new[k] for k in ("machine", "docs")}, **previous}
    for key, name in (("stages", "stage"), ("chains", "chain")):
        rows = list(previous.get(key, []))
        for row in new[key]:
            at = next((i for i, r in enumerate(rows) if r[name] == row[name]), None)
            if at is None:
                rows.append(row)
            else:
                rows[at] = row
        merged[key] = rows
    merged["versions"] = new["versions"]
    for key in ("datatrove", "ours_vs_datatrove_docs_per_cpu_s"):
        if key in new:
            merged[key] = new[key]
    return merged


def print_table(r: dict) -> None:
    print(f"\n{r['docs']:,} documents, {r['machine']['cores']} cores; per-stage figures are one process, one core.\n")
    print(
        "| stage | docs | docs per CPU-s | MB per CPU-s | peak RSS MB | engine | engine docs per CPU-s | stage/engine |"
    )
    print("|---|---:|---:|---:|---:|---|---:|---:|")
    for s in r["stages"]:
        if "error" in s:
            print(f"| {s['stage']} | failed: {s['error'][-120:]!r} |")
            continue
        print(
            f"| {s['stage']} | {s['docs']:,} | {s['docs_per_cpu_s']:,} | {s['MB_per_cpu_s']} | {s['peak_rss_mb']:,} | "
            f"{s.get('engine', '-')} | {s.get('engine_docs_per_cpu_s', '-')} | {s.get('stage_vs_engine', '-')} |"
        )
    # Second engine figures beside some rows (perplexity: KenLM on the raw text; signatures:
    # MinHash.bulk without its shingling).
    for s in r["stages"]:
        for key in [k for k in s if k.startswith("stage_vs_engine_")]:
            other = key.removeprefix("stage_vs_")
            name = s.get(other, other.removeprefix("engine_").replace("_", " "))
            print(
                f"  {s['stage']}: against {name}: {s.get(other + '_docs_per_cpu_s')} docs per CPU-second, "
                f"stage/engine {s[key]}"
            )
    for c in r["chains"]:
        if "error" in c:
            print(f"\nchain {c['chain']}: failed: {c['error'][-200:]!r}")
            continue
        print(
            f"\nchain {c['chain']} ({' -> '.join(c['stages'])}), num_proc {c['num_proc']}: {c['wall_s']} s wall, "
            f"{c['docs_per_s']:,} docs/s, {c['docs_per_cpu_s']:,} docs per CPU-second, peak RSS {c['peak_rss_mb']} MB"
        )
    if "datatrove" in r:
        d = r["datatrove"]
        if "error" in d:
            print(f"\ndatatrove: not measured ({d['error'][:200]})")
        else:
            print(
                f"\ndatatrove 0.10 comparable chain: {d['wall_s']} s wall, "
                f"{d['docs_per_cpu_s']:,} docs per CPU-second, "
                f"peak RSS {d['peak_rss_mb']} MB; ours/datatrove (docs per CPU-second): "
                f"{r.get('ours_vs_datatrove_docs_per_cpu_s')}"
            )


if __name__ == "__main__":
    sys.exit(main())
