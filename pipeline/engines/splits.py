"""Which split a document goes to: a hash of (seed, id) alone, so a document lands in the same
split whatever else is in the corpus (the split stage assigns; the tokenizer trains on train)."""
from __future__ import annotations

import numpy as np
import xxhash

SPLITS = ("train", "validation")


def assign_splits(ids: list[str], seed: int, validation_fraction: float) -> np.ndarray:
    """True where a document goes to validation."""
    h = np.fromiter((xxhash.xxh64_intdigest(i.encode("utf-8"), seed=seed) for i in ids), dtype=np.uint64,
                    count=len(ids))
    return (h >> np.uint64(11)).astype(np.float64) / float(1 << 53) < validation_fraction
