"""MinHash: signatures identical to datasketch, dedup quality on planted near duplicates,
determinism, and out-of-core partitions that do not change the result."""
import json
import random

import numpy as np
import pytest
import xxhash
from datasketch import MinHash

from conftest import read_arrow_dir, run_cli, run_in_process, write_config, write_jsonl
from pipeline.engines.minhash import MinHasher, ShingleSpans, sha1_hash32, shingle_bytes, shingles, xxh32_spans


@pytest.mark.parametrize("hashfunc, fn", [("xxh32", xxhash.xxh32_intdigest), ("sha1", sha1_hash32)])
def test_signatures_identical_to_datasketch(english_texts, hashfunc, fn):
    texts = english_texts[:120] + ["", "two words", "exactly five words right here", " Tabs\tand\r\nbreaks\x0b\x0cend ",
                                   "ΣΟΦΟΣ ΚΑΙ ΣΟΦΟΣ, İstanbul", "no\u00a0break\x1cspace here at all"]
    ours = MinHasher(num_perm=128, seed=42, ngram=5, hashfunc=hashfunc).signatures(texts)
    for text, sig in zip(texts, ours):
        m = MinHash(num_perm=128, seed=42, hashfunc=fn)
        for s in shingles(text, 5):
            m.update(s.encode("utf-8"))
        assert np.array_equal(sig, m.hashvalues)


EDGE_TEXTS = ["", "   ", "one", "two words", "exactly five words right here", "\n\n a \t b\r\n c \x0b\x0c d e f ",
              "ΣΟΦΟΣ ΚΑΙ ΣΟΦΟΣ Σ", "ẞtraße İstanbul ǅemal", "no\u00a0break\x1cspace and\u2003em space", "x" * 70 + " y"]


@pytest.mark.parametrize("n", [1, 3, 5])
def test_shingle_spans_are_the_reference_shingles(english_texts, n):
    """The vectorized shingles (spans of one buffer) are shingle_bytes' own, document by
    document: whitespace runs of every kind, a text shorter than n words, unicode lowercasing."""
    for texts in ([], [""], EDGE_TEXTS, english_texts[:200] + EDGE_TEXTS):
        spans = ShingleSpans(texts, n)
        reference = [shingle_bytes(t, n) for t in texts]
        assert spans.counts.tolist() == [len(r) for r in reference]
        assert spans.list() == [s for r in reference for s in r]


def test_xxh32_spans_is_xxhash():
    """Every length from 0 to 100 bytes (stripes, 4-byte words, single bytes) and some long
    ones, random bytes at every alignment."""
    rng = np.random.default_rng(3)
    lengths = np.concatenate([np.arange(101), [255, 256, 1000, 4099]] * 3)
    data = rng.integers(0, 256, int(lengths.sum()) + 16, dtype=np.uint8)
    data[-16:] = 0
    start = np.cumsum(lengths) - lengths
    expected = [xxhash.xxh32_intdigest(data[s:s + m].tobytes()) for s, m in zip(start, lengths)]
    assert xxh32_spans(data, start, lengths).tolist() == expected


def _edit(text, rng, kind):
    words = text.split()
    if kind == "words":
        for _ in range(max(1, len(words) // 60)):
            words[rng.randrange(len(words))] = rng.choice(["novel", "modified", "altered"])
        return " ".join(words)
    if kind == "copyright":
        return text + "\n\nCopyright © 2021 The Authors. Published by Elsevier Inc. All rights reserved."
    if kind == "drop":
        sents = text.split(". ")
        del sents[rng.randrange(1, len(sents))]
        return ". ".join(sents)
    return text.replace(" ", "  ").replace("\n", " \n ")


def _jaccard(a, b):
    sa, sb = set(shingles(a, 5)), set(shingles(b, 5))
    return len(sa & sb) / len(sa | sb)


def test_planted_near_duplicates_recall_and_false_merges(tmp_path, english_texts):
    rng = random.Random(5)
    originals = [t for t in english_texts if len(t.split()) > 120][:300]
    rows = [{"id": f"orig{i:04d}", "text": t} for i, t in enumerate(originals)]
    planted = []
    for i, t in enumerate(originals[:150]):
        kind = ["words", "copyright", "drop", "space"][i % 4]
        copy = _edit(t, rng, kind)
        planted.append((f"orig{i:04d}", f"dup{i:04d}", _jaccard(t, copy)))
        rows.append({"id": f"dup{i:04d}", "text": copy})
    src = write_jsonl(tmp_path / "docs.jsonl", rows)
    cfg = write_config(tmp_path / "c.yaml", f"input: {{paths: [{src}]}}\noutput_dir: {tmp_path / 'run'}\n"
                                            "stages: [dedup_minhash]\n")
    run_cli("-m", "pipeline.stage", "dedup_minhash", "--config", str(cfg))
    removed = read_arrow_dir(tmp_path / "run/stages/01_dedup_minhash/removed")
    dup_of = dict(zip(removed["id"].to_pylist(), removed["duplicate_of"].to_pylist()))
    high = [(o, d) for o, d, j in planted if j >= 0.85]
    assert len(high) >= 100
    found = sum(1 for o, d in high if dup_of.get(d) == o)
    assert found / len(high) >= 0.95
    # A false merge joins documents that are not near duplicates. The real corpus itself holds
    # a few, so judge by true Jaccard.
    text_of = {r["id"]: r["text"] for r in rows}
    false_merges = [i for i, o in dup_of.items() if _jaccard(text_of[i], text_of[o]) < 0.5]
    assert len(false_merges) <= 0.001 * len(rows)
    stats = json.loads((tmp_path / "run/stages/01_dedup_minhash/stats.json").read_text())
    assert stats["docs_in"] == len(rows) and stats["docs_out"] + stats["removed"]["near_duplicate"] == len(rows)
    from datasketch.lsh import _optimal_param
    assert (stats["bands"], stats["rows"]) == _optimal_param(0.8, 128, 0.1, 0.9) == (14, 9)


def test_partitions_and_reruns_do_not_change_the_result(tmp_path, english_texts, monkeypatch):
    from pipeline.engines import band_partitions
    from pipeline.stages import dedup_minhash
    rows = [{"id": f"d{i}", "text": t} for i, t in enumerate(english_texts[:150])]
    rows += [{"id": f"c{i}", "text": t + " Extra closing sentence."} for i, t in enumerate(english_texts[:40])]
    src = write_jsonl(tmp_path / "docs.jsonl", rows)
    # A small input gets one partition by default: every partition count the config asks for
    # here is used (in this process: num_proc 1).
    assert dedup_minhash.partitions_for(len(rows), 14, 64) == 1
    monkeypatch.setattr(band_partitions, "MIN_PARTITION_BYTES", 1)
    outs, grouped = [], band_partitions.READ_BYTES
    # "e": each partition read alone, not with its neighbours (READ_BYTES).
    for name, parts, read_bytes in (("a", 1, grouped), ("b", 64, grouped), ("c", 64, grouped), ("d", 23, grouped),
                                    ("e", 64, 1)):
        monkeypatch.setattr(band_partitions, "READ_BYTES", read_bytes)
        cfg = write_config(
            tmp_path / f"{name}.yaml",
            f"input: {{paths: [{src}]}}\noutput_dir: {tmp_path / name}\n"
            f"num_proc: 1\nstages: [{{dedup_minhash: {{partitions: {parts}}}}}]\n",
        )
        code, _, err = run_in_process("stage", "dedup_minhash", "--config", str(cfg))
        assert code == 0, err
        stats = json.loads((tmp_path / name / "stages/01_dedup_minhash/stats.json").read_text())
        assert stats["partitions"] == parts
        outs.append((tmp_path / name / "stages/01_dedup_minhash/removed/00000.arrow").read_bytes())
    assert outs[0] == outs[1] == outs[2] == outs[3] == outs[4]
    removed = read_arrow_dir(tmp_path / "a/stages/01_dedup_minhash/removed")
    assert removed.num_rows >= 38


def test_partitions_follow_the_input_size():
    from pipeline.engines.band_partitions import PAIR, partitions_for

    assert partitions_for(0, 14, 256) == partitions_for(1, 14, 256) == 1
    per_partition = (1 << 20) // (14 * PAIR.itemsize)  # 6,241 documents
    assert partitions_for(per_partition, 14, 256) == 1 and partitions_for(per_partition + 1, 14, 256) == 2
    assert partitions_for(2_000_000, 14, 256) == 256 and partitions_for(2_000_000, 14, 16) == 16


def _chain(base: str, versions: int, edits: int, rng) -> list[str]:
    """Versions of a text, each with `edits` words of the previous one replaced by new words."""
    words = base.split()
    out = [" ".join(words)]
    for k in range(1, versions):
        words = list(words)
        for j, pos in enumerate(rng.sample(range(len(words)), edits)):
            words[pos] = f"revision{k}word{j}"
        out.append(" ".join(words))
    return out


@pytest.mark.parametrize("clustering", ["components", "star"])
def test_chain_of_versions(tmp_path, english_texts, clustering):
    rng = random.Random(12)
    long_texts = [t for t in english_texts if len(t.split()) > 200]
    base = " ".join(long_texts[:2])
    chain = _chain(base, 12, len(base.split()) // 95, rng)
    steps = [_jaccard(a, b) for a, b in zip(chain, chain[1:])]
    assert all(0.86 <= j <= 0.94 for j in steps), steps
    assert _jaccard(chain[0], chain[-1]) < 0.4
    rows = [{"id": f"v{k:02d}", "text": t} for k, t in enumerate(chain)]
    rows += [{"id": f"other{i}", "text": t} for i, t in enumerate(long_texts[2:40])]
    src = write_jsonl(tmp_path / "docs.jsonl", rows)
    cfg = write_config(
        tmp_path / "c.yaml",
        f"input: {{paths: [{src}]}}\noutput_dir: {tmp_path / 'run'}\n"
        f"stages: [{{dedup_minhash: {{clustering: {clustering}}}}}]\n",
    )
    run_cli("-m", "pipeline.stage", "dedup_minhash", "--config", str(cfg))
    folder = tmp_path / "run/stages/01_dedup_minhash"
    removed = read_arrow_dir(folder / "removed").to_pylist()
    text_of = {r["id"]: r["text"] for r in rows}
    similarity = {r["id"]: _jaccard(text_of[r["id"]], text_of[r["duplicate_of"]]) for r in removed}
    stats = json.loads((folder / "stats.json").read_text())
    far = stats["removed_far_from_representative"]
    assert stats["clustering"] == clustering and far["below"] == 0.6
    if clustering == "components":
        # Transitive merges: every later version goes as a duplicate of the first, down to Jaccard 0.3.
        assert {r["id"]: r["duplicate_of"] for r in removed} == {f"v{k:02d}": "v00" for k in range(1, 12)}
        assert min(similarity.values()) < 0.4
        # The count is by estimated Jaccard (128 permutations): between the true counts either side.
        assert (
            0
            < sum(j < 0.5 for j in similarity.values())
            <= far["documents"]
            <= sum(j < 0.7 for j in similarity.values())
        )
    else:
        # Each removed version is within the threshold of the version kept in its place.
        assert all(j >= 0.7 for j in similarity.values()), similarity
        assert far["documents"] == 0
        kept = read_arrow_dir(folder / "data")["id"].to_pylist()
        kept_versions = [i for i in kept if i.startswith("v")]
        assert len(removed) >= 5 and len(kept_versions) >= 3 and kept_versions[0] == "v00"


def _star_clusters_row_by_row(sigs, n, u, v, min_similarity):
    """The reference: rows in input order, each deciding from its candidates' representatives."""
    rep = np.arange(n)
    order = np.lexsort((u, v))
    u, v = u[order], v[order]
    starts = np.flatnonzero(np.concatenate([[True], v[1:] != v[:-1]])) if len(v) else []
    ends = np.append(starts[1:], len(v)) if len(v) else []
    for s, e in zip(list(starts), list(ends)):
        row = int(v[s])
        reps = np.unique(rep[u[s:e]])
        similarity = (sigs[reps] == sigs[row]).mean(axis=1)
        best = int(np.argmax(similarity))
        if similarity[best] >= min_similarity:
            rep[row] = reps[best]
    return rep


def test_star_clusters_all_rows_at_once_are_the_row_by_row_result(tmp_path):
    """Chains of copies (each of the previous one, some of an older row), candidates that are
    not near duplicates, pairs found twice: the rounds give what deciding row by row gives."""
    from pipeline.stages.dedup_minhash import ShardSignatures, star_clusters

    rng = np.random.default_rng(7)
    n = 4000
    sigs = rng.integers(0, 1 << 32, size=(n, 128), dtype=np.uint32)
    u, v = [], []
    for row in range(1, n):
        if rng.random() < 0.15:
            src = row - 1 if rng.random() < 0.6 else int(rng.integers(0, row))
            changed = rng.choice(128, int(rng.integers(0, 48)), replace=False)
            sigs[row] = sigs[src]
            sigs[row, changed] = rng.integers(0, 1 << 32, size=len(changed))
            u += [src] * (2 if rng.random() < 0.3 else 1) + [
                int(x) for x in rng.integers(0, row, int(rng.integers(0, 3)))
            ]
            v += [row] * (len(u) - len(v))
    names, offsets = [], []
    for k, lo in enumerate(range(0, n, 1500)):
        np.save(tmp_path / f"sig-{k:05d}.npy", sigs[lo : lo + 1500])
        names.append(f"{k:05d}")
        offsets.append(lo)
    u, v = np.array(u, np.int64), np.array(v, np.int64)
    shuffle = rng.permutation(len(u))
    u, v = u[shuffle], v[shuffle]
    expected = _star_clusters_row_by_row(ShardSignatures(tmp_path, names, offsets, 128), n, u, v, 0.75)
    got, to_rep = star_clusters(ShardSignatures(tmp_path, names, offsets, 128), n, u, v, 0.75, with_similarity=True)
    removed = np.flatnonzero(expected != np.arange(n))
    assert len(removed) > 300 and (expected[removed] != removed - 1).any()  # chains joined an older row
    assert np.array_equal(got, expected)
    assert np.array_equal(to_rep[removed], (sigs[removed] == sigs[expected[removed]]).mean(axis=1))


def test_lsh_params_are_the_ones_datasketch_chooses():
    """Our quadrature (Gauss-Legendre, exact for these polynomials) picks datasketch's (bands,
    rows) wherever its scipy-based optimizer is asked."""
    from datasketch.lsh import _optimal_param

    from pipeline.engines.minhash import lsh_params

    for num_perm in (32, 128, 256):
        for threshold in [round(0.5 + 0.05 * i, 2) for i in range(10)]:
            for fn_weight in (0.5, 0.3):
                assert lsh_params(threshold, num_perm, fn_weight) == _optimal_param(
                    threshold, num_perm, 1.0 - fn_weight, fn_weight
                ), (threshold, num_perm, fn_weight)


def test_split_leak_check_counts_validation_copies_of_train_documents(tmp_path, english_texts, monkeypatch):
    """split's leak check (dedup_minhash's band keys, reduced per partition span): a validation
    document that is a one-word edit of a train document is counted, whatever the partitions."""
    import pyarrow as pa

    from conftest import shard_inputs
    from pipeline.engines import band_partitions
    from pipeline.shards import StageOutput
    from pipeline.stages import dedup_minhash
    from pipeline.stages.base import RunContext
    from pipeline.stages.split import Split, SplitConfig, assign_splits

    originals = english_texts[:300]
    copies = [t.replace(" the ", " a ", 1) for t in originals]
    ids = [f"o{i}" for i in range(300)] + [f"c{i}" for i in range(300)]
    table = pa.table({"id": ids, "text": originals + copies})
    is_val = assign_splits(ids, 7, 0.2)
    # Validation documents whose other version is in train.
    expected = int(sum(is_val[i] != is_val[300 + i] for i in range(300)))
    assert expected > 30
    ctx = RunContext(run_dir=tmp_path, seed=7, upstream={"dedup_minhash": dedup_minhash.MinHashConfig(partitions=64)})
    found = {}
    for name, min_bytes in (("one", band_partitions.MIN_PARTITION_BYTES), ("many", 1)):
        monkeypatch.setattr(band_partitions, "MIN_PARTITION_BYTES", min_bytes)
        inputs = shard_inputs(table, tmp_path / f"in-{name}", batch_size=100)
        output = StageOutput(tmp_path / name, keep_removed_text=False)
        inputs.bind(output)
        found[name] = Split(SplitConfig(validation_fraction=0.2), ctx).run(inputs, output)["validation_near_train"]
    assert found == {"one": expected, "many": expected}
