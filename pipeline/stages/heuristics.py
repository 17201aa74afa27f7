"""heuristics: the seeds' rules, Gopher quality, Gopher repetition and C4 rules, each its own
removal reason. Defaults are datatrove's (and the seeds' 200-word minimum); configs/pubmed.yaml
loosens the ones biomedical text trips (see README: "Heuristics on biomedical text").

Vectorized over the batch: words come from Arrow's list kernels, word n-grams are hashed in
numpy over the flattened batch, and repeats are found by one sort per n."""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pydantic import Field

from pipeline.documents import first_reason, set_column
from pipeline.stages.base import Stage, StageConfig

STOP_WORDS = ["the", "be", "to", "of", "and", "that", "have", "with"]   # Gopher's
BULLETS = "•‣⁃◦▪▫●○■□➢➤►*\\-"
_PUNCT_OR_SYMBOL = r"[\p{P}\p{S}]"
_WORD_SPLIT = r"([^\p{L}\p{N}\s'.,-]|(?:[.,](?:\s|$))|(?:'s\b))"


class HeuristicsConfig(StageConfig):
    # The seeds' rules (configs/pubmed.yaml lowers min_words to 50: abstracts are ~200 words).
    min_words: int = Field(default=200, ge=0)
    max_punctuation_fraction: float = Field(default=0.30, ge=0, le=1)
    # Gopher quality (datatrove defaults unless noted).
    max_words: int = Field(default=100_000, ge=1)
    min_avg_word_length: float = 3.0
    max_avg_word_length: float = 10.0
    max_symbol_word_ratio: float = 0.1
    max_bullet_lines_ratio: float = 0.9
    max_ellipsis_lines_ratio: float = 0.3
    min_alpha_words_ratio: float = 0.8

    min_stop_words: int = 2
    # Gopher repetition (datatrove defaults).
    max_dup_line_fraction: float = 0.3
    max_dup_para_fraction: float = 0.3
    max_dup_line_char_fraction: float = 0.2
    max_dup_para_char_fraction: float = 0.2
    top_ngram_max_fraction: dict[int, float] = {2: 0.20, 3: 0.18, 4: 0.16}
    dup_ngram_max_fraction: dict[int, float] = {5: 0.15, 6: 0.14, 7: 0.13, 8: 0.12, 9: 0.11, 10: 0.10}
    # C4.
    c4_lorem_ipsum: bool = True
    c4_curly_braces: bool = True
    c4_boilerplate_lines: bool = True


class Heuristics(Stage):
    name = "heuristics"
    summary = "seeds' length/punctuation rules, Gopher quality and repetition, C4 rules"
    Config = HeuristicsConfig

    def output_fields(self):
        return [pa.field("n_words", pa.int32()), pa.field("punct_fraction", pa.float32()),
                pa.field("alpha_words_ratio", pa.float32()), pa.field("avg_word_length", pa.float32())]

    def process(self, table: pa.Table) -> pa.Table:
        cfg = self.config
        text = table["text"].combine_chunks() if isinstance(table["text"], pa.ChunkedArray) else table["text"]
        n = len(text)
        chars = pc.utf8_length(text).to_numpy(zero_copy_only=False).astype(np.float64)
        safe_chars = np.maximum(chars, 1)

        # Words: punctuation split off (but keep decimals like 0.05 and hyphenated terms whole).
        spaced = pc.replace_substring_regex(text, _WORD_SPLIT, r" \1 ")
        words = pc.utf8_split_whitespace(spaced)
        flat = pc.list_flatten(words)
        counts = pc.list_value_length(words).to_numpy(zero_copy_only=False).astype(np.int64)
        doc_of_word = np.repeat(np.arange(n), counts)
        has_word_char = pc.match_substring_regex(flat, r"[\p{L}\p{N}]").to_numpy(zero_copy_only=False)
        has_alpha = pc.match_substring_regex(flat, r"\p{L}").to_numpy(zero_copy_only=False)
        word_len = pc.utf8_length(flat).to_numpy(zero_copy_only=False).astype(np.int64)
        lowered = pc.utf8_lower(flat)
        is_stop = pc.is_in(lowered, pa.array(STOP_WORDS)).to_numpy(zero_copy_only=False)

        def per_doc(values):
            return np.bincount(doc_of_word, weights=values, minlength=n)

        n_words_all = counts.astype(np.float64)
        n_words = per_doc(has_word_char)                 # words that are not pure symbols
        safe_words = np.maximum(n_words_all, 1)
        avg_len = per_doc(word_len * has_word_char) / np.maximum(n_words, 1)
        alpha_ratio = per_doc(has_alpha) / safe_words
        stop_count = per_doc(is_stop)
        punct = pc.count_substring_regex(text, _PUNCT_OR_SYMBOL).to_numpy(zero_copy_only=False)
        nonspace = chars - pc.count_substring_regex(text, r"\s").to_numpy(zero_copy_only=False)
        punct_frac = punct / np.maximum(nonspace, 1)
        hashes = (pc.count_substring(text, "#").to_numpy(zero_copy_only=False)
                  + pc.count_substring(text, "...").to_numpy(zero_copy_only=False)
                  + pc.count_substring(text, "…").to_numpy(zero_copy_only=False))
        symbol_ratio = hashes / safe_words

        lines = pc.split_pattern(text, "\n")
        line_counts = pc.list_value_length(lines).to_numpy(zero_copy_only=False).astype(np.int64)
        flat_lines = pc.utf8_trim_whitespace(pc.list_flatten(lines))
        doc_of_line = np.repeat(np.arange(n), line_counts)
        bullet = pc.match_substring_regex(flat_lines, "^[" + BULLETS + "]").to_numpy(zero_copy_only=False)
        ellipsis = pc.match_substring_regex(flat_lines, r"(\.\.\.|…)$").to_numpy(zero_copy_only=False)
        safe_lines = np.maximum(line_counts, 1)
        bullet_ratio = np.bincount(doc_of_line, bullet, n) / safe_lines
        ellipsis_ratio = np.bincount(doc_of_line, ellipsis, n) / safe_lines

        dup_line_frac, dup_line_chars = _duplicate_units(flat_lines, doc_of_line, n)
        paras = pc.list_flatten(pc.split_pattern_regex(text, r"\n{2,}"))
        para_counts = pc.list_value_length(pc.split_pattern_regex(text, r"\n{2,}")).to_numpy(zero_copy_only=False)
        dup_para_frac, dup_para_chars = _duplicate_units(pc.utf8_trim_whitespace(paras),
                                                         np.repeat(np.arange(n), para_counts), n)

        word_ids = pc.dictionary_encode(lowered).indices.to_numpy(zero_copy_only=False).astype(np.uint64)
        starts = np.concatenate([[0], np.cumsum(counts)[:-1]]) if n else np.zeros(0, np.int64)
        ngram_rules = []
        for k, limit in sorted(cfg.top_ngram_max_fraction.items()):
            top = _top_ngram_chars(word_ids, word_len, doc_of_word, starts, counts, k, n)
            ngram_rules.append((f"gopher_top_{k}gram", top / safe_chars > limit))
        # A repeated k-gram contains a repeated shorter one: longer k only where the shortest repeats.
        candidates = None
        for k, limit in sorted(cfg.dup_ngram_max_fraction.items()):
            dup = _duplicate_ngram_chars(word_ids, word_len, doc_of_word, starts, counts, k, n, candidates)
            ngram_rules.append((f"gopher_dup_{k}gram", dup / safe_chars > limit))
            candidates = dup > 0 if candidates is None else candidates & (dup > 0)

        rules = [
            ("too_few_words", n_words < cfg.min_words),
            ("too_much_punctuation", punct_frac > cfg.max_punctuation_fraction),
            ("gopher_too_many_words", n_words > cfg.max_words),
            ("gopher_avg_word_length", (avg_len < cfg.min_avg_word_length) | (avg_len > cfg.max_avg_word_length)),
            ("gopher_symbol_word_ratio", symbol_ratio > cfg.max_symbol_word_ratio),
            ("gopher_bullet_lines", bullet_ratio > cfg.max_bullet_lines_ratio),
            ("gopher_ellipsis_lines", ellipsis_ratio > cfg.max_ellipsis_lines_ratio),
            ("gopher_alpha_words", alpha_ratio < cfg.min_alpha_words_ratio),
            ("gopher_stop_words", stop_count < cfg.min_stop_words),
            ("gopher_dup_lines", dup_line_frac > cfg.max_dup_line_fraction),
            ("gopher_dup_paragraphs", dup_para_frac > cfg.max_dup_para_fraction),
            ("gopher_dup_line_chars", dup_line_chars / safe_chars > cfg.max_dup_line_char_fraction),
            ("gopher_dup_paragraph_chars", dup_para_chars / safe_chars > cfg.max_dup_para_char_fraction),
            *ngram_rules,
        ]
        lowered_text = pc.utf8_lower(text)
        if cfg.c4_lorem_ipsum:
            rules.append(("c4_lorem_ipsum", pc.match_substring(lowered_text, "lorem ipsum").to_numpy(zero_copy_only=False)))
        if cfg.c4_curly_braces:
            rules.append(("c4_curly_braces", pc.match_substring_regex(text, "[{}]").to_numpy(zero_copy_only=False)))
        if cfg.c4_boilerplate_lines:
            js = pc.match_substring_regex(lowered_text, r"(?m)^.*javascript.*(enable|browser|disabled|required).*$|(?m)^.*(enable|browser).*javascript.*$")
            cookie = pc.match_substring_regex(lowered_text, r"cookie (policy|settings|preferences)|(uses|use of|accept( all)?) cookies")
            rules.append(("c4_javascript_notice", js.to_numpy(zero_copy_only=False)))
            rules.append(("c4_cookie_notice", cookie.to_numpy(zero_copy_only=False)))

        table = set_column(table, "n_words", pa.array(n_words.astype(np.int32)))
        table = set_column(table, "punct_fraction", pa.array(punct_frac.astype(np.float32)))
        table = set_column(table, "alpha_words_ratio", pa.array(alpha_ratio.astype(np.float32)))
        table = set_column(table, "avg_word_length", pa.array(avg_len.astype(np.float32)))
        return first_reason(table, [(name, pa.array(np.asarray(mask, dtype=bool))) for name, mask in rules])


def _duplicate_units(units: pa.Array, doc_of_unit: np.ndarray, n: int):
    """Gopher's duplicate lines/paragraphs: fraction of units that repeat an earlier one in the
    same document, and the characters in those repeats. Empty units are ignored."""
    if len(units) == 0:
        return np.zeros(n), np.zeros(n)
    ids = pc.dictionary_encode(units).indices.to_numpy(zero_copy_only=False).astype(np.int64)
    lens = pc.utf8_length(units).to_numpy(zero_copy_only=False).astype(np.float64)
    nonempty = lens > 0
    key = doc_of_unit.astype(np.int64) * (ids.max() + 1) + ids
    order = np.argsort(key, kind="stable")
    sk = key[order]
    repeat = np.zeros(len(key), bool)
    repeat[order[1:]] = sk[1:] == sk[:-1]
    repeat &= nonempty
    units_per_doc = np.maximum(np.bincount(doc_of_unit, nonempty, n), 1)
    return np.bincount(doc_of_unit, repeat, n) / units_per_doc, np.bincount(doc_of_unit, repeat * lens, n)


_MIX = np.uint64(0x9E3779B97F4A7C15)


def _ngram_keys(word_ids, doc_of_word, starts, counts, k, docs=None):
    """Start positions of the k-grams that fit inside their document (of `docs` only, if
    given), and a doc-major 64-bit key: document in the top 24 bits, a 40-bit hash of the
    k-gram below, so sorting groups each document's k-grams together."""
    total = len(word_ids)
    if total < k:
        return np.zeros(0, np.int64), np.zeros(0, np.uint64)
    pos = np.arange(total - k + 1)
    pos = pos[pos + k <= (starts + counts)[doc_of_word[pos]]]
    if docs is not None:
        pos = pos[docs[doc_of_word[pos]]]
    h = np.full(len(pos), _MIX, np.uint64)
    with np.errstate(over="ignore"):
        for j in range(k):
            h = (h ^ word_ids[pos + j]) * _MIX + np.uint64(j + 1)
    key = (doc_of_word[pos].astype(np.uint64) << np.uint64(40)) | (h >> np.uint64(24))
    return pos, key


def _runs(sorted_keys):
    """Start index and length of each run of equal keys in a sorted array."""
    edges = np.flatnonzero(np.concatenate([[True], sorted_keys[1:] != sorted_keys[:-1]]))
    return edges, np.diff(np.concatenate([edges, [len(sorted_keys)]]))


def _top_ngram_chars(word_ids, word_len, doc_of_word, starts, counts, k, n):
    """Per document: the largest count x length (words joined by spaces) of any of its
    k-grams. Gopher measures the most frequent k-gram; this is at least as strict."""
    pos, key = _ngram_keys(word_ids, doc_of_word, starts, counts, k)
    out = np.zeros(n)
    if not len(pos):
        return out
    order = np.argsort(key)
    run_start, run_len = _runs(key[order])
    first_pos = pos[order[run_start]]
    cum = np.concatenate([[0], np.cumsum(word_len)])
    score = run_len * (cum[first_pos + k] - cum[first_pos] + (k - 1))
    doc = doc_of_word[first_pos]                 # non-decreasing: keys are doc-major
    doc_start = np.flatnonzero(np.concatenate([[True], doc[1:] != doc[:-1]]))
    out[doc[doc_start]] = np.maximum.reduceat(score, doc_start)
    return out


def _duplicate_ngram_chars(word_ids, word_len, doc_of_word, starts, counts, k, n, docs=None):
    """Per document: characters of the words covered by a k-gram seen earlier in the document
    (Gopher's duplicate n-gram fraction, counted by coverage)."""
    pos, key = _ngram_keys(word_ids, doc_of_word, starts, counts, k, docs)
    out = np.zeros(n)
    if not len(pos):
        return out
    order = np.argsort(key, kind="stable")
    sk = key[order]
    repeat_pos = pos[order[1:][sk[1:] == sk[:-1]]]
    if not len(repeat_pos):
        return out
    cover = np.zeros(len(word_ids) + 1, np.int64)
    np.add.at(cover, repeat_pos, 1)
    np.add.at(cover, repeat_pos + k, -1)
    covered = np.cumsum(cover)[:-1] > 0
    return np.bincount(doc_of_word, covered * word_len, n)
