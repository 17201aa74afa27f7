"""dedup_exact: a 128-bit hash of each document's (normalized) text; the first document of
each group in input order is kept, the others are removed with `duplicate_of`.

Memory: 16 bytes of hash and 8 bytes of group index per document, plus the ids of documents
that have duplicates. Two streaming passes over the input."""
from __future__ import annotations

from typing import Literal

import numpy as np
import xxhash

from pipeline.documents import write_marked_duplicates
from pipeline.stages.base import Stage, StageConfig


class ExactDedupConfig(StageConfig):
    hash: Literal["xxh3_128"] = "xxh3_128"
    # Compare texts case-insensitively (whitespace is already normalized by `normalize`).
    lowercase: bool = False


def text_hashes(texts: list[str], lowercase: bool) -> np.ndarray:
    """128-bit digests as an (n, 2) uint64 array."""
    digest = xxhash.xxh3_128_digest
    raw = b"".join(digest((t.lower() if lowercase else t).encode("utf-8")) for t in texts)
    return np.frombuffer(raw, dtype=">u8").astype(np.uint64).reshape(-1, 2)


class ExactDedup(Stage):
    name = "dedup_exact"
    summary = "exact duplicates by 128-bit text hash; first in input order kept"
    Config = ExactDedupConfig
    kind = "global"

    def run(self, inputs, output) -> dict:
        parts = [text_hashes(t["text"].to_pylist(), self.config.lowercase) for t in inputs.tables(output)]
        hashes = np.concatenate(parts) if parts else np.zeros((0, 2), np.uint64)
        keyed = np.ascontiguousarray(hashes).view([("hi", np.uint64), ("lo", np.uint64)]).ravel()
        _, first, inverse, counts = np.unique(keyed, return_index=True, return_inverse=True,
                                              return_counts=True)
        del keyed, hashes
        write_marked_duplicates(inputs.tables(), output, first[inverse], "exact_duplicate")
        sizes = counts[counts > 1]
        return {"duplicate_groups": int(len(sizes)), "largest_group": int(sizes.max()) if len(sizes) else 1,
                "hash": self.config.hash, "bytes_per_doc": 24}
