"""The words byte-level BPE training counts, counted where the documents are (the executor's
workers), so the driver only learns the merges.

HF tokenizers' BpeTrainer counts the words its pre-tokenizer cuts (ByteLevel: GPT-2's pattern,
then each byte as one of 256 printable characters), then merges. On abstracts the counting is
~90 % of training (10,000 abstracts: 2.4 s of 2.6 on one thread) and runs on the driver while
the workers wait. Here the workers count with the `regex` module (GPT-2's own pattern and
engine: over twice as fast as the trainer's counting), and the driver hands the trainer the counted
words, each word as often as it was counted, cut by white space (no byte-level character is
white space): the trainer sees the same words the same number of times, and learns the same
merges (tests/test_tokenizer.py compares the tokenizer.json bytes).

`regex` and the trainer's Oniguruma agree on almost every character; where they do not (a
character of a recent Unicode version one of them does not know yet, say), the text is cut by
the trainer's own pre-tokenizer instead. Each character a process meets is checked once, in
a few contexts, against that pre-tokenizer."""
from __future__ import annotations

from collections import Counter
from functools import lru_cache
from itertools import chain
from typing import Iterable, Iterator

import pyarrow as pa

# GPT-2's pre-tokenization pattern, as tokenizers' ByteLevel pre-tokenizer uses it.
GPT2_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
# Characters per text handed to the trainer, and words read from the counts at a time (_feed).
FEED_CHARS = 1 << 16
FEED_WORDS = 1 << 16
COUNTS_SCHEMA = pa.schema([pa.field("word", pa.string()), pa.field("count", pa.int64())])
# Contexts a character is cut in by both engines: as a letter, a digit, white space, punctuation.
_CONTEXTS = ("a{c}b", " {c}x", "1{c} ", "{c}{c} {c}", "x {c}\n", "'{c}s")


@lru_cache(maxsize=1)
def _pattern():
    import regex
    return regex.compile(GPT2_PATTERN)


@lru_cache(maxsize=1)
def _byte_level():
    from tokenizers import pre_tokenizers
    return pre_tokenizers.ByteLevel(add_prefix_space=False)


@lru_cache(maxsize=1)
def _byte_chars() -> dict[int, str]:
    """str.translate table from Latin-1 characters (one per byte) to byte-level characters."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    table, extra = {}, 0
    for b in range(256):
        if b in printable:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + extra)
            extra += 1
    return table


def byte_level(word: str) -> str:
    """`word` as the ByteLevel pre-tokenizer spells it: each UTF-8 byte one character."""
    return word.encode("utf-8").decode("latin-1").translate(_byte_chars())


# Spellings of words met before in this process: most of a shard's words were in the last
# shard's too. Bounded, so a worker's memory does not grow with the corpus's vocabulary.
_spellings: dict[str, str] = {}
SPELLINGS_KEPT = 500_000


def _spelled(word: str) -> str:
    out = _spellings.get(word)
    if out is None:
        out = byte_level(word)
        if len(_spellings) < SPELLINGS_KEPT:
            _spellings[word] = out
    return out


# Per character met in this process: whether both engines cut it alike (WordCounter._agreeing).
_agrees: dict[str, bool] = {}


class WordCounter:
    """Byte-level words of texts and how often each occurs (`add`; `table()` when done)."""

    def __init__(self):
        self._raw: Counter = Counter()         # words as regex cuts them
        self._spelled: Counter = Counter()     # words as the pre-tokenizer spells them (exceptions)
        self.docs = 0

    @staticmethod
    def _agreeing(char: str) -> bool:
        ok = _agrees.get(char)
        if ok is None:
            findall, cut = _pattern().findall, _byte_level().pre_tokenize_str
            ok = all([w for w, _ in cut(c)] == [byte_level(w) for w in findall(c)]
                     for c in (ctx.format(c=char) for ctx in _CONTEXTS))
            _agrees[char] = ok
        return ok

    def add(self, texts: list[str], times: int = 1) -> None:
        """Count the words of `texts`, each text `times` times."""
        if not texts or times <= 0:
            return
        self.docs += len(texts) * times
        odd = {c for c in set("".join(texts)) if not self._agreeing(c)}
        if odd:
            cut = _byte_level().pre_tokenize_str
            exceptions = [t for t in texts if not odd.isdisjoint(t)]
            spelled = Counter(w for t in exceptions for w, _ in cut(t))
            texts = [t for t in texts if odd.isdisjoint(t)]
            self._add_times(self._spelled, spelled, times)
        words = chain.from_iterable(map(_pattern().findall, texts))
        if times == 1:
            self._raw.update(words)
        else:
            self._add_times(self._raw, Counter(words), times)

    @staticmethod
    def _add_times(into: Counter, counts: Counter, times: int) -> None:
        if times == 1:
            into.update(counts)
        else:
            for word, n in counts.items():
                into[word] += n * times

    def table(self) -> pa.Table:
        """(word, count) in byte-level spelling, one row per word."""
        get = _spellings.get
        words = [get(w) or _spelled(w) for w in self._raw]     # distinct words spell distinctly
        table = pa.table({"word": pa.array(words, pa.string()),
                          "count": pa.array(list(self._raw.values()), pa.int64())}, schema=COUNTS_SCHEMA)
        if self._spelled:
            table = merge_counts([table, pa.table({"word": pa.array(list(self._spelled), pa.string()),
                                                   "count": pa.array(list(self._spelled.values()), pa.int64())},
                                                  schema=COUNTS_SCHEMA)])
        return table


def merge_counts(tables: Iterable[pa.Table]) -> pa.Table:
    """Shards' (word, count) tables summed by word."""
    tables = [t for t in tables if t.num_rows]
    if not tables:
        return COUNTS_SCHEMA.empty_table()
    summed = pa.concat_tables(tables).group_by("word").aggregate([("count", "sum")])
    return pa.table({"word": summed["word"], "count": summed["count_sum"]}, schema=COUNTS_SCHEMA)


def _feed(counts: pa.Table, chunk_chars: int = FEED_CHARS) -> Iterator[str]:
    """Texts that hold each word `count` times, separated by spaces, about `chunk_chars`
    characters each (a longer word alone), one text per item. The trainer reads items hundreds
    ahead of its counting, so the item's size bounds what the driver holds."""
    text: list[str] = []
    size = 0
    for batch in counts.to_batches(max_chunksize=FEED_WORDS):
        for word, n in zip(batch.column(0).to_pylist(), batch.column(1).to_pylist()):
            unit = word + " "
            while n > 0:
                k = min(n, max(1, (chunk_chars - size) // len(unit)))
                text.append(unit * k)
                size += len(unit) * k
                n -= k
                if n or size >= chunk_chars:       # full: no room for one more
                    yield "".join(text)
                    text, size = [], 0
    if text:
        yield "".join(text)


def train_from_counts(tok, trainer, counts: pa.Table) -> None:
    """Train `tok` (a byte-level BPE tokenizer) on counted words: what training it on the
    texts would learn. Its pre-tokenizer is set back when done."""
    from tokenizers import pre_tokenizers
    kept = tok.pre_tokenizer
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    try:
        tok.train_from_iterator(_feed(counts), trainer=trainer)
    finally:
        tok.pre_tokenizer = kept
