"""Which split a document goes to: a hash of (seed, id) alone, so a document lands in the same
split whatever else is in the corpus (the split stage assigns; the tokenizer trains on train);
or, split by group (a patient), a hash of (seed, group) that keeps each group whole."""
from __future__ import annotations

import numpy as np
import xxhash

SPLITS = ("train", "validation")


def assign_splits(ids: list[str], seed: int, validation_fraction: float) -> np.ndarray:
    """True where a document goes to validation."""
    h = np.fromiter((xxhash.xxh64_intdigest(i.encode("utf-8"), seed=seed) for i in ids), dtype=np.uint64,
                    count=len(ids))
    return (h >> np.uint64(11)).astype(np.float64) / float(1 << 53) < validation_fraction


def group_keys(groups: list, ids: list[str], seed: int) -> np.ndarray:
    """A keyed 64-bit hash per document of its group's value; a document without one (null) is
    a group of its own, keyed by its id."""
    return np.fromiter((xxhash.xxh64_intdigest((f"g:{g}" if g is not None else f"d:{i}").encode("utf-8"), seed=seed)
                        for g, i in zip(groups, ids)), dtype=np.uint64, count=len(ids))


def validation_groups(keys: np.ndarray, sizes: np.ndarray, validation_fraction: float) -> np.ndarray:
    """The groups (sorted unique keys, with their documents) that go to validation: the first
    ones in key order (a keyed, seeded order) whose documents come closest to the fraction of
    all documents that whole groups allow."""
    if not len(keys):
        return keys
    target = validation_fraction * float(sizes.sum())
    taken = np.concatenate([[0], np.cumsum(sizes)])
    k = int(np.argmin(np.abs(taken - target)))
    return keys[:k]
