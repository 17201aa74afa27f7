"""dedup_exact: a 128-bit hash of each document's (normalized) text; the first document of
each group in input order is kept, the others are removed with `duplicate_of`.

Map, reduce, map: each shard's hashes are computed by a task (work/hash-NAME.npy); the driver
finds the first row of each hash; each shard is then written by a task with its marks.
Memory on the driver: 16 bytes of hash and 8 bytes of group index per document, plus the ids
of documents that have duplicates."""
from __future__ import annotations

from typing import Literal

import numpy as np
import xxhash

from pipeline.documents import by_priority, mark_duplicates, priority_problems
from pipeline.runpath import load_npy, save_npy
from pipeline.stages.base import GlobalStage, StageConfig
from pipeline.tasks import shard_task


class ExactDedupConfig(StageConfig):
    hash: Literal["xxh3_128"] = "xxh3_128"
    # Compare texts case-insensitively (whitespace is already normalized by `normalize`).
    lowercase: bool = False
    # A multi-source run: whose copy survives (docs/sources.md), sources in order; a source not
    # named comes after those named. None: the first in input order.
    priority: list[str] | None = None


def text_hashes(texts: list[str], lowercase: bool) -> np.ndarray:
    """128-bit digests as an (n, 2) uint64 array."""
    digest = xxhash.xxh3_128_digest
    raw = b"".join(digest((t.lower() if lowercase else t).encode("utf-8")) for t in texts)
    return np.frombuffer(raw, dtype=">u8").astype(np.uint64).reshape(-1, 2)


class ExactDedup(GlobalStage):
    name = "dedup_exact"
    summary = "exact duplicates by 128-bit text hash; first in input order kept"
    Config = ExactDedupConfig
    @classmethod
    def source_problems(cls, config, sources: list[str]) -> list[str]:
        return priority_problems(config.priority, sources)

    engines = ("xxhash",)

    @shard_task
    def hash_shard(self, task) -> dict:
        from pipeline.shards import read_shard
        parts = [text_hashes(t["text"].to_pylist(), self.config.lowercase)
                 for t in read_shard(task.shard.path, task.batch_size, ["text"])]
        hashes = np.concatenate(parts) if parts else np.zeros((0, 2), np.uint64)
        save_npy(task.folder / "work" / f"hash-{task.shard.name}.npy", hashes)
        return {"rows": len(hashes)}

    def card_section(self, stats: dict, run):
        if "duplicate_groups" not in stats:
            return None
        from pipeline.card import number
        return "Deduplication", (
            f"- `{stats['stage']}`: groups of identical texts ({stats.get('hash', 'hash')}): "
            f"{number(stats['duplicate_groups'])}, the largest of {number(stats.get('largest_group', 0))}; the first "
            f"of each group kept, copies removed: {number(sum(stats['removed'].values()))}.")

    def run(self, inputs, output) -> dict:
        work = output.folder / "work"
        work.mkdir(exist_ok=True)
        inputs.map(self.hash_shard)
        parts = [load_npy(work / f"hash-{name}.npy") for name in inputs.names()]
        hashes = np.concatenate(parts) if parts else np.zeros((0, 2), np.uint64)
        keyed = np.ascontiguousarray(hashes).view([("hi", np.uint64), ("lo", np.uint64)]).ravel()
        _, first, inverse, counts = np.unique(keyed, return_index=True, return_inverse=True,
                                              return_counts=True)
        del keyed, hashes, parts
        rep_of_row = by_priority(inputs, first[inverse].astype(np.int64), self.config.priority)
        mark_duplicates(self, inputs, rep_of_row, "exact_duplicate")
        work.rmtree()
        sizes = counts[counts > 1]
        return {"duplicate_groups": int(len(sizes)), "largest_group": int(sizes.max()) if len(sizes) else 1,
                "hash": self.config.hash, "bytes_per_doc": 24}
