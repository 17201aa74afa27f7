"""dedup_exact: a 128-bit hash of each document's (normalized) text; the first document of
each group in input order is kept, the others are removed with `duplicate_of`.

Memory: 16 bytes of hash and 8 bytes of group index per document, plus the ids of documents
that have duplicates. Two streaming passes over the input."""
from __future__ import annotations

from typing import Literal

import numpy as np
import pyarrow as pa
import xxhash

from pipeline.documents import DUPLICATE_OF, REASON
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
        n = len(hashes)
        keyed = np.ascontiguousarray(hashes).view([("hi", np.uint64), ("lo", np.uint64)]).ravel()
        _, first, inverse, counts = np.unique(keyed, return_index=True, return_inverse=True,
                                              return_counts=True)
        del keyed, hashes
        first_of_row = first[inverse]
        has_dups = counts[inverse] > 1
        ids_of_first: dict[int, str] = {}
        row0 = 0
        for table in inputs.tables():
            m = table.num_rows
            rows = np.arange(row0, row0 + m)
            firsts = first_of_row[row0:row0 + m]
            is_dup = firsts != rows
            ids = table["id"]
            for i in np.flatnonzero(has_dups[row0:row0 + m] & ~is_dup):
                ids_of_first[row0 + int(i)] = ids[int(i)].as_py()
            dup_of = [ids_of_first[int(f)] if d else None for f, d in zip(firsts, is_dup)] \
                if is_dup.any() else None
            if dup_of is not None:
                reason = pa.array(np.where(is_dup, "exact_duplicate", None), pa.string())
                table = table.append_column(REASON, reason).append_column(DUPLICATE_OF, pa.array(dup_of, pa.string()))
            output.write(table)
            row0 += m
        sizes = counts[counts > 1]
        return {"duplicate_groups": int(len(sizes)), "largest_group": int(sizes.max()) if len(sizes) else 1,
                "hash": self.config.hash, "bytes_per_doc": 24}
