"""datatrove 0.10's chain comparable to our sub-chain (heuristics, exact dedup, MinHash dedup,
tokenize), on the benchmark corpus, in one process (LocalPipelineExecutor, 1 task, 1 worker).
Runs in its own virtualenv (.venv-bench, bench/requirements-datatrove.txt); scripts/benchmarks/bench.py
starts it and measures its wall time, CPU time and peak RSS.

    .venv-bench/bin/python scripts/benchmarks/bench_datatrove.py --corpus C.jsonl --tokenizer tokenizer.json --work DIR
    .venv-bench/bin/python scripts/benchmarks/bench_datatrove.py --corpus C.jsonl --spacy-only

datatrove's English word tokenizer is spaCy's (`spacy.blank("en")` with a sentencizer): the
Gopher filters split every document into words with it, C4QualityFilter counts each kept
line's sentences with it, and the MinHash signature step tokenizes the simplified text
(lowercased, punctuation and digits normalized) with it again. `--spacy-only` times those
tokenizer calls alone on the corpus (CPU seconds), to show how much of the chain they are.
"""
from __future__ import annotations

import argparse
import json
import shutil
import time
from pathlib import Path


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--corpus", required=True)
    ap.add_argument("--tokenizer")
    ap.add_argument("--work")
    ap.add_argument("--spacy-only", action="store_true")
    ap.add_argument("--limit", type=int, default=2000, help="--spacy-only: time the first N documents")
    args = ap.parse_args()
    if args.spacy_only:
        return spacy_only(Path(args.corpus), args.limit)
    from datatrove.executor import LocalPipelineExecutor
    from datatrove.pipeline.dedup import (
        MinhashDedupBuckets,
        MinhashDedupCluster,
        MinhashDedupFilter,
        MinhashDedupSignature,
    )
    from datatrove.pipeline.dedup.exact_dedup import (
        ExactDedupConfig,
        ExactDedupFilter,
        ExactDedupSignature,
        ExactFindDedups,
    )
    from datatrove.pipeline.dedup.minhash import MinhashConfig
    from datatrove.pipeline.filters import C4QualityFilter, GopherQualityFilter, GopherRepetitionFilter
    from datatrove.pipeline.readers import JsonlReader
    from datatrove.pipeline.stages.pack.writers import JsonlWriter
    from datatrove.pipeline.tokens import DocumentTokenizer

    work = Path(args.work)
    shutil.rmtree(work, ignore_errors=True)
    corpus = Path(args.corpus)
    exact = ExactDedupConfig(content_getter=lambda doc: doc.text)
    minhash = MinhashConfig(n_grams=5, num_buckets=14, hashes_per_bucket=8)
    steps = {
        "filters+exact_signature": [
            JsonlReader(str(corpus.parent), glob_pattern=corpus.name),
            GopherRepetitionFilter(),
            GopherQualityFilter(),
            C4QualityFilter(),
            JsonlWriter(str(work / "filtered"), compression=None),
            ExactDedupSignature(str(work / "exact_sigs"), config=exact),
        ],
        "exact_find": [ExactFindDedups(str(work / "exact_sigs"), str(work / "exact_dups"), config=exact)],
        "exact_filter": [
            JsonlReader(str(work / "filtered")),
            ExactDedupFilter(str(work / "exact_dups"), config=exact),
            JsonlWriter(str(work / "exact"), compression=None),
        ],
        "minhash_signature": [
            JsonlReader(str(work / "exact")),
            MinhashDedupSignature(str(work / "mh_sigs"), config=minhash),
        ],
        "minhash_buckets": [MinhashDedupBuckets(str(work / "mh_sigs"), str(work / "mh_buckets"), config=minhash)],
        "minhash_cluster": [MinhashDedupCluster(str(work / "mh_buckets"), str(work / "mh_remove"), config=minhash)],
        "minhash_filter+tokenize": [
            JsonlReader(str(work / "exact")),
            MinhashDedupFilter(str(work / "mh_remove")),
            DocumentTokenizer(
                str(work / "tokens"),
                tokenizer_name_or_path=args.tokenizer,
                eos_token="<|endoftext|>",
                shuffle_documents=False,
            ),
        ],
    }
    seconds = {}
    for name, pipeline in steps.items():
        t0 = time.perf_counter()
        tasks = minhash.num_buckets if name == "minhash_buckets" else 1
        LocalPipelineExecutor(pipeline=pipeline, tasks=tasks, workers=1, logging_dir=str(work / "logs" / name)).run()
        seconds[name] = round(time.perf_counter() - t0, 2)
    kept = sum(1 for f in (work / "exact").glob("*.jsonl") for _ in open(f))
    from importlib.metadata import version

    print(
        json.dumps({"datatrove_version": version("datatrove"), "datatrove_steps_s": seconds, "docs_after_exact": kept})
    )
    return 0


def spacy_only(corpus: Path, limit: int) -> int:
    from datatrove.utils.text import simplify_text
    from datatrove.utils.word_tokenizers import load_word_tokenizer

    with open(corpus, encoding="utf-8") as fh:
        texts = [json.loads(line)["text"] for _, line in zip(range(limit), fh)]
    tok = load_word_tokenizer("en")
    tok.word_tokenize("warm up")
    c0 = time.process_time()
    for t in texts:
        tok.word_tokenize(t)
    words = time.process_time() - c0
    c0 = time.process_time()
    for t in texts:
        for line in t.splitlines():
            if line.strip():
                tok.span_tokenize(line.strip())
    sentences = time.process_time() - c0
    c0 = time.process_time()
    for t in texts:
        tok.word_tokenize(simplify_text(t))
    minhash_words = time.process_time() - c0
    ms = 1000 / len(texts)
    print(
        json.dumps(
            {
                "docs": len(texts),
                "gopher_word_tokenize_ms_per_doc": round(words * ms, 2),
                "c4_sentence_split_ms_per_doc": round(sentences * ms, 2),
                "minhash_simplify_and_word_tokenize_ms_per_doc": round(minhash_words * ms, 2),
            }
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
