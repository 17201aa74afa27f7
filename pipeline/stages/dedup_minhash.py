"""dedup_minhash: near-duplicate removal with datasketch-identical MinHash signatures and LSH.

Out of core, and every part but a small driver step on the executor's workers: pass 1 (a task
per shard) computes signatures batch by batch, writes them to a file on disk, and appends
each band's bucket key (with the row number) to one of `partitions` files chosen by the key's
top bits. Pass 2 (a task per PARTITIONS_PER_TASK partitions) loads one partition at a time,
sorts it, and turns each bucket into candidate pairs (first member, other member); candidates
are verified by estimated Jaccard >= threshold (reading only their signatures' rows from the
files). On the driver they become clusters, for many rows at once: `star`
(default) checks each document against its cluster's representative, the first document of
the cluster in input order; `components` merges connected components. Pass 3 (a task per
shard) streams the input again: each representative is kept, the others are removed with
`duplicate_of`. Stats count removed documents far (below threshold - 0.2) from their
representative, and the wall and driver CPU seconds and peak RSS of each pass.

Memory: about 12 bytes x bands / partitions per document for the largest partition, plus
the cluster labels (8 bytes per document) and the verified pairs; signatures (4 x num_perm
bytes per document) stay on disk, read a chunk of rows at a time."""
from __future__ import annotations

from collections import Counter
from typing import Literal

import numpy as np
from pydantic import Field

from pipeline.documents import by_priority, mark_duplicates, priority_problems
from pipeline.engines.band_partitions import (
    candidate_pairs,
    partition_spans,
    partitions_for,
    read_partitions,
    write_band_partitions,
)
from pipeline.engines.minhash import MinHasher, band_keys, lsh_params
from pipeline.runpath import as_run_path, load_npy, save_npy
from pipeline.stages.base import GlobalStage, StageConfig
from pipeline.tasks import peak_rss_mb, shard_task


class MinHashConfig(StageConfig):
    threshold: float = Field(default=0.8, gt=0.0, lt=1.0)
    num_perm: int = Field(default=128, ge=16, le=1024)
    ngram: int = Field(default=5, ge=1, le=32)
    seed: int = 1
    lowercase: bool = True
    hashfunc: Literal["xxh32", "sha1"] = "xxh32"
    # Weight of false negatives in datasketch's optimal_param (its own default is 0.5). 0.9
    # gives 14 bands x 9 rows at 0.8: 97.5% of pairs at Jaccard 0.85 become candidates
    # (0.5 gives 9 x 13 and only 69%); verification removes the extra candidates.
    false_negative_weight: float = Field(default=0.9, gt=0.0, lt=1.0)
    # Check each LSH candidate pair by estimated Jaccard before merging (fewer false merges),
    # with this margin below `threshold`: an estimate from 128 permutations has a standard
    # deviation of ~0.03, so verifying at the threshold itself would lose 6% of true 0.85 pairs.
    verify: bool = True
    verify_margin: float = Field(default=0.05, ge=0.0, lt=0.5)
    # Bucket files, at most (fewer for a small input: MIN_PARTITION_BYTES): the largest one
    # is what pass 2 holds in memory.
    partitions: int = Field(default=256, ge=1, le=1024)
    # How verified pairs become clusters. star: documents are taken in input order and each
    # joins the cluster of a candidate only if it is within the threshold (estimated Jaccard,
    # with verify_margin) of that cluster's representative, the document kept in its place;
    # otherwise it starts a cluster. components: connected components of the verified pairs;
    # chains merge, so a removed document can be far from the one kept (a chain of versions
    # each 0.9 from the previous ends at Jaccard 0.3 from the first).
    clustering: Literal["star", "components"] = "star"
    # A multi-source run: whose copy survives (docs/sources.md), sources in order; a source not
    # named comes after those named. None: the first in input order.
    priority: list[str] | None = None

    def hasher(self) -> MinHasher:
        return MinHasher(self.num_perm, self.seed, self.ngram, self.lowercase, self.hashfunc)

    def bands(self) -> tuple[int, int]:
        return lsh_params(self.threshold, self.num_perm, self.false_negative_weight)


class MinHashDedup(GlobalStage):
    name = "dedup_minhash"
    summary = "MinHash LSH near-duplicates (datasketch-identical signatures), out of core"
    Config = MinHashConfig
    @classmethod
    def source_problems(cls, config, sources: list[str]) -> list[str]:
        return priority_problems(config.priority, sources)

    engines = ("datasketch", "xxhash", "numpy", "scipy")

    @shard_task(phase="signatures")
    def signature_shard(self, task) -> dict:
        """Map: one shard's signatures (work/sig-NAME.npy) and band keys, by partition; returns
        where each partition starts in the shard's band file, so reduce tasks read no index."""
        from pipeline.shards import read_shard
        cfg = self.config
        bands, rows = cfg.bands()
        hasher = cfg.hasher()
        parts = [hasher.signatures(t["text"].to_pylist())
                 for t in read_shard(task.shard.path, task.batch_size, ["text"])]
        sigs = np.concatenate(parts) if parts else np.zeros((0, cfg.num_perm), np.uint32)
        work = task.folder / "work"
        save_npy(work / f"sig-{task.shard.name}.npy", sigs)
        index = write_band_partitions(work / f"bands-{task.shard.name}", band_keys(sigs, bands, rows), task.row0,
                                      task.params["partitions"])
        return {"rows": len(sigs), "partition_index": index.tolist(), "peak_rss_mb": peak_rss_mb()}

    @shard_task(phase="partitions")
    def partition_pairs(self, task) -> dict:
        """Reduce, per bucket partition of the task's range: candidate pairs (first member of a
        bucket, other member), verified by estimated Jaccard; written to work/pairs-P.npy."""
        cfg = self.config
        work = task.folder / "work"
        p = task.params
        sigs = ShardSignatures(work, p["names"], p["offsets"], cfg.num_perm)
        candidates = largest = 0
        try:
            for partition, pairs in read_partitions(work, p["names"], *p["partitions"], p["index"]):
                u, v = candidate_pairs(pairs)
                candidates += len(u)
                largest = max(largest, len(pairs))
                if cfg.verify and len(u):
                    keep = _estimated_jaccard(sigs, u, v) >= cfg.threshold - cfg.verify_margin
                    u, v = u[keep], v[keep]
                save_npy(work / f"pairs-{partition:04d}.npy", np.stack([u, v]))
        finally:
            sigs.close()
        return {"candidates": int(candidates), "largest": int(largest), "peak_rss_mb": peak_rss_mb()}

    def run(self, inputs, output) -> dict:
        import time
        phases, driver_cpu, peak_rss, t0, c0 = {}, {}, {}, time.perf_counter(), time.process_time()

        def phase(name, results=()):
            nonlocal t0, c0
            t, c = time.perf_counter(), time.process_time()
            phases[name], driver_cpu[name] = round(t - t0, 3), round(c - c0, 3)
            # High-water marks by the end of the pass: the driver's, and its tasks' processes'.
            peak_rss[name] = {"driver": peak_rss_mb(), "tasks": max((r["peak_rss_mb"] for r in results), default=None)}
            t0, c0 = t, c
        cfg = self.config
        bands, rows = cfg.bands()
        work = output.folder / "work"
        work.mkdir(exist_ok=True)
        n = sum(s.rows for s in inputs.shards)
        partitions = partitions_for(n, bands, cfg.partitions)
        signed = inputs.map(self.signature_shard, partitions=partitions)
        index = [r["partition_index"] for r in signed]
        phase("signatures", signed)
        names = inputs.names()
        offsets = inputs.row_offsets()
        # Each reduce task maps every shard's signatures once for all of its partitions.
        spans = partition_spans(partitions)
        results = inputs.map_tasks(self.partition_pairs, [{"partitions": span, "names": names, "offsets": offsets,
                                                              "index": index} for span in spans])
        phase("partitions", results)
        candidates = sum(r["candidates"] for r in results)
        largest = max((r["largest"] for r in results), default=0)
        found = [load_npy(work / f"pairs-{p:04d}.npy") for p in range(partitions)]
        u = np.concatenate([f[0] for f in found]) if found else np.zeros(0, np.int64)
        v = np.concatenate([f[1] for f in found]) if found else np.zeros(0, np.int64)
        del found
        inputs.phase("clustering")
        sigs = ShardSignatures(work, names, offsets, cfg.num_perm)
        # Each row's representative, and how far removed documents are from the document kept
        # in their place.
        if cfg.clustering == "star":
            rep_of_row, to_rep = star_clusters(sigs, n, u, v, cfg.threshold - cfg.verify_margin, with_similarity=True)
            removed_rows = np.flatnonzero(rep_of_row != np.arange(n))
            similarity = to_rep[removed_rows]
        else:
            labels, rep = component_clusters(n, u, v)
            rep_of_row = rep[labels]
            removed_rows = np.flatnonzero(rep_of_row != np.arange(n))
            similarity = _estimated_jaccard(sigs, removed_rows, rep_of_row[removed_rows])
        if cfg.priority:
            # Whose copy survives, by source: the kept document of each cluster chosen again.
            rep_of_row = by_priority(inputs, rep_of_row, cfg.priority)
            removed_rows = np.flatnonzero(rep_of_row != np.arange(n))
            similarity = _estimated_jaccard(sigs, removed_rows, rep_of_row[removed_rows])
        sigs.close()
        phase("clustering")
        mark_duplicates(self, inputs, rep_of_row, "near_duplicate")
        work.rmtree()
        phase("marks")
        sizes = np.bincount(rep_of_row, minlength=n) if n else np.zeros(0, np.int64)
        cluster_sizes = Counter(int(s) for s in sizes if s > 1)
        far = round(cfg.threshold - 0.2, 6)
        return {"bands": bands, "rows": rows, "num_perm": cfg.num_perm, "threshold": cfg.threshold,
                "clustering": cfg.clustering, "partitions": partitions,
                "candidate_pairs": int(candidates), "clusters": int(sum(cluster_sizes.values())),
                "cluster_sizes": {str(k): v for k, v in sorted(cluster_sizes.items())},
                # Removed documents whose estimated Jaccard to their representative is below
                # threshold - 0.2: merged by a chain, not near duplicates of what was kept.
                "removed_far_from_representative": {"below": far, "documents": int((similarity < far).sum())},
                "largest_partition_pairs": int(largest),
                # Wall seconds of each part (signatures, partitions and marks are shard tasks
                # on the executor; clustering is the driver's), and the driver process's own
                # CPU seconds in each (with worker processes, the part no worker shares).
                "phase_seconds": phases, "driver_cpu_seconds": driver_cpu, "peak_rss_mb": peak_rss}

    def manifest_fields(self, stats: dict) -> dict:
        return {"cluster_sizes": stats["cluster_sizes"]} if "cluster_sizes" in stats else {}

    def card_section(self, stats: dict, run):
        if "cluster_sizes" not in stats:
            return None
        from pipeline.card import number
        sizes = ", ".join(f"{number(n)} of size {k}"
                          for k, n in sorted(stats["cluster_sizes"].items(), key=lambda kv: int(kv[0])))
        return "Deduplication", (
            f"- `{stats['stage']}`: MinHash LSH, {stats.get('num_perm')} permutations, {stats.get('bands')} bands x "
            f"{stats.get('rows')} rows, Jaccard threshold {stats.get('threshold')}: candidate pairs "
            f"{number(stats.get('candidate_pairs', 0))}, clusters {number(stats.get('clusters', 0))} "
            f"({sizes or 'none'}); near duplicates removed: {number(sum(stats['removed'].values()))}.")

    def report_section(self, stats: dict, run):
        from pipeline.sections import Section, table
        sizes = stats.get("cluster_sizes", {})
        body = (f"<p>{stats.get('bands')} bands x {stats.get('rows')} rows, threshold {stats.get('threshold')}, "
                f"{stats.get('candidate_pairs', 0):,} candidate pairs.</p>")
        body += table(["cluster size", "clusters"], sorted(sizes.items(), key=lambda kv: int(kv[0]))) if sizes \
            else "<p>No near-duplicate clusters.</p>"
        return Section("Near-duplicate clusters", body, figures={"cluster_sizes": sizes})


class ShardSignatures:
    """Signatures by global row, from the shards' work/sig-NAME.npy files. Local files are read
    row by row (os.pread, a few hundred files kept open), not memory-mapped: on this kind of
    kernel a page fault maps a large folio of the file around the row (megabytes), so a few
    thousand rows read from mappings held most of the files in RSS. Files elsewhere (an
    object store) are read whole, a few kept at a time. `release()` drops those, `close()`
    closes the files."""

    OPEN_FILES = 256

    def __init__(self, work, names: list[str], offsets: list[int], num_perm: int):
        self.work = as_run_path(work)
        self.names = list(names)
        self.offsets = np.asarray(offsets, np.int64)
        self.num_perm = num_perm
        self._whole: dict[int, np.ndarray] = {}
        self._files: dict[int, tuple[int, int]] = {}        # shard -> (fd, data offset)

    def _file(self, s: int) -> tuple[int, int]:
        import os
        if s not in self._files:
            if len(self._files) >= self.OPEN_FILES:
                os.close(self._files.pop(next(iter(self._files)))[0])
            path = (self.work / f"sig-{self.names[s]}.npy").local
            self._files[s] = (os.open(path, os.O_RDONLY), _npy_data_offset(path, self.num_perm))
        return self._files[s]

    def _rows(self, s: int, rows: np.ndarray) -> np.ndarray:
        """Rows (shard-local, sorted, distinct) of shard s."""
        if self.work.local is None:
            if s not in self._whole:
                if len(self._whole) >= 64:
                    self._whole.pop(next(iter(self._whole)))
                self._whole[s] = load_npy(self.work / f"sig-{self.names[s]}.npy")
            return self._whole[s][rows]
        import os
        fd, start = self._file(s)
        size = 4 * self.num_perm
        data = b"".join([os.pread(fd, size, start + r * size) for r in rows.tolist()])
        return np.frombuffer(data, np.uint32).reshape(len(rows), self.num_perm)

    def __getitem__(self, rows) -> np.ndarray:
        rows = np.atleast_1d(np.asarray(rows, np.int64))
        distinct, where = np.unique(rows, return_inverse=True)
        block = np.empty((len(distinct), self.num_perm), np.uint32)
        shard = np.searchsorted(self.offsets, distinct, side="right") - 1
        bounds = np.flatnonzero(np.diff(shard, prepend=-1, append=len(self.offsets)))
        for lo, hi in zip(bounds[:-1].tolist(), bounds[1:].tolist()):
            s = int(shard[lo])
            block[lo:hi] = self._rows(s, distinct[lo:hi] - self.offsets[s])
        return block[where]

    def release(self) -> None:
        self._whole.clear()

    def close(self) -> None:
        import os
        self._whole.clear()
        for fd, _ in self._files.values():
            os.close(fd)
        self._files.clear()


def _npy_data_offset(path, num_perm: int) -> int:
    """Where the rows start in a (rows, num_perm) uint32 .npy file."""
    with open(path, "rb") as f:
        major, _ = np.lib.format.read_magic(f)
        read_header = np.lib.format.read_array_header_1_0 if major == 1 else np.lib.format.read_array_header_2_0
        shape, fortran, dtype = read_header(f)
        if dtype != np.dtype("<u4") or fortran or len(shape) != 2 or shape[1] != num_perm:
            raise ValueError(f"{path}: not a ({num_perm}-column) uint32 signature file")
        return f.tell()


def _estimated_jaccard(sigs: ShardSignatures, u: np.ndarray, v: np.ndarray, chunk: int = 4096) -> np.ndarray:
    """Fraction of equal signature values per pair, a chunk of pairs at a time (4 MB of rows),
    so over all candidates RSS stays bounded."""
    out = np.empty(len(u))
    for i in range(0, len(u), chunk):
        out[i:i + chunk] = (sigs[u[i:i + chunk]] == sigs[v[i:i + chunk]]).mean(axis=1)
        sigs.release()
    return out


def star_clusters(sigs: ShardSignatures, n: int, u: np.ndarray, v: np.ndarray, min_similarity: float,
                  with_similarity: bool = False):
    """Each row's representative, star-shaped: rows in input order; a row with earlier
    candidates joins the representative of one of them (the most similar, the first such in
    row order on a tie) if its estimated Jaccard to that representative reaches
    min_similarity, else it represents itself. So a removed row is always within the
    threshold of the row kept for it, never merged through a chain.

    Computed for many rows at once, not row by row: a round decides rows from the
    representatives their candidates have (each candidate pair is (earlier, later)); the next
    round decides again the rows with a candidate whose representative changed, until none
    did. A row's choice depends only on earlier rows, so the rounds settle on the row-by-row
    result (after as many rounds as the longest chain of rows that depend on each other, a
    few); only pairs whose candidate changed representative are compared again.
    with_similarity: also each row's estimated Jaccard to its representative (1 for itself)."""
    rep = np.arange(n)
    to_rep = np.ones(n)
    if not len(u):
        return (rep, to_rep) if with_similarity else rep
    # Each (earlier, later) pair once, in order of the later row.
    key = np.unique(v.astype(np.int64) * n + u)
    u, v = key % n, key // n
    compared = np.full(len(u), -1, np.int64)          # the representative each similarity is for
    similarity = np.zeros(len(u))
    todo = np.arange(len(u))                            # the pairs of the rows to decide
    while len(todo):
        pu, pv = u[todo], v[todo]
        candidate = rep[pu]
        stale = np.flatnonzero(candidate != compared[todo])
        similarity[todo[stale]] = _estimated_jaccard(sigs, candidate[stale], pv[stale])
        compared[todo[stale]] = candidate[stale]
        # Per row: the most similar candidate representative, the smallest on a tie.
        sim = similarity[todo]
        order = np.lexsort((candidate, -sim, pv))
        rows = np.unique(pv)
        best = order[np.searchsorted(pv[order], rows)]
        joins = sim[best] >= min_similarity
        chosen = np.where(joins, candidate[best], rows)
        changed = np.zeros(n, bool)
        changed[rows[rep[rows] != chosen]] = True
        rep[rows] = chosen
        to_rep[rows] = np.where(joins, sim[best], 1.0)
        # Next: the rows with a candidate that changed representative.
        again = np.zeros(n, bool)
        again[v[changed[u]]] = True
        todo = np.flatnonzero(again[v])
    return (rep, to_rep) if with_similarity else rep


def component_clusters(n: int, u: np.ndarray, v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Connected components of the candidate graph: each row's component label, and each
    component's representative (its smallest row, i.e. first in input order)."""
    if n == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import connected_components

    graph = coo_matrix((np.ones(len(u), np.int8), (u, v)), shape=(n, n))
    _, labels = connected_components(graph, directed=False)
    rep = np.full(labels.max() + 1, n, np.int64)
    np.minimum.at(rep, labels, np.arange(n))
    return labels, rep
