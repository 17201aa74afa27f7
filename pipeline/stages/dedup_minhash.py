"""dedup_minhash: near-duplicate removal with datasketch-identical MinHash signatures and LSH.

Out of core: pass 1 computes signatures batch by batch, writes them to a file on disk, and
appends each band's bucket key (with the row number) to one of `partitions` files chosen by
the key's top bits. Pass 2 loads one partition at a time, sorts it, and turns each bucket
into candidate pairs (first member, other member); candidates are verified by estimated
Jaccard >= threshold (reading only their signatures from the memory-mapped file) and become
clusters: `star` (default) checks each document against its cluster's representative, the
first document of the cluster in input order; `components` merges connected components.
Pass 3 streams the input again: each representative is kept, the others are removed with
`duplicate_of`. Stats count removed documents far (below threshold - 0.2) from their
representative.

Memory: about 12 bytes x bands / partitions per document for the largest partition, plus
the cluster labels (8 bytes per document) and the verified pairs; signatures (4 x num_perm
bytes per document) stay on disk and are mapped one verification chunk at a time."""
from __future__ import annotations

import shutil
from collections import Counter
from typing import Literal

import numpy as np
from pydantic import Field

from pipeline.documents import write_marked_duplicates
from pipeline.minhash import MinHasher, band_keys, lsh_params
from pipeline.stages.base import Stage, StageConfig

PAIR = np.dtype([("key", "<u8"), ("row", "<u4")])


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
    # Bucket files: the largest one is what pass 2 holds in memory.
    partitions: int = Field(default=256, ge=1, le=1024)
    # How verified pairs become clusters. star: documents are taken in input order and each
    # joins the cluster of a candidate only if it is within the threshold (estimated Jaccard,
    # with verify_margin) of that cluster's representative, the document kept in its place;
    # otherwise it starts a cluster. components: connected components of the verified pairs;
    # chains merge, so a removed document can be far from the one kept (a chain of versions
    # each 0.9 from the previous ends at Jaccard 0.3 from the first).
    clustering: Literal["star", "components"] = "star"

    def hasher(self) -> MinHasher:
        return MinHasher(self.num_perm, self.seed, self.ngram, self.lowercase, self.hashfunc)

    def bands(self) -> tuple[int, int]:
        return lsh_params(self.threshold, self.num_perm, self.false_negative_weight)


class MinHashDedup(Stage):
    name = "dedup_minhash"
    summary = "MinHash LSH near-duplicates (datasketch-identical signatures), out of core"
    Config = MinHashConfig
    kind = "global"

    def run(self, inputs, output) -> dict:
        cfg = self.config
        bands, rows = cfg.bands()
        hasher = cfg.hasher()
        work = output.folder / "work"
        work.mkdir()
        parts = [open(work / f"bucket-{p:04d}.bin", "wb") for p in range(cfg.partitions)]
        shift = np.uint64(64 - max(1, int(np.ceil(np.log2(cfg.partitions))))) if cfg.partitions > 1 else None
        n = 0
        with open(work / "signatures.bin", "wb") as sig_file:
            for table in inputs.tables(output):
                sigs = hasher.signatures(table["text"].to_pylist())
                sig_file.write(sigs.tobytes())
                keys = band_keys(sigs, bands, rows)
                pairs = np.empty(keys.size, PAIR)
                pairs["key"] = keys.ravel()
                pairs["row"] = np.repeat(np.arange(n, n + len(sigs), dtype=np.uint32), bands)
                part_of = (pairs["key"] >> shift).astype(np.int64) % cfg.partitions if shift is not None \
                    else np.zeros(len(pairs), np.int64)
                order = np.argsort(part_of, kind="stable")
                bounds = np.searchsorted(part_of[order], np.arange(cfg.partitions + 1))
                for p in range(cfg.partitions):
                    chunk = pairs[order[bounds[p]:bounds[p + 1]]]
                    if len(chunk):
                        parts[p].write(chunk.tobytes())
                n += len(sigs)
        for f in parts:
            f.close()

        sig_path = work / "signatures.bin"
        src, dst, candidates, largest = [], [], 0, 0
        for p in range(cfg.partitions):
            pairs = np.fromfile(work / f"bucket-{p:04d}.bin", PAIR)
            largest = max(largest, len(pairs))
            if len(pairs) < 2:
                continue
            pairs = pairs[np.argsort(pairs["key"], kind="stable")]
            same = pairs["key"][1:] == pairs["key"][:-1]
            run_start = np.flatnonzero(np.concatenate([[True], ~same]))
            run_id = np.cumsum(np.concatenate([[True], ~same])) - 1
            first_row = pairs["row"][run_start][run_id]          # first member of each row's bucket
            other = pairs["row"] != first_row
            u, v = first_row[other].astype(np.int64), pairs["row"][other].astype(np.int64)
            candidates += len(u)
            if cfg.verify and len(u):
                keep = _estimated_jaccard(sig_path, n, cfg.num_perm, u, v) >= cfg.threshold - cfg.verify_margin
                u, v = u[keep], v[keep]
            src.append(u)
            dst.append(v)
        u = np.concatenate(src) if src else np.zeros(0, np.int64)
        v = np.concatenate(dst) if dst else np.zeros(0, np.int64)
        if cfg.clustering == "star":
            rep_of_row = _star_clusters(sig_path, n, cfg.num_perm, u, v, cfg.threshold - cfg.verify_margin)
        else:
            labels, rep = _clusters(n, u, v)
            rep_of_row = rep[labels]
        # How far removed documents are from the document kept in their place.
        removed_rows = np.flatnonzero(rep_of_row != np.arange(n))
        similarity = _estimated_jaccard(sig_path, n, cfg.num_perm, removed_rows, rep_of_row[removed_rows])
        shutil.rmtree(work)

        write_marked_duplicates(inputs.tables(), output, rep_of_row, "near_duplicate")
        sizes = np.bincount(rep_of_row, minlength=n) if n else np.zeros(0, np.int64)
        cluster_sizes = Counter(int(s) for s in sizes if s > 1)
        far = round(cfg.threshold - 0.2, 6)
        return {"bands": bands, "rows": rows, "num_perm": cfg.num_perm, "threshold": cfg.threshold,
                "clustering": cfg.clustering,
                "candidate_pairs": int(candidates), "clusters": int(sum(cluster_sizes.values())),
                "cluster_sizes": {str(k): v for k, v in sorted(cluster_sizes.items())},
                # Removed documents whose estimated Jaccard to their representative is below
                # threshold - 0.2: merged by a chain, not near duplicates of what was kept.
                "removed_far_from_representative": {"below": far, "documents": int((similarity < far).sum())},
                "largest_partition_pairs": int(largest)}


def _estimated_jaccard(path, n: int, num_perm: int, u: np.ndarray, v: np.ndarray, chunk: int = 4096) -> np.ndarray:
    """Fraction of equal signature values per pair. The signature file is mapped per chunk and
    unmapped after it: pages a mapping touched count in RSS, and over all candidates they would
    cover most of the file (4 x num_perm bytes per document)."""
    out = np.empty(len(u))
    for i in range(0, len(u), chunk):
        signatures = np.memmap(path, np.uint32, "r", shape=(n, num_perm))
        a = np.array(signatures[u[i:i + chunk]])
        b = np.array(signatures[v[i:i + chunk]])
        del signatures
        out[i:i + chunk] = (a == b).mean(axis=1)
    return out


def _star_clusters(path, n: int, num_perm: int, u: np.ndarray, v: np.ndarray, min_similarity: float) -> np.ndarray:
    """Each row's representative, star-shaped: rows in input order; a row with earlier
    candidates joins the representative of one of them (the most similar) if its estimated
    Jaccard to that representative reaches min_similarity, else it represents itself. So a
    removed row is always within the threshold of the row kept for it, never merged through a
    chain. Only rows with candidates are visited (each candidate pair is (earlier, later))."""
    rep = np.arange(n)
    if not len(u):
        return rep
    order = np.lexsort((u, v))
    u, v = u[order], v[order]
    starts = np.flatnonzero(np.concatenate([[True], v[1:] != v[:-1]]))
    ends = np.append(starts[1:], len(v))
    # One mapping for the loop: it reads only rows that have candidates and their representatives.
    signatures = np.memmap(path, np.uint32, "r", shape=(n, num_perm))
    for s, e in zip(starts.tolist(), ends.tolist()):
        row = int(v[s])
        reps = np.unique(rep[u[s:e]])
        similarity = (signatures[reps] == signatures[row]).mean(axis=1)
        best = int(np.argmax(similarity))
        if similarity[best] >= min_similarity:
            rep[row] = reps[best]
    del signatures
    return rep


def _clusters(n: int, u: np.ndarray, v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
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


class SplitLeakChecker:
    """After the split: how many validation documents share an LSH bucket with a train
    document (same MinHash settings as dedup_minhash). Holds 9 bytes per document and band."""

    def __init__(self, config: MinHashConfig, ctx):
        self.hasher = config.hasher()
        self.bands, self.rows = config.bands()
        self.keys: list[np.ndarray] = []
        self.is_val: list[np.ndarray] = []

    def add(self, texts: list[str], is_val: np.ndarray) -> None:
        self.keys.append(band_keys(self.hasher.signatures(texts), self.bands, self.rows))
        self.is_val.append(np.asarray(is_val, bool))

    def count_validation_near_train(self) -> int:
        if not self.keys:
            return 0
        keys = np.concatenate(self.keys)
        is_val = np.concatenate(self.is_val)
        n = len(is_val)
        rows = np.repeat(np.arange(n), self.bands)
        flat = keys.ravel()
        order = np.argsort(flat, kind="stable")
        fk, fr = flat[order], rows[order]
        starts = np.flatnonzero(np.concatenate([[True], fk[1:] != fk[:-1]]))
        run_id = np.cumsum(np.concatenate([[True], fk[1:] != fk[:-1]])) - 1
        has_train = np.zeros(len(starts), bool)
        np.logical_or.at(has_train, run_id, ~is_val[fr])
        leaked = np.zeros(n, bool)
        leaked[fr[is_val[fr] & has_train[run_id]]] = True
        return int(leaked.sum())
