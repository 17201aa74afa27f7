"""bench_scale's recall figures: a planted near-duplicate pair counts as caught when either
dedup stage removed one of its documents, and a pair below the threshold is not a miss."""
from pathlib import Path

import pyarrow as pa

from scripts.benchmarks.bench_scale import jaccard_check, near_duplicate_recall

WORDS = ("aspirin reduced the incidence of stroke in older adults with atrial fibrillation over "
         "five years of follow up in this randomized trial of two thousand patients").split()


def write(folder: Path, columns: dict) -> None:
    folder.mkdir(parents=True)
    table = pa.table(columns)
    with pa.OSFile(str(folder / "00000.arrow"), "wb") as sink, pa.ipc.new_stream(sink, table.schema) as w:
        w.write_table(table)


def test_a_pair_whose_copy_dedup_exact_took_is_caught(tmp_path):
    source = " ".join(WORDS)
    copy = source + " Copyright 2021 The Authors."
    changed = " ".join(["modified" if i % 3 == 0 else w for i, w in enumerate(WORDS)])
    texts = {"s00000000": source, "s00000001": copy, "s00000002": copy, "s00000003": changed}
    # rows 1 and 2 are both near copies of row 0: dedup_exact takes 2 (identical to 1),
    # dedup_minhash takes 1; row 3 is far below 0.8 and is kept.
    planted = {"exact_copy": [], "near_duplicate": [[1, 0], [2, 0], [3, 0]]}
    stage = {name: tmp_path / name for name in ("phi", "dedup_exact", "dedup_minhash")}
    write(stage["phi"] / "data", {"id": list(texts), "text": list(texts.values())})
    write(stage["dedup_exact"] / "removed", {"id": ["s00000002"], "duplicate_of": ["s00000001"]})
    write(stage["dedup_minhash"] / "removed", {"id": ["s00000001"], "duplicate_of": ["s00000000"]})

    judged = jaccard_check(planted, stage, size=4)
    assert judged["near_duplicate_pairs_at_or_above_threshold"] == 2
    assert judged["near_duplicate_pairs_below_threshold"] == 1
    assert judged["near_duplicate_recall_at_or_above_threshold"] == 1.0
    assert judged["below_threshold_pairs_removed"] == 0
    assert judged["false_merges"] == 0
    assert near_duplicate_recall(planted, stage, size=4)["near_duplicate_recall"] == round(2 / 3, 4)

    # Without dedup_exact's removal the second pair is a miss.
    judged = jaccard_check(planted, {**stage, "dedup_exact": tmp_path / "nothing_removed"}, size=4)
    assert judged["near_duplicate_recall_at_or_above_threshold"] == 0.5
