"""dedup_exact: a 128-bit hash of each document's (normalized) text; the first document of
each group in input order is kept, the others are removed with `duplicate_of`.

Map, reduce, map: each shard's hashes are computed by a task (work/hash-NAME.npy); the driver
finds the first row of each hash; each shard is then written by a task with its marks.
Memory on the driver: 16 bytes of hash and 8 bytes of group index per document, plus the ids
of documents that have duplicates (with `full_text_by`, 9 bytes more: the record's hash and
whether the document is a full text).

`full_text_by: pmid`: an abstract and the full text of one article are not two documents; the
abstract goes (`abstract_of_full_text`) before the near-duplicate pass."""
from __future__ import annotations

from typing import Literal

import numpy as np
import pyarrow.compute as pc
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
    # The column naming a record (`pmid`): a document without a `pmcid` (a MEDLINE abstract) whose
    # record has a full text in the run (a document with a `pmcid`: the JATS reader's) is removed
    # as `abstract_of_full_text`, `duplicate_of` the article. None: off.
    full_text_by: str | None = None


def text_hashes(texts: list[str], lowercase: bool) -> np.ndarray:
    """128-bit digests as an (n, 2) uint64 array."""
    digest = xxhash.xxh3_128_digest
    raw = b"".join(digest((t.lower() if lowercase else t).encode("utf-8")) for t in texts)
    return np.frombuffer(raw, dtype=">u8").astype(np.uint64).reshape(-1, 2)


# A document with a value here is a full text (the JATS reader's PMCID).
FULL_TEXT_COLUMN = "pmcid"


def record_hashes(values: list) -> np.ndarray:
    """64-bit hashes of record ids (0: none; a real id hashing to 0 is one in 2^64)."""
    digest = xxhash.xxh3_64_intdigest
    return np.fromiter((0 if v is None or v == "" else digest(str(v).encode("utf-8")) for v in values),
                       np.uint64, len(values))


def abstracts_of_full_texts(records: np.ndarray, full: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(rows of abstracts whose record has a full text, the row of that full text: the first
    one in input order)."""
    full_rows = np.flatnonzero(full & (records != 0))
    keys, first = np.unique(records[full_rows], return_index=True)
    abstract_rows = np.flatnonzero(~full & (records != 0))
    at = np.searchsorted(keys, records[abstract_rows])
    at = np.minimum(at, max(len(keys) - 1, 0))
    hit = (keys[at] == records[abstract_rows]) if len(keys) else np.zeros(len(abstract_rows), bool)
    return abstract_rows[hit], full_rows[first[at[hit]]]


class ExactDedup(GlobalStage):
    name = "dedup_exact"
    summary = ("exact duplicates by 128-bit text hash, first in input order kept; an abstract whose full text "
               "is in the run")
    Config = ExactDedupConfig
    @classmethod
    def source_problems(cls, config, sources: list[str]) -> list[str]:
        return priority_problems(config.priority, sources)

    engines = ("xxhash",)

    @shard_task
    def hash_shard(self, task) -> dict:
        from pipeline.shards import read_shard
        record = self.config.full_text_by
        columns = ["text"] + ([record, FULL_TEXT_COLUMN] if record else [])
        parts, records, full = [], [], []
        for t in read_shard(task.shard.path, task.batch_size, columns):
            parts.append(text_hashes(t["text"].to_pylist(), self.config.lowercase))
            if record:
                values = t[record].to_pylist() if record in t.column_names else [None] * t.num_rows
                records.append(record_hashes(values))
                full.append(pc.is_valid(t[FULL_TEXT_COLUMN]).to_numpy(zero_copy_only=False)
                            if FULL_TEXT_COLUMN in t.column_names else np.zeros(t.num_rows, bool))
        hashes = np.concatenate(parts) if parts else np.zeros((0, 2), np.uint64)
        save_npy(task.folder / "work" / f"hash-{task.shard.name}.npy", hashes)
        if record:
            save_npy(task.folder / "work" / f"record-{task.shard.name}.npy",
                     np.concatenate(records) if records else np.zeros(0, np.uint64))
            save_npy(task.folder / "work" / f"full-{task.shard.name}.npy",
                     np.concatenate(full) if full else np.zeros(0, bool))
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
        reasons = None
        extra = {}
        if self.config.full_text_by:
            records = np.concatenate([load_npy(work / f"record-{n}.npy") for n in inputs.names()] or
                                     [np.zeros(0, np.uint64)])
            full = np.concatenate([load_npy(work / f"full-{n}.npy") for n in inputs.names()] or [np.zeros(0, bool)])
            rows, articles = abstracts_of_full_texts(records, full)
            # An abstract that is already an exact copy of another document keeps that reason.
            own = rep_of_row[rows] == rows
            rows, articles = rows[own], articles[own]
            rep_of_row = rep_of_row.copy()
            rep_of_row[rows] = rep_of_row[articles]         # the article's surviving copy
            reasons = np.full(len(rep_of_row), None, object)
            reasons[rows] = "abstract_of_full_text"
            extra = {"full_text_by": self.config.full_text_by, "abstracts_of_full_texts": int(len(rows)),
                     "full_texts": int(full.sum())}
        mark_duplicates(self, inputs, rep_of_row, "exact_duplicate", reasons)
        work.rmtree()
        sizes = counts[counts > 1]
        return {"duplicate_groups": int(len(sizes)), "largest_group": int(sizes.max()) if len(sizes) else 1,
                "hash": self.config.hash, "bytes_per_doc": 33 if self.config.full_text_by else 24, **extra}
