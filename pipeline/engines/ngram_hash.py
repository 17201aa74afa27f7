"""Word n-gram hashes of a batch, in numpy: the one rolling hash of the stages that count repeated
n-grams (heuristics) and match benchmark n-grams (decontaminate)."""
from __future__ import annotations

import numpy as np

MIX = np.uint64(0x9E3779B97F4A7C15)


class RollingNgramHashes:
    """Hashes of a word sequence's k-grams, one k after another: the hash of the k-gram at p is
    (hash of the (k-1)-gram at p ^ word p+k-1) * MIX + k, so going from k-1 to k is one
    vectorized pass over the words, and asking for increasing k costs one pass per k. The
    sequence runs across documents: callers keep the k-grams that start and end in one."""

    def __init__(self, word_hashes: np.ndarray):
        self.words = word_hashes
        self.k, self.h = 0, np.full(len(word_hashes), MIX, np.uint64)

    def at(self, k: int) -> np.ndarray:
        """The hash of the k-gram starting at each position 0 .. len(words) - k."""
        total = len(self.words)
        if total < k:
            return np.zeros(0, np.uint64)
        if k < self.k:
            self.k, self.h = 0, np.full(total, MIX, np.uint64)
        with np.errstate(over="ignore"):
            while self.k < k:
                j = self.k
                self.h = (self.h[: total - j] ^ self.words[j:]) * MIX + np.uint64(j + 1)
                self.k += 1
        return self.h
