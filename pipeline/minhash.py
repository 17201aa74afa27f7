"""MinHash signatures for a whole batch at once, identical to datasketch's.

datasketch 2.x ("affine32" scheme): each shingle's 32-bit hash is pre-mixed with the
MurmurHash3 finalizer, then permutation k maps it to a_k * h + b_k in uint32 (wrapping); the
signature is the minimum per permutation. a, b come from numpy's RandomState(seed) exactly as
datasketch draws them, so `datasketch.MinHash(num_perm, seed, hashfunc=...)` fed the same
shingles (UTF-8 bytes) gives the same hashvalues. tests/test_minhash.py proves it."""
from __future__ import annotations

import hashlib
import struct
from typing import Literal

import numpy as np
import xxhash

# Documents per permutation-and-min chunk: the (shingles x num_perm) block stays cache-sized.
CHUNK_DOCS = 16
EMPTY = np.uint32(0xFFFFFFFF)


def sha1_hash32(data: bytes) -> int:
    """datasketch.hashfunc.sha1_hash32."""
    return struct.unpack("<I", hashlib.sha1(data).digest()[:4])[0]


HASHFUNCS = {"xxh32": xxhash.xxh32_intdigest, "sha1": sha1_hash32}


def permutations(num_perm: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """The (a, b) datasketch.MinHash draws for the affine32 scheme."""
    gen = np.random.RandomState(seed)
    a = gen.randint(0, 1 << 31, num_perm, dtype=np.uint32) * np.uint32(2) + np.uint32(1)
    b = gen.randint(0, 1 << 32, num_perm, dtype=np.uint32)
    return a, b


def fmix32(h: np.ndarray) -> np.ndarray:
    h = h ^ (h >> np.uint32(16))
    h = h * np.uint32(0x85EBCA6B)
    h = h ^ (h >> np.uint32(13))
    h = h * np.uint32(0xC2B2AE35)
    return h ^ (h >> np.uint32(16))


def shingle_bytes(text: str, n: int, lowercase: bool = True) -> list[bytes]:
    """Word n-grams (words split on ASCII whitespace) joined by single spaces, as UTF-8 bytes;
    a text shorter than n words is one shingle."""
    words = (text.lower() if lowercase else text).encode("utf-8").split()
    if len(words) <= n:
        return [b" ".join(words)] if words else []
    join = b" ".join
    return [join(words[i:i + n]) for i in range(len(words) - n + 1)]


def shingles(text: str, n: int, lowercase: bool = True) -> list[str]:
    """The shingles as text: what to feed datasketch (`m.update(s.encode("utf-8"))`)."""
    return [s.decode("utf-8") for s in shingle_bytes(text, n, lowercase)]


class MinHasher:
    def __init__(self, num_perm: int = 128, seed: int = 1, ngram: int = 5, lowercase: bool = True,
                 hashfunc: Literal["xxh32", "sha1"] = "xxh32"):
        self.num_perm, self.ngram, self.lowercase = num_perm, ngram, lowercase
        self.a, self.b = permutations(num_perm, seed)
        self.hash = HASHFUNCS[hashfunc]

    def shingle_hashes(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """32-bit hashes of all shingles of the batch, and each document's shingle count."""
        h, n, low = self.hash, self.ngram, self.lowercase
        counts = np.zeros(len(texts), np.int64)
        parts = []
        for i, text in enumerate(texts):
            sh = shingle_bytes(text, n, low)
            counts[i] = len(sh)
            parts.append(np.fromiter(map(h, sh), np.uint32, len(sh)))
        return (np.concatenate(parts) if parts else np.zeros(0, np.uint32)), counts

    def signatures(self, texts: list[str]) -> np.ndarray:
        """(len(texts), num_perm) uint32 signatures."""
        hashes, counts = self.shingle_hashes(texts)
        return self.signatures_from_hashes(hashes, counts)

    def signatures_from_hashes(self, hashes: np.ndarray, counts: np.ndarray) -> np.ndarray:
        n = len(counts)
        out = np.full((n, self.num_perm), EMPTY, np.uint32)
        mixed = fmix32(hashes.astype(np.uint32))
        ends = np.cumsum(counts)
        starts = ends - counts
        a, b = self.a[None, :], self.b[None, :]
        for c0 in range(0, n, CHUNK_DOCS):
            c1 = min(n, c0 + CHUNK_DOCS)
            lo, hi = starts[c0], ends[c1 - 1]
            if hi == lo:
                continue
            block = mixed[lo:hi, None] * a + b          # wraps in uint32, as datasketch does
            seg = counts[c0:c1]
            nonempty = np.flatnonzero(seg)
            offsets = (starts[c0:c1] - lo)[nonempty]
            out[c0 + nonempty] = np.minimum.reduceat(block, offsets, axis=0)
        return out


def lsh_params(threshold: float, num_perm: int, false_negative_weight: float = 0.5) -> tuple[int, int]:
    """(bands, rows) from datasketch's own optimizer, as MinHashLSH(weights=...) computes them."""
    from datasketch.lsh import _optimal_param
    return _optimal_param(threshold, num_perm, 1.0 - false_negative_weight, false_negative_weight)


_MIX = np.uint64(0x9E3779B97F4A7C15)


def band_keys(sigs: np.ndarray, bands: int, rows: int) -> np.ndarray:
    """(n, bands) uint64 bucket keys: a hash of each band's rows, salted by the band index, so
    one key space holds all bands."""
    n = len(sigs)
    keys = np.empty((n, bands), np.uint64)
    with np.errstate(over="ignore"):
        for j in range(bands):
            h = np.full(n, np.uint64(j + 1) * _MIX, np.uint64)
            for r in range(rows):
                h = (h ^ sigs[:, j * rows + r].astype(np.uint64)) * _MIX
                h ^= h >> np.uint64(29)
            keys[:, j] = h
    return keys
