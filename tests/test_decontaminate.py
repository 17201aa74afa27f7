"""decontaminate against the shipped PubMedQA items (data/pubmedqa), in a small corpus of real
MEDLINE abstracts with PubMedQA abstracts planted into it: verbatim, lightly edited (case,
punctuation, whitespace), with a word changed every 20 words, with a sentence changed, cut in
half, and overlaps a 13-word rule must not catch (a word changed every 8 words, 12 words
copied, a short question, a common phrase). Two runs (remove, cut) under the local executor
with 2 workers and 4 shards, a rerun with 1 worker, and one under Ray, all byte-compared."""
import json
import re
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from conftest import RAW, ROOT, read_arrow_dir, run_in_process, write_config

PUBMEDQA = ROOT / "data/pubmedqa/ori_pqal.json"
CHAIN = """input: {{paths: [{src}]}}
output_dir: {out}
seed: 1
num_proc: {num_proc}
batch_size: 7
shard_size: 10
report: false
executor: {{kind: {kind}, num_cpus: 2}}
stages:
  - normalize: {{}}
  - decontaminate:
      mode: {mode}
      benchmarks: [{{name: pubmedqa, path: {bench}, fields: [QUESTION, CONTEXTS, LONG_ANSWER]}}]
"""


def _items() -> list[tuple[str, dict]]:
    return list(json.loads(PUBMEDQA.read_text()).items())


def _abstract(item: dict) -> str:
    """An item's abstract as the MEDLINE reader writes one: labelled sections, then its conclusion."""
    parts = [f"{label}: {text}" for label, text in zip(item["LABELS"], item["CONTEXTS"])]
    return "\n\n".join(parts + [f"CONCLUSIONS: {item['LONG_ANSWER']}"])


def _change_every(text: str, k: int, tag: str) -> str:
    words = text.split(" ")
    return " ".join(f"{tag}{i}" if i % k == k - 1 else w for i, w in enumerate(words))


def _real_abstracts(n: int) -> list[dict]:
    from pipeline.config import InputConfig
    from pipeline.readers import read_documents
    out = []
    for batch in read_documents(InputConfig(paths=[str(RAW)], limit=200), 200):
        out += [r for r in batch.table.select(["id", "text"]).to_pylist() if len(r["text"].split()) > 120]
    return out[:n]


def _corpus() -> tuple[list[dict], dict, dict]:
    """The documents (id, text, source), the ids that must be removed with the item each
    copies, and the planted passages by id (for the cut mode)."""
    items = _items()
    real = _real_abstracts(24)
    short_q = next((k, v) for k, v in items if len(v["QUESTION"].split()) <= 8)
    long_q = next((k, v) for k, v in items[50:] if len(v["QUESTION"].split()) >= 20)
    (k0, v0), (k1, v1), (k2, v2), (k3, v3), (k4, v4), (k5, v5), (k6, v6) = items[:7]
    edited = re.sub(r"[,;:()]", "", _abstract(v1).upper()).replace(". ", "  ").replace("\n\n", " \n ")
    first = v3["CONTEXTS"][0].split(". ")
    sentence = ". ".join(first[:1] + ["This sentence was written for the test and is in no abstract"] + first[2:])
    words4 = _abstract(v4).split(" ")
    twelve = " ".join(re.findall(r"[A-Za-z0-9]+", v6["CONTEXTS"][0])[5:17])
    planted = {
        "verbatim": (k0, _abstract(v0)),
        "edited": (k1, edited),
        "every20": (k2, _change_every(_abstract(v2), 20, "zq")),
        "sentence": (k3, "\n\n".join([sentence] + v3["CONTEXTS"][1:])),
        "half": (k4, " ".join(words4[:len(words4) // 2])),
        "long_question": (long_q[0], long_q[1]["QUESTION"]),
    }
    docs, expected, passages = [], {}, {}
    for i, r in enumerate(real):
        docs.append({"id": f"real-{i}", "text": r["text"], "source": "pubmed" if i % 2 else "notes"})
    # Contaminated: alone, or inside a real abstract (the cut mode keeps the abstract).
    for j, (name, (key, text)) in enumerate(planted.items()):
        doc_id = f"planted-{name}"
        body = real[j]["text"] + "\n\n" + text if name in ("every20", "long_question", "sentence") else text
        docs.append({"id": doc_id, "text": body, "source": "pubmed" if j % 2 else "notes"})
        expected[doc_id] = key
        passages[doc_id] = (real[j]["text"], text) if body != text else (None, text)
    # Not contaminated under a 13-word rule: what it misses, and what it must not catch.
    docs += [
        {"id": "clean-every8", "text": _change_every(_abstract(v5), 8, "zq"), "source": "pubmed"},
        {"id": "clean-twelve-words", "text": real[10]["text"] + " " + twelve + ".", "source": "notes"},
        {"id": "clean-short-question", "text": short_q[1]["QUESTION"] + " " + real[11]["text"], "source": "pubmed"},
        {"id": "clean-common-phrase", "text": real[12]["text"] + " The odds ratio was 1.4 (95 % confidence "
         "interval 1.1 to 1.9); yes, no or maybe.", "source": "notes"},
    ]
    return docs, expected, passages


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("decontam")
    docs, expected, passages = _corpus()
    src = tmp / "corpus.parquet"
    pq.write_table(pa.Table.from_pylist(docs), src)
    return {"tmp": tmp, "src": src, "docs": docs, "expected": expected, "passages": passages}


def _run(corpus, name, mode="remove", kind="local", num_proc=2) -> Path:
    out = corpus["tmp"] / name
    cfg = write_config(corpus["tmp"] / f"{name}.yaml", CHAIN.format(src=corpus["src"], out=out, num_proc=num_proc,
                                                                   kind=kind, mode=mode, bench=PUBMEDQA))
    code, _, err = run_in_process("run", "--config", cfg)
    assert code == 0, err[-3000:]
    return out


@pytest.fixture(scope="module")
def removed_run(corpus):
    return _run(corpus, "remove")


@pytest.fixture(scope="module")
def cut_run(corpus):
    return _run(corpus, "cut", mode="cut", num_proc=1)


def _stage(run: Path) -> Path:
    return next(p for p in (run / "stages").iterdir() if p.name.endswith("decontaminate"))


def _arrow_bytes(run: Path) -> dict[str, bytes]:
    return {p.relative_to(run).as_posix(): p.read_bytes() for p in sorted((run / "stages").rglob("*.arrow"))}


def test_planted_items_are_removed_with_their_benchmark_item_and_nothing_else(corpus, removed_run):
    stage = _stage(removed_run)
    removed = read_arrow_dir(stage / "removed")
    got = {r["id"]: (r["reason"], r["duplicate_of"]) for r in removed.to_pylist()}
    assert got == {doc_id: ("contaminated", f"pubmedqa:{key}") for doc_id, key in corpus["expected"].items()}
    stats = json.loads((stage / "stats.json").read_text())
    assert stats["docs_in"] == len(corpus["docs"]) == stats["docs_out"] + sum(stats["removed"].values())
    bench = stats["benchmarks"]["pubmedqa"]
    assert (bench["items"], bench["items_too_short"], bench["items_found"], bench["documents"]) == (1000, 0, 6, 6)
    # Per source: the planted documents alternate notes, pubmed.
    assert {s: v["documents"] for s, v in bench["by_source"].items()} == {"notes": 3, "pubmed": 3}
    assert {s: v["items_found"] for s, v in bench["by_source"].items()} == {"notes": 3, "pubmed": 3}
    assert stats["by_source"]["notes"]["docs_in"] + stats["by_source"]["pubmed"]["docs_in"] == len(corpus["docs"])
    manifest = json.loads((removed_run / "manifest.json").read_text())
    assert manifest["decontamination"]["benchmarks"]["pubmedqa"]["items_found"] == 6


def test_the_cut_mode_keeps_the_rest_of_each_document(corpus, cut_run):
    stage = _stage(cut_run)
    kept = {r["id"]: r["text"] for r in read_arrow_dir(stage / "data").to_pylist()}
    removed = {r["id"]: r["reason"] for r in read_arrow_dir(stage / "removed").to_pylist()}
    normalized = {r["id"]: r["text"] for r in read_arrow_dir(next((cut_run / "stages").glob("*normalize")) / "data")
                  .to_pylist()}
    left = {}
    for doc_id, (rest, planted) in corpus["passages"].items():
        if rest is None:      # nothing but the benchmark's text: too little left to keep
            assert removed[doc_id] == "contaminated"
            continue
        assert doc_id not in removed
        rest = normalized[doc_id][:len(rest)].rstrip()
        assert kept[doc_id].startswith(rest)
        left[doc_id] = kept[doc_id][len(rest):].strip()
    # The question goes whole; of the changed sentence, the words no 13-gram of the item holds
    # stay ("This" began the item's own second sentence, so it went with the first).
    assert left["planted-long_question"] == ""
    assert left["planted-sentence"] == "sentence was written for the test and is in no abstract"
    # Of the abstract with a word changed every 20: the changed words, the section labels and
    # the ends of sections too short for an n-gram of their own.
    planted = corpus["passages"]["planted-every20"][1]
    assert re.findall(r"zq\d+", left["planted-every20"]) == re.findall(r"zq\d+", planted)
    assert len(left["planted-every20"].split()) < 0.3 * len(planted.split())
    for doc_id in ("clean-every8", "clean-twelve-words", "clean-short-question", "clean-common-phrase"):
        assert kept[doc_id] == normalized[doc_id]
    stats = json.loads((stage / "stats.json").read_text())
    assert sum(v["cut_documents"] for v in stats["by_source"].values()) == 6
    assert stats["docs_in"] == stats["docs_out"] + sum(stats["removed"].values())


def test_a_rerun_with_one_worker_writes_the_same_bytes(corpus, removed_run):
    # removed_run had 2 workers: shard output does not depend on who wrote it.
    again = _run(corpus, "remove-1", num_proc=1)
    assert _arrow_bytes(again) == _arrow_bytes(removed_run)


def test_the_benchmark_set_from_the_cache_equals_a_new_build(tmp_path):
    """A rerun of the stage (a retune) reads the benchmark's n-gram set from the run's cache:
    the same arrays as a build; other options or another file build anew."""
    import numpy as np

    from pipeline.stages.decontaminate import BenchmarkConfig, BenchmarkSet
    from pipeline.stages.normalize import NormalizeConfig
    spec = BenchmarkConfig(name="pubmedqa", path=str(ROOT / "data/pubmedqa/ori_pqal.json"),
                           fields=["QUESTION", "CONTEXTS", "LONG_ANSWER"])
    cache = {"root": str(tmp_path / "run"), "direct": False, "max_mb": 100}
    built = BenchmarkSet.build(spec, 13, NormalizeConfig())
    first = BenchmarkSet.cached(spec, 13, NormalizeConfig(), cache)
    again = BenchmarkSet.cached(spec, 13, NormalizeConfig(), cache)
    assert "from_cache" not in first.stats and again.stats["from_cache"] is True
    assert first.cache_key == again.cache_key and (tmp_path / "run" / again.cache_key / "set.json").is_file()
    for got in (first, again):
        assert got.ids == built.ids and len(built.ngrams) > 10_000
        for a in ("ngrams", "first_item", "items", "starts"):
            assert np.array_equal(getattr(got, a), getattr(built, a)), a
    # Another run folder gets the same bytes (no build time in the files).
    elsewhere = BenchmarkSet.cached(spec, 13, NormalizeConfig(), {**cache, "root": str(tmp_path / "run2")})
    for f in (tmp_path / "run" / first.cache_key).iterdir():
        assert (tmp_path / "run2" / elsewhere.cache_key / f.name).read_bytes() == f.read_bytes(), f.name
    other = BenchmarkSet.cached(spec, 8, NormalizeConfig(), cache)
    assert other.cache_key != first.cache_key and "from_cache" not in other.stats
    assert BenchmarkSet.cached(spec, 13, NormalizeConfig(), {}).cache_key is None     # no cache: a build


def test_words_are_letters_and_digits_lowercased(tmp_path):
    from pipeline.stages.decontaminate import Words
    words = Words.of(pa.array(["Hello, WORLD! déjà-vu (95%CI)", "", None, "hello world"]))
    spans = [bytes(words.data[s:e]).decode() for s, e in zip(words.start, words.end)]
    assert spans == ["Hello", "WORLD", "déjà", "vu", "95", "CI", "hello", "world"]
    assert words.bounds.tolist() == [0, 6, 6, 6, 8]
    assert words.hashes[:2].tolist() == words.hashes[6:8].tolist()


@pytest.mark.parametrize("entry, message", [
    ({"name": "q", "path": "data/pubmedqa/ori_pqal.json", "fields": ["question"]},
     "benchmarks[0]: Value error, data/pubmedqa/ori_pqal.json: no field 'question'"),
    ({"name": "q", "path": "data/pubmedqa/missing.jsonl", "fields": ["q"]}, "benchmark file not found"),
    ({"name": "q", "path": "data/pubmedqa/LICENSE", "fields": ["q"]}, "a benchmark is JSONL, JSON or Parquet"),
    ({"name": "q", "path": "data/pubmedqa/ori_pqal.json"}, "benchmarks[0].fields"),
])
def test_a_bad_benchmark_is_refused_with_its_key(entry, message):
    from pipeline.config import validate_config
    from pipeline.errors import ConfigError
    raw = {"input": {"paths": [str(RAW)]}, "output_dir": "/tmp/unused",
           "stages": [{"decontaminate": {"benchmarks": [entry]}}]}
    with pytest.raises(ConfigError) as err:
        validate_config(raw, check_inputs=False)
    assert "stages[0].decontaminate." in str(err.value) and message in str(err.value)


def test_a_document_named_by_an_items_id_is_removed_whatever_its_text(tmp_path):
    """PubMedQA's items are PubMed articles named by PMID: with `match_column: pmid` an abstract
    whose PMID is an item is removed even when no 13-word n-gram of it matches (its text here
    is another abstract's); the stats count documents found by id apart from those by n-grams."""
    items = _items()
    real = _real_abstracts(6)
    docs = [{"id": f"d{i}", "pmid": str(900000000 + i), "text": r["text"]} for i, r in enumerate(real)]
    docs[2]["pmid"] = items[10][0]                   # an item's PMID, none of its words
    pq.write_table(pa.Table.from_pylist(docs), tmp_path / "corpus.parquet")
    cfg = write_config(tmp_path / "c.yaml", CHAIN.format(src=tmp_path / "corpus.parquet", out=tmp_path / "run",
                                                          num_proc=1, kind="local", mode="remove", bench=PUBMEDQA)
                       .replace("fields: [QUESTION, CONTEXTS, LONG_ANSWER]}",
                                "fields: [QUESTION, CONTEXTS, LONG_ANSWER], match_column: pmid}"))
    code, _, err = run_in_process("run", "--config", cfg)
    assert code == 0, err[-3000:]
    removed = read_arrow_dir(_stage(tmp_path / "run") / "removed")
    assert removed.select(["id", "reason", "duplicate_of"]).to_pylist() == [
        {"id": "d2", "reason": "contaminated", "duplicate_of": f"pubmedqa:{items[10][0]}"}]
    stats = json.loads((_stage(tmp_path / "run") / "stats.json").read_text())["benchmarks"]["pubmedqa"]
    assert (stats["documents"], stats["documents_by_id"], stats["match_column"]) == (0, 1, "pmid")
