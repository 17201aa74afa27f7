"""Band-key records on disk, grouped into bucket partitions: what MinHash deduplication and the
split's near-duplicate leak check both cut and reduce. A shard's (band key, global row) records
go to one file grouped by partition (the key's top bits); a reduce task reads one partition of
every shard at a time and finds the rows that share a bucket."""
from __future__ import annotations

import numpy as np

from pipeline.runpath import RunPath, load_npy, save_npy

PAIR = np.dtype([("key", "<u8"), ("row", "<u4")])
# Bucket partitions per reduce task (at most).
PARTITIONS_PER_TASK = 16
# A partition's records, at least, before the input is cut into more partitions (up to the
# config's `partitions`): a small input gets a few partitions, not 256 files of a few records
# each and 16 tasks whose start-up is most of their time. The default 256 are all used from
# about 1.6 M documents (14 bands x 12 bytes a record).
MIN_PARTITION_BYTES = 1 << 20
# A reduce task reads consecutive partitions together, up to this many bytes of records.
READ_BYTES = 32 << 20


def partitions_for(docs: int, bands: int, most: int) -> int:
    """Bucket partitions for `docs` documents: one per MIN_PARTITION_BYTES of band records, at
    least 1 and at most `most` (the config's). Which partition a bucket falls in never changes
    the pairs found (tests/test_minhash.py)."""
    return int(min(most, max(1, -(-docs * bands * PAIR.itemsize // MIN_PARTITION_BYTES))))


def partition_spans(partitions: int) -> list[tuple[int, int]]:
    """[first, end) partitions of each reduce task: at most PARTITIONS_PER_TASK each, as even
    as can be."""
    n_tasks = -(-partitions // PARTITIONS_PER_TASK)
    cuts = [partitions * k // n_tasks for k in range(n_tasks + 1)]
    return list(zip(cuts[:-1], cuts[1:]))


def write_band_partitions(stem: RunPath, keys: np.ndarray, row0: int, partitions: int) -> np.ndarray:
    """A shard's (band key, global row) records, grouped by bucket partition (the key's top
    bits), in row order inside each: STEM.bin, and STEM.idx.npy with each partition's start
    (returned too)."""
    n, bands = keys.shape if keys.ndim == 2 else (0, 0)
    pairs = np.empty(keys.size, PAIR)
    pairs["key"] = keys.ravel()
    pairs["row"] = np.repeat(np.arange(row0, row0 + n, dtype=np.uint32), bands)
    if partitions > 1:
        shift = np.uint64(64 - max(1, int(np.ceil(np.log2(partitions)))))
        part_of = (pairs["key"] >> shift).astype(np.int64) % partitions
    else:
        part_of = np.zeros(len(pairs), np.int64)
    order = np.argsort(part_of, kind="stable")
    stem.with_name(stem.name + ".bin").write_bytes(pairs[order].tobytes())
    index = np.searchsorted(part_of[order], np.arange(partitions + 1))
    save_npy(stem.with_name(stem.name + ".idx.npy"), index)
    return index


def read_partitions(work: RunPath, names: list[str], first: int, end: int, index: list | None = None):
    """Partitions [first, end), each as (partition, its records from every shard in shard (=
    row) order). Consecutive partitions are read together, up to READ_BYTES of records: one
    range read per shard and group, not per shard and partition (at 1 M documents, 2,000
    shards times 160 partitions of ~500 bytes each). `index`: each shard's partition starts,
    as write_band_partitions returned them (else read)."""
    if index is None:
        index = [load_npy(work / f"bands-{name}.idx.npy") for name in names]
    starts = np.asarray(index, np.int64).reshape(len(names), -1)
    sizes = (starts[:, first + 1:end + 1] - starts[:, first:end]).sum(axis=0) * PAIR.itemsize
    p = first
    while p < end:
        q, total = p + 1, sizes[p - first]
        while q < end and total + sizes[q - first] <= READ_BYTES:
            total += sizes[q - first]
            q += 1
        read = []
        for k, name in enumerate(names):
            lo, hi = int(starts[k, p]), int(starts[k, q])
            if hi > lo:
                with (work / f"bands-{name}.bin").open_input() as f:
                    f.seek(lo * PAIR.itemsize)
                    read.append((k, lo, np.frombuffer(f.read((hi - lo) * PAIR.itemsize), PAIR)))
        for part in range(p, q):
            pieces = [records[starts[k, part] - lo:starts[k, part + 1] - lo] for k, lo, records in read]
            pieces = [piece for piece in pieces if len(piece)]
            yield part, np.concatenate(pieces) if pieces else np.zeros(0, PAIR)
        p = q


def candidate_pairs(pairs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(first member of a bucket, other member) for every bucket of a partition's records."""
    if len(pairs) < 2:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    pairs = pairs[np.argsort(pairs["key"], kind="stable")]
    new = np.concatenate([[True], pairs["key"][1:] != pairs["key"][:-1]])
    first_row = pairs["row"][np.flatnonzero(new)][np.cumsum(new) - 1]     # first member of each row's bucket
    other = pairs["row"] != first_row
    return first_row[other].astype(np.int64), pairs["row"][other].astype(np.int64)
