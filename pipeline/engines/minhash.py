"""MinHash signatures for a whole batch at once, identical to datasketch's.

datasketch 2.x ("affine32" scheme): each shingle's 32-bit hash is pre-mixed with the
MurmurHash3 finalizer, then permutation k maps it to a_k * h + b_k in uint32 (wrapping); the
signature is the minimum per permutation. a, b come from numpy's RandomState(seed) exactly as
datasketch draws them, so `datasketch.MinHash(num_perm, seed, hashfunc=...)` fed the same
shingles (UTF-8 bytes) gives the same hashvalues. tests/test_minhash.py proves it.

Where the time goes, and why the code is shaped so (numpy over the batch, no Python call
per shingle on the default path):
- shingles are spans (start, length) of one buffer holding the batch's words joined by single
  spaces, found with numpy; no bytes object is made per shingle;
- xxh32 (the default hash) is computed over all spans at once (`xxh32_spans`, the xxHash32
  algorithm in numpy, checked against the xxhash package); other hash functions (sha1) take
  a Python call per shingle, as datasketch does;
- the permutation-and-min step runs on cache-sized blocks laid out (permutation, shingle), so
  each document's minimum is a reduction over contiguous memory."""
from __future__ import annotations

import functools
import hashlib
import struct
from typing import Literal

import numpy as np
import xxhash

# Documents per permutation-and-min block: 32 x ~235 shingles x 128 permutations x 4 bytes is
# ~4 MB, inside L2+L3; 1,000-document blocks run at half the speed (memory-bound).
CHUNK_DOCS = 32
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


# ---- shingles ------------------------------------------------------------------------------

def shingle_bytes(text: str, n: int, lowercase: bool = True) -> list[bytes]:
    """Word n-grams (words split on ASCII whitespace) joined by single spaces, as UTF-8 bytes;
    a text shorter than n words is one shingle. The reference for `shingle_spans` (and what
    datasketch is fed in tests and benchmarks)."""
    words = (text.lower() if lowercase else text).encode("utf-8").split()
    if len(words) <= n:
        return [b" ".join(words)] if words else []
    join = b" ".join
    return [join(words[i:i + n]) for i in range(len(words) - n + 1)]


def shingles(text: str, n: int, lowercase: bool = True) -> list[str]:
    """The shingles as text: what to feed datasketch (`m.update(s.encode("utf-8"))`)."""
    return [s.decode("utf-8") for s in shingle_bytes(text, n, lowercase)]


# bytes.split()'s whitespace: the six ASCII ones (a UTF-8 continuation byte is never one).
_ASCII_SPACE = np.zeros(256, bool)
_ASCII_SPACE[list(b" \t\n\r\x0b\x0c")] = True
_SPACE = np.uint8(32)
# Zero bytes after the buffer: xxh32_spans reads up to 11 bytes past a span's end.
_PAD = 16


class ShingleSpans:
    """A batch's shingles as spans of one buffer: the documents' words joined by single spaces
    (`buffer`, zero-padded), each shingle `buffer[start:start + length]`, `counts` per
    document. `list()` gives exactly `[shingle_bytes(t, n) for t in texts]`, flattened."""

    def __init__(self, texts: list[str], n: int, lowercase: bool = True):
        encoded = [(t.lower() if lowercase else t).encode("utf-8") for t in texts]
        lengths = np.fromiter(map(len, encoded), np.int64, len(encoded))
        raw = np.frombuffer(b"\n".join(encoded), np.uint8)
        doc_start = np.cumsum(lengths + 1) - lengths - 1
        # One space for each run of whitespace that follows a word; leading runs dropped.
        space = _ASCII_SPACE[raw]
        keep = ~space
        keep[1:] |= space[1:] & keep[:-1]
        words = np.zeros(int(keep.sum()) + _PAD, np.uint8)
        words[:len(words) - _PAD] = raw[keep]
        words[np.flatnonzero(space[keep])] = _SPACE
        # Where each document starts in the joined buffer (the next kept byte).
        kept = np.add.reduceat(keep, doc_start, dtype=np.int64) if len(raw) else np.zeros(len(texts), np.int64)
        position = np.cumsum(kept) - kept
        in_word = np.concatenate([[False], words[:len(words) - _PAD] != _SPACE, [False]]).view(np.int8)
        edge = np.diff(in_word)
        word_start, word_end = np.flatnonzero(edge == 1), np.flatnonzero(edge == -1)
        w0 = np.searchsorted(word_start, position)
        w1 = np.concatenate([w0[1:], [len(word_start)]])[:len(w0)]
        k = w1 - w0
        counts = np.where(k > n, k - n + 1, np.minimum(k, 1))
        first = np.repeat(w0 - (np.cumsum(counts) - counts), counts) + np.arange(int(counts.sum()))
        last = np.minimum(first + (n - 1), np.repeat(w1 - 1, counts))
        self.buffer = words
        self.start = word_start[first]
        self.length = word_end[last] - self.start
        self.counts = counts

    def list(self) -> list[bytes]:
        data = self.buffer.tobytes()
        return [data[s:s + m] for s, m in zip(self.start.tolist(), self.length.tolist())]


# ---- xxh32 over spans ----------------------------------------------------------------------

_P1, _P2, _P3, _P4, _P5 = (np.uint32(p) for p in (2654435761, 2246822519, 3266489917, 668265263, 374761393))


def _rotl(x: np.ndarray, r: int) -> np.ndarray:
    return (x << np.uint32(r)) | (x >> np.uint32(32 - r))


def xxh32_spans(buffer: np.ndarray, start: np.ndarray, length: np.ndarray) -> np.ndarray:
    """XXH32 (seed 0) of `buffer[start:start + length]` for every span: xxhash's
    xxh32_intdigest, one numpy pass per 16-byte stripe, 4-byte word and byte. `buffer` (uint8)
    must hold 16 zero bytes past the last span (ShingleSpans pads it): the tail steps read a
    few bytes past a span and mask them out, rather than gathering the spans that need them."""
    b = buffer.astype(np.uint32)
    # The little-endian 32-bit word starting at every byte offset.
    word = b[:-3] | (b[1:-2] << np.uint32(8)) | (b[2:-1] << np.uint32(16)) | (b[3:] << np.uint32(24))
    stripes = length >> 4
    h = np.full(len(start), _P5, np.uint32)
    long = np.flatnonzero(stripes)
    if len(long):
        p, left = start[long], stripes[long]
        lanes = [np.full(len(long), v, np.uint32) for v in
                 (np.uint32((int(_P1) + int(_P2)) & 0xFFFFFFFF), _P2, np.uint32(0), np.uint32(-int(_P1) & 0xFFFFFFFF))]
        for i, v in enumerate(lanes):          # the first stripe: every long span, no gather
            v += word[p + 4 * i] * _P2
            v[:] = _rotl(v, 13) * _P1
        stripe, active = 1, np.flatnonzero(left > 1)
        while len(active):                     # the others: the spans that have them
            q = p[active] + 16 * stripe
            for i, v in enumerate(lanes):
                v[active] = _rotl(v[active] + word[q + 4 * i] * _P2, 13) * _P1
            stripe += 1
            active = active[left[active] > stripe]
        v1, v2, v3, v4 = lanes
        h[long] = _rotl(v1, 1) + _rotl(v2, 7) + _rotl(v3, 12) + _rotl(v4, 18)
    h += length.astype(np.uint32)
    p = start + (stripes << 4)
    rest = length & 15
    for j in range(3):                         # up to three 4-byte words
        np.copyto(h, _rotl(h + word[p + 4 * j] * _P3, 17) * _P4, where=(rest >> 2) > j)
    p = p + (rest & ~3)
    rest = rest & 3
    for j in range(3):                         # up to three single bytes
        np.copyto(h, _rotl(h + b[p + j] * _P5, 11) * _P1, where=rest > j)
    h ^= h >> np.uint32(15)
    h *= _P2
    h ^= h >> np.uint32(13)
    h *= _P3
    h ^= h >> np.uint32(16)
    return h


# ---- signatures ----------------------------------------------------------------------------

class MinHasher:
    def __init__(self, num_perm: int = 128, seed: int = 1, ngram: int = 5, lowercase: bool = True,
                 hashfunc: Literal["xxh32", "sha1"] = "xxh32"):
        self.num_perm, self.ngram, self.lowercase = num_perm, ngram, lowercase
        self.a, self.b = permutations(num_perm, seed)
        self.hashfunc = hashfunc
        self.hash = HASHFUNCS[hashfunc]

    def shingle_hashes(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """32-bit hashes of all shingles of the batch, and each document's shingle count."""
        spans = ShingleSpans(texts, self.ngram, self.lowercase)
        if self.hashfunc == "xxh32":
            hashes = xxh32_spans(spans.buffer, spans.start, spans.length)
        else:
            hashes = np.fromiter(map(self.hash, spans.list()), np.uint32, len(spans.start))
        return hashes, spans.counts

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
        a, b = self.a[:, None], self.b[:, None]
        # One scratch block for the batch: (permutation, shingle), so the minimum over a
        # document's shingles reads contiguous memory.
        widest = max((int(ends[min(n, c + CHUNK_DOCS) - 1] - starts[c]) for c in range(0, n, CHUNK_DOCS)), default=0)
        scratch = np.empty((self.num_perm, widest), np.uint32)
        for c0 in range(0, n, CHUNK_DOCS):
            c1 = min(n, c0 + CHUNK_DOCS)
            lo, hi = starts[c0], ends[c1 - 1]
            if hi == lo:
                continue
            block = scratch[:, :hi - lo]
            np.multiply(a, mixed[None, lo:hi], out=block)     # wraps in uint32, as datasketch does
            np.add(block, b, out=block)
            nonempty = np.flatnonzero(counts[c0:c1])
            out[c0 + nonempty] = np.minimum.reduceat(block, (starts[c0:c1] - lo)[nonempty], axis=1).T
        return out


@functools.cache
def lsh_params(threshold: float, num_perm: int, false_negative_weight: float = 0.5) -> tuple[int, int]:
    """(bands, rows) as datasketch's MinHashLSH(weights=...) chooses them (`_optimal_param`):
    the (b, r) with b * r <= num_perm minimizing the weighted false positive and false negative
    areas, the first in datasketch's order on ties. datasketch integrates with scipy's quad,
    whose import costs ~0.45 s per process; the integrands are polynomials of degree b * r, so
    a Gauss-Legendre rule of num_perm // 2 + 1 nodes integrates them exactly, in one numpy pass
    (tests/test_minhash.py compares with datasketch over a grid)."""
    pairs = np.array([(b, r) for b in range(1, num_perm + 1) for r in range(1, num_perm // b + 1)], np.float64)
    x, w = np.polynomial.legendre.leggauss(num_perm // 2 + 1)

    def area(lo: float, hi: float, false_negative: bool) -> np.ndarray:
        s = (hi - lo) / 2 * x + (hi + lo) / 2
        p = 1 - (1 - s[None, :] ** pairs[:, 1:2]) ** pairs[:, 0:1]      # P(candidate | similarity s)
        return ((1 - p) if false_negative else p) @ w * (hi - lo) / 2

    error = (area(0.0, threshold, False) * (1.0 - false_negative_weight)
             + area(threshold, 1.0, True) * false_negative_weight)
    b, r = pairs[int(np.argmin(error))]
    return int(b), int(r)


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
