"""heuristics: the seeds' rules, Gopher quality, Gopher repetition, C4 and FineWeb rules, each its
own removal reason. Defaults are datatrove's (and the seeds' 200-word minimum); configs/pubmed.yaml
loosens the ones biomedical text trips (see docs/filters.md: "heuristics: rules for biomedical text").

What the rules measure (`compat`):

- `compat: datatrove` measures as datatrove 0.10's GopherQualityFilter, GopherRepetitionFilter,
  C4QualityFilter and FineWebQualityFilter do, so a recipe moved from datatrove decides the same
  at the same thresholds. Words are spaCy's English tokens (pipeline/stages/heuristics/spacy_words.py reproduces
  spaCy's tokenizer over the batch: "cross - sectional", "study 's", "( n=12 )"); a word counts for
  the word limits and mean length unless all its characters are datatrove punctuation; the
  alphabetic ratio is over all tokens; stop words count as distinct, case-sensitive words; '#'
  and '...' per word are tested apart; lines are str.splitlines() for bullets and ellipses, and
  for repetition the text split on newlines as it is (empty lines count) and the stripped text
  split on blank lines; the top n-gram is the most frequent n-gram's count x length (the first
  among equally frequent ones); duplicate n-grams are what datatrove's walk finds (words joined
  without spaces; after a repeat the walk moves n words on); C4's sentences are spaCy's
  sentencizer's. scripts/benchmarks/bench_heuristics_compat.py measures the agreement on real text.
- `compat: medprep` (the default, and what configs/pubmed.yaml's thresholds were set on) keeps
  the stage's own measures: words are split on whitespace with punctuation split off but kept
  inside decimals (0.05), hyphenated terms (cross-sectional, one word rather than three of which
  one has no letter) and before apostrophes, and lower-cased for stop words and n-grams; '#'
  and '...' are counted together; lines are stripped and blank ones are not duplicates; the top
  n-gram is the largest count x length of any n-gram and duplicate n-grams count every word a
  repeat covers (both at least as strict as Gopher's: datatrove's walk counts only the repeats
  it lands on, n words apart); C4's sentences are counted from whitespace chunks. These
  measures need no tokenizer tables, and keep hyphenated biomedical terms whole.

Vectorized over the batch: words come from Arrow's list kernels (medprep) or from numpy over the
batch's codepoints (datatrove), word n-grams are hashed in numpy over the flattened batch
(rolling hashes, one pass per n), and repeats are found by one sort per n. C4's line and
sentence rules (`c4_lines`, `c4_min_sentences`) work on the batch's flattened lines the same way,
and rewrite the text of the documents they keep."""
from __future__ import annotations

from typing import Literal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pydantic import Field, field_validator

from pipeline.documents import first_reason, set_column, split_words
from pipeline.engines.ngram_hash import RollingNgramHashes
from pipeline.stages.base import DocumentStage, StageConfig
from pipeline.stages.heuristics.spacy_words import (
    ALPHA,
    DT_PUNCT,
    DT_TERMINAL_PUNCTUATION,
    RE2_SPACE,
    SPACE,
    Words,
    english_words,
    string_hash,
)

STOP_WORDS = ["the", "be", "to", "of", "and", "that", "have", "with"]   # Gopher's
BULLETS = "•‣⁃◦▪▫●○■□➢➤►*\\-"
_PUNCT_OR_SYMBOL = r"[\p{P}\p{S}]"
_WORD_SPLIT = r"([^\p{L}\p{N}\s'.,-]|(?:[.,](?:\s|$))|(?:'s\b))"


class HeuristicsConfig(StageConfig):
    # What the rules measure (module docstring): datatrove 0.10's measures, or medprep's own.
    compat: Literal["medprep", "datatrove"] = "medprep"
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
    # C4 (document rules on by default).
    c4_lorem_ipsum: bool = True
    c4_curly_braces: bool = True
    c4_boilerplate_lines: bool = True
    # C4's line and sentence rules, as datatrove's C4QualityFilter applies them (off by default:
    # they rewrite the text). Each line (stripped) is dropped if a word is longer than
    # c4_max_word_length, if after removing citations ("[1]", "[edit]", "[citation needed]")
    # it does not end in . ? ! " ' (or ends in "..."), if it has fewer than
    # c4_min_words_per_line words, or if it mentions javascript or a cookie/terms-of-use policy;
    # lorem ipsum or a curly brace in a line that reaches those checks removes the document;
    # the kept lines, joined by newlines, become the text. Documents with fewer than
    # c4_min_sentences sentences in the kept lines are removed (0: no minimum; C4 uses 5).
    c4_lines: bool = False
    c4_min_words_per_line: int = Field(default=3, ge=0)
    c4_max_word_length: int = Field(default=1000, ge=1)
    c4_remove_citations: bool = True
    c4_min_sentences: int = Field(default=0, ge=0)
    # FineWeb's quality rules (datatrove's FineWebQualityFilter, its defaults; off unless
    # fineweb: true). Over the lines (text split on "\n", blank lines dropped): remove the
    # document if fewer than line_punct_thr of them end in one of stop_chars (datatrove's
    # terminal punctuation unless given; line_punct_exclude_zero spares documents where none
    # does), if more than short_line_thr are at most short_line_length characters long, if the
    # characters of lines repeating an earlier line exceed char_duplicates_ratio of the text's
    # non-newline characters, or if newlines per word exceed new_line_ratio.
    fineweb: bool = False
    fineweb_line_punct_thr: float = 0.12
    fineweb_line_punct_exclude_zero: bool = False
    fineweb_stop_chars: list[str] | None = None
    fineweb_short_line_thr: float = 0.67
    fineweb_short_line_length: int = Field(default=30, ge=0)
    fineweb_char_duplicates_ratio: float = 0.01
    fineweb_new_line_ratio: float = 0.3

    @field_validator("fineweb_stop_chars")
    @classmethod
    def _one_character_each(cls, value):
        if value is not None and any(len(c) != 1 for c in value):
            raise ValueError("each stop character must be one character")
        return value


class Heuristics(DocumentStage):
    name = "heuristics"
    summary = ("seeds' length/punctuation rules, Gopher quality and repetition, C4 and FineWeb rules "
               "(compat: medprep | datatrove)")
    Config = HeuristicsConfig

    def output_fields(self):
        fields = [
            pa.field("n_words", pa.int32()),
            pa.field("punct_fraction", pa.float32()),
            pa.field("alpha_words_ratio", pa.float32()),
            pa.field("avg_word_length", pa.float32()),
        ]
        if self.config.c4_lines or self.config.c4_min_sentences:
            fields.append(pa.field("c4_sentences", pa.int32()))
        if self.config.c4_lines:
            fields.append(pa.field("c4_lines_dropped", pa.int32()))
        return fields

    def process(self, table: pa.Table) -> pa.Table:
        text = table["text"].combine_chunks() if isinstance(table["text"], pa.ChunkedArray) else table["text"]
        rules, signals, c4 = self.evaluate(text)
        for name, values in signals.items():
            table = set_column(table, name, values)
        table = first_reason(table, [(name, pa.array(np.asarray(mask, dtype=bool))) for name, mask in rules])
        if c4:
            # Kept documents carry C4's text (the kept lines); removed ones keep what they had.
            table = set_column(table, "c4_lines_dropped", pa.array(c4["dropped_per_doc"].astype(np.int32)))
            table = set_column(table, "text", pc.if_else(pc.is_null(table["_reason"]), c4["text"], text))
        return table

    def setup(self) -> None:
        if self.config.compat == "datatrove":
            english_words()  # spaCy's rules, compiled once per worker

    def evaluate(self, text: pa.Array) -> tuple[list[tuple[str, np.ndarray]], dict[str, pa.Array], dict | None]:
        """Every enabled rule's mask (in the order reasons are given), the signal columns, and
        C4's line results when c4_lines is on. scripts/figures/heuristics_table.py reads the masks."""
        cfg = self.config
        n = len(text)
        chars = pc.utf8_length(text).to_numpy(zero_copy_only=False).astype(np.float64)
        punct = pc.count_substring_regex(text, _PUNCT_OR_SYMBOL).to_numpy(zero_copy_only=False)
        if cfg.compat == "datatrove":
            words = english_words().split(text)
            spaces = words.count_in_docs(RE2_SPACE)  # what RE2's \s matches, counted in numpy
            rules, signals, n_tokens = _datatrove_gopher(text, words, chars, cfg)
        else:
            spaces = pc.count_substring_regex(text, r"\s").to_numpy(zero_copy_only=False)
            rules, signals, n_tokens = _medprep_gopher(text, chars, cfg)
        punct_frac = punct / np.maximum(chars - spaces, 1)
        rules.insert(1, ("too_much_punctuation", punct_frac > cfg.max_punctuation_fraction))
        lowered_text = pc.utf8_lower(text)
        c4 = _c4_lines(text, n, cfg, words if cfg.compat == "datatrove" else None) if cfg.c4_lines else None
        if cfg.c4_lorem_ipsum:
            rules.append(
                (
                    "c4_lorem_ipsum",
                    c4["lorem"]
                    if c4
                    else pc.match_substring(lowered_text, "lorem ipsum").to_numpy(zero_copy_only=False),
                )
            )
        if cfg.c4_curly_braces:
            rules.append(
                (
                    "c4_curly_braces",
                    c4["curly"] if c4 else pc.match_substring_regex(text, "[{}]").to_numpy(zero_copy_only=False),
                )
            )
        sentences = None
        if c4:
            sentences = c4["sentences"]
            rules.append(("c4_no_lines_left", c4["kept_per_doc"] == 0))
        elif cfg.c4_min_sentences:
            lines = pc.split_pattern(text, "\n")
            doc_of_line = np.repeat(
                np.arange(n), pc.list_value_length(lines).to_numpy(zero_copy_only=False).astype(np.int64)
            )
            if cfg.compat == "datatrove":
                sentences = np.bincount(
                    doc_of_line, english_words().sentences(pc.utf8_trim_whitespace(pc.list_flatten(lines))), n
                )
            else:
                sentences = _sentence_counts(split_words(pc.list_flatten(lines)), doc_of_line, n)
        if cfg.c4_min_sentences:
            rules.append(("c4_too_few_sentences", sentences < cfg.c4_min_sentences))
        if cfg.c4_boilerplate_lines:
            js = pc.match_substring_regex(
                lowered_text,
                r"(?m)^.*javascript.*(enable|browser|disabled|required).*$|(?m)^.*(enable|browser).*javascript.*$",
            )
            cookie = pc.match_substring_regex(
                lowered_text, r"cookie (policy|settings|preferences)|(uses|use of|accept( all)?) cookies"
            )
            rules.append(("c4_javascript_notice", js.to_numpy(zero_copy_only=False)))
            rules.append(("c4_cookie_notice", cookie.to_numpy(zero_copy_only=False)))

        if cfg.fineweb:
            rules.extend(_fineweb_rules(text, chars, n_tokens, cfg))
        signals = {
            "n_words": signals["n_words"],
            "punct_fraction": pa.array(punct_frac.astype(np.float32)),
            "alpha_words_ratio": signals["alpha_words_ratio"],
            "avg_word_length": signals["avg_word_length"],
        }
        if sentences is not None:
            signals["c4_sentences"] = pa.array(sentences.astype(np.int32))
        return rules, signals, c4


def _medprep_gopher(text: pa.Array, chars: np.ndarray, cfg: HeuristicsConfig):
    """compat: medprep. Words: whitespace-separated, with punctuation split off except inside
    decimals (0.05), hyphenated terms (cross-sectional) and before apostrophes; lower-cased for
    stop words and n-grams. Returns the Gopher rules (the seeds' word minimum first), the
    word signals, and the words per document."""
    n = len(text)
    safe_chars = np.maximum(chars, 1)
    spaced = pc.replace_substring_regex(text, _WORD_SPLIT, r" \1 ")
    words = split_words(spaced)
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
    n_words = per_doc(has_word_char)  # words that are not pure symbols
    safe_words = np.maximum(n_words_all, 1)
    avg_len = per_doc(word_len * has_word_char) / np.maximum(n_words, 1)
    alpha_ratio = per_doc(has_alpha) / safe_words
    stop_count = per_doc(is_stop)
    # '#', '...' and '…' together, per word.
    hashes = (
        pc.count_substring(text, "#").to_numpy(zero_copy_only=False)
        + pc.count_substring(text, "...").to_numpy(zero_copy_only=False)
        + pc.count_substring(text, "…").to_numpy(zero_copy_only=False)
    )
    symbol_ratio = hashes / safe_words

    # Lines split on "\n" and stripped; a bullet is any of BULLETS; empty lines do not count
    # as duplicates.
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
    dup_para_frac, dup_para_chars = _duplicate_units(
        pc.utf8_trim_whitespace(paras), np.repeat(np.arange(n), para_counts), n
    )

    # Top n-gram: the largest count x length of any n-gram; duplicate n-grams: every word a
    # repeated n-gram covers.
    word_ids = pc.dictionary_encode(lowered).indices.to_numpy(zero_copy_only=False).astype(np.uint64)
    ngrams = _NgramHashes(word_ids, doc_of_word)
    ngram_rules = []
    for k, limit in sorted(cfg.top_ngram_max_fraction.items()):
        top = _top_ngram_chars(ngrams, word_len, k, n)
        ngram_rules.append((f"gopher_top_{k}gram", top / safe_chars > limit))
    # A repeated k-gram contains a repeated shorter one: longer k only where the shortest repeats.
    candidates = None
    for k, limit in sorted(cfg.dup_ngram_max_fraction.items()):
        dup = _duplicate_ngram_chars(ngrams, word_len, k, n, candidates)
        ngram_rules.append((f"gopher_dup_{k}gram", dup / safe_chars > limit))
        candidates = dup > 0 if candidates is None else candidates & (dup > 0)

    rules = _gopher_rules(
        cfg,
        n_words,
        avg_len,
        symbol_ratio > cfg.max_symbol_word_ratio,
        bullet_ratio,
        ellipsis_ratio,
        alpha_ratio,
        stop_count,
        dup_line_frac,
        dup_para_frac,
        dup_line_chars / safe_chars,
        dup_para_chars / safe_chars,
        ngram_rules,
    )
    signals = _signal_columns(n_words, alpha_ratio, avg_len)
    return rules, signals, n_words_all


def _gopher_rules(
    cfg,
    n_words,
    avg_len,
    symbol_fails,
    bullet_ratio,
    ellipsis_ratio,
    alpha_ratio,
    stop_count,
    dup_line_frac,
    dup_para_frac,
    dup_line_char_frac,
    dup_para_char_frac,
    ngram_rules,
):
    """The seeds' word minimum, then Gopher quality and repetition, in the stage's order."""
    with np.errstate(invalid="ignore"):  # datatrove's mean word length is NaN without words
        avg_fails = (avg_len < cfg.min_avg_word_length) | (avg_len > cfg.max_avg_word_length)
    return [
        ("too_few_words", n_words < cfg.min_words),
        ("gopher_too_many_words", n_words > cfg.max_words),
        ("gopher_avg_word_length", avg_fails),
        ("gopher_symbol_word_ratio", symbol_fails),
        ("gopher_bullet_lines", bullet_ratio > cfg.max_bullet_lines_ratio),
        ("gopher_ellipsis_lines", ellipsis_ratio > cfg.max_ellipsis_lines_ratio),
        ("gopher_alpha_words", alpha_ratio < cfg.min_alpha_words_ratio),
        ("gopher_stop_words", stop_count < cfg.min_stop_words),
        ("gopher_dup_lines", dup_line_frac > cfg.max_dup_line_fraction),
        ("gopher_dup_paragraphs", dup_para_frac > cfg.max_dup_para_fraction),
        ("gopher_dup_line_chars", dup_line_char_frac > cfg.max_dup_line_char_fraction),
        ("gopher_dup_paragraph_chars", dup_para_char_frac > cfg.max_dup_para_char_fraction),
        *ngram_rules,
    ]


# Python's str.isspace characters, for RE2 (whose \s is ASCII only).
_PY_SPACE = r"[\t\n\x0b\x0c\r\x1c-\x1f\x{85}\p{Z}]"


def _per_doc(values, owner: np.ndarray, n: int) -> np.ndarray:
    """Per-item values summed by their owner (a document, a line)."""
    return np.bincount(owner, weights=values, minlength=n)


def _signal_columns(n_words, alpha_ratio, avg_len) -> dict:
    """The Gopher signals both compat modes keep as annotation columns."""
    return {
        "n_words": pa.array(n_words.astype(np.int32)),
        "alpha_words_ratio": pa.array(alpha_ratio.astype(np.float32)),
        "avg_word_length": pa.array(avg_len.astype(np.float32)),
    }


def _datatrove_gopher(text: pa.Array, words: Words, chars: np.ndarray, cfg: HeuristicsConfig):
    """compat: datatrove. Every measure as datatrove 0.10's GopherQualityFilter and
    GopherRepetitionFilter compute it, on spaCy's English tokens (pipeline/stages/heuristics/spacy_words.py)."""
    n = len(text)
    safe_chars = np.maximum(chars, 1)
    doc = words.doc
    n_tokens = words.counts.astype(np.float64)
    safe_tokens = np.maximum(n_tokens, 1)
    lengths = words.lengths
    # A symbol word is all datatrove punctuation; an alpha word has a str.isalpha character.
    word = ~words.all_flag(DT_PUNCT)
    n_words = _per_doc(word, doc, n)
    with np.errstate(invalid="ignore", divide="ignore"):
        avg_len = _per_doc(lengths * word, doc, n) / n_words  # NaN without words, as np.mean
    alpha_ratio = _per_doc(words.any_flag(ALPHA), doc, n) / safe_tokens
    # Stop words: how many of the (case-sensitive) stop words occur.
    token_hash = words.hashes()
    stop_id = np.full(len(token_hash), -1, np.int64)
    for i, w in enumerate(STOP_WORDS):
        stop_id[(token_hash == np.uint64(string_hash(w))) & (lengths == len(w))] = i
    hit = stop_id >= 0
    stop_count = np.bincount(np.unique(doc[hit] * len(STOP_WORDS) + stop_id[hit]) // len(STOP_WORDS), minlength=n)
    # '#' per word and '...'/'…' per word, each against the threshold.
    hash_ratio = pc.count_substring(text, "#").to_numpy(zero_copy_only=False) / safe_tokens
    ellipsis_count = pc.count_substring(text, "...").to_numpy(zero_copy_only=False) + pc.count_substring(
        text, "…"
    ).to_numpy(zero_copy_only=False)
    symbol_fails = (hash_ratio > cfg.max_symbol_word_ratio) | (ellipsis_count / safe_tokens > cfg.max_symbol_word_ratio)
    # str.splitlines(): a line break at the very end opens no line.
    lines_list = pc.split_pattern_regex(text, _LINE_BREAK)
    line_counts = pc.list_value_length(lines_list).to_numpy(zero_copy_only=False).astype(np.int64)
    doc_of_line = np.repeat(np.arange(n), line_counts)
    ends_in_break = pc.match_substring_regex(text, "(?:" + _LINE_BREAK + ")$").to_numpy(zero_copy_only=False)
    n_lines = np.where(chars > 0, line_counts - ends_in_break, 0)
    lines = pc.list_flatten(lines_list)
    bullet = pc.match_substring_regex(lines, "^" + _PY_SPACE + "*[•-]").to_numpy(zero_copy_only=False)
    ellipsis = pc.match_substring_regex(lines, r"(?:\.\.\.|…)" + _PY_SPACE + "*$").to_numpy(zero_copy_only=False)
    bullet_ratio = np.bincount(doc_of_line, bullet, n) / np.maximum(n_lines, 1)
    ellipsis_ratio = np.bincount(doc_of_line, ellipsis, n) / np.maximum(n_lines, 1)
    # Repetition: paragraphs of the stripped text split on 2+ newlines, lines split on 1+, kept
    # as they are (empty ones too); the character fractions are of the whole text.
    stripped = pc.utf8_trim_whitespace(text)  # Arrow's whitespace is str.isspace
    paras_list = pc.split_pattern_regex(stripped, r"\n{2,}")
    para_counts = pc.list_value_length(paras_list).to_numpy(zero_copy_only=False).astype(np.int64)
    dup_para_frac, dup_para_chars = _duplicate_units(
        pc.list_flatten(paras_list), np.repeat(np.arange(n), para_counts), n, skip_empty=False
    )
    rep_lines = pc.split_pattern_regex(text, r"\n+")
    rep_counts = pc.list_value_length(rep_lines).to_numpy(zero_copy_only=False).astype(np.int64)
    dup_line_frac, dup_line_chars = _duplicate_units(
        pc.list_flatten(rep_lines), np.repeat(np.arange(n), rep_counts), n, skip_empty=False
    )
    ngram_rules = []
    # Only the decisions are kept, so a document is measured only where a bound says the rule
    # could fire: a k-gram occurs at most as often as its first k-1 words do, and is at most
    # the document's longest k-gram long; a k-gram repeat lies within the words repeated
    # 5-grams (the smallest k) cover.
    tuple_ids = _NgramHashes(_mix64(token_hash), doc, _doc_bits(n))
    count_bound = None
    for k, limit in sorted(cfg.top_ngram_max_fraction.items()):
        need = None if count_bound is None else count_bound * _longest_ngram(lengths, doc, k, n) / safe_chars > limit
        top, most = _top_ngram_chars_dt(tuple_ids, lengths, k, n, need)
        ngram_rules.append((f"gopher_top_{k}gram", top / safe_chars > limit))
        count_bound = most if count_bound is None else np.where(need, most, count_bound)
    candidates, covered = None, None
    for k, limit in sorted(cfg.dup_ngram_max_fraction.items()):
        docs = None if candidates is None else candidates & (covered / safe_chars > limit)
        dup, cover = _duplicate_ngram_chars_dt(words, k, n, docs)
        ngram_rules.append((f"gopher_dup_{k}gram", dup / safe_chars > limit))
        if candidates is None:
            # Repeats of longer k-grams start with repeated shortest ones (as word sequences:
            # a repeat only as joined text, with other word boundaries, is not looked for).
            candidates, covered = dup > 0, cover
    rules = [("empty", chars == 0)] + _gopher_rules(
        cfg,
        n_words,
        avg_len,
        symbol_fails,
        bullet_ratio,
        ellipsis_ratio,
        alpha_ratio,
        stop_count,
        dup_line_frac,
        dup_para_frac,
        dup_line_chars / safe_chars,
        dup_para_chars / safe_chars,
        ngram_rules,
    )
    signals = _signal_columns(n_words, alpha_ratio, avg_len)
    return rules, signals, n_tokens


def _fineweb_rules(text: pa.Array, chars: np.ndarray, n_words: np.ndarray, cfg: HeuristicsConfig):
    """datatrove's FineWebQualityFilter: over the lines (split on "\n", blank ones dropped,
    the others as they are), the fraction ending in terminal punctuation, the fraction of short
    lines, the characters in repeated lines per non-newline character; then newlines per word
    (words of the stage's compat mode)."""
    n = len(text)
    lines_list = pc.split_pattern(text, "\n")
    counts = pc.list_value_length(lines_list).to_numpy(zero_copy_only=False).astype(np.int64)
    lines = pc.list_flatten(lines_list)
    owner = np.repeat(np.arange(n), counts)
    keep = pc.utf8_length(pc.utf8_trim_whitespace(lines)).to_numpy(zero_copy_only=False) > 0
    lines, owner = lines.filter(pa.array(keep)), owner[keep]
    n_lines = np.bincount(owner, minlength=n)
    safe = np.maximum(n_lines, 1)
    stop = cfg.fineweb_stop_chars if cfg.fineweb_stop_chars is not None else sorted(DT_TERMINAL_PUNCTUATION)
    ends = (
        pc.match_substring_regex(lines, "[" + "".join(f"\\x{{{ord(c):x}}}" for c in stop) + "]$").to_numpy(
            zero_copy_only=False
        )
        if stop
        else np.zeros(len(lines), bool)
    )
    punct_ratio = np.bincount(owner, ends, n) / safe
    low_punct = punct_ratio < cfg.fineweb_line_punct_thr
    if cfg.fineweb_line_punct_exclude_zero:
        low_punct &= punct_ratio != 0
    short = pc.utf8_length(lines).to_numpy(zero_copy_only=False) <= cfg.fineweb_short_line_length
    newlines = pc.count_substring(text, "\n").to_numpy(zero_copy_only=False)
    _, dup_chars = _duplicate_units(lines, owner, n, skip_empty=False)
    empty = n_lines == 0
    return [
        ("fineweb_empty", empty),
        ("fineweb_line_punct_ratio", ~empty & low_punct),
        ("fineweb_short_line_ratio", np.bincount(owner, short, n) / safe > cfg.fineweb_short_line_thr),
        ("fineweb_char_dup_ratio", dup_chars / np.maximum(chars - newlines, 1) > cfg.fineweb_char_duplicates_ratio),
        ("fineweb_list_ratio", ~empty & (newlines / np.maximum(n_words, 1) > cfg.fineweb_new_line_ratio)),
    ]


# datatrove's C4QualityFilter (after TFDS c4_utils): citations, terminal punctuation, policy text.
_CITATION = r"\[\d*\]|\[edit\]|\[citation needed\]"
_POLICY = ["terms of use", "privacy policy", "cookie policy", "uses cookies", "use of cookies", "use cookies"]
# str.splitlines() boundaries.
_LINE_BREAK = r"\r\n|[\n\r\x0b\x0c\x1c\x1d\x1e\x{85}\x{2028}\x{2029}]"
# compat: medprep counts C4's sentences close to how spaCy's sentencizer (what datatrove uses for
# English) finds them (compat: datatrove runs the sentencizer's rule on spaCy's tokens, from
# pipeline/stages/heuristics/spacy_words.py): a token ".", "!" or "?" followed by a token that is
# not punctuation. Tokens here are
# whitespace-separated chunks with opening/closing punctuation stripped; a chunk ending in a
# period is not a sentence end when spaCy keeps the period inside an abbreviation token
# (initials such as "e.g." or "U.S.", and spaCy's English abbreviation exceptions below).
_TERMINAL = r"[.!?\x{0589}\x{061F}\x{06D4}\x{0964}\x{0965}\x{3002}\x{FF01}\x{FF1F}\x{203C}\x{203D}]"
_ABBREVIATIONS = [
    "Mt.",
    "Ak.",
    "Ala.",
    "Apr.",
    "Ariz.",
    "Ark.",
    "Aug.",
    "Calif.",
    "Colo.",
    "Conn.",
    "Dec.",
    "Del.",
    "Feb.",
    "Fla.",
    "Ga.",
    "Ia.",
    "Id.",
    "Ill.",
    "Ind.",
    "Jan.",
    "Jul.",
    "Jun.",
    "Kan.",
    "Kans.",
    "Ky.",
    "La.",
    "Mar.",
    "Mass.",
    "Mich.",
    "Minn.",
    "Miss.",
    "Neb.",
    "Nebr.",
    "Nev.",
    "Nov.",
    "Oct.",
    "Okla.",
    "Ore.",
    "Pa.",
    "Sep.",
    "Sept.",
    "Tenn.",
    "Va.",
    "Wash.",
    "Wis.",
    "Adm.",
    "Bros.",
    "co.",
    "Co.",
    "Corp.",
    "Dr.",
    "Gen.",
    "Gov.",
    "Inc.",
    "Jr.",
    "Ltd.",
    "Md.",
    "Messrs.",
    "Mo.",
    "Mont.",
    "Mr.",
    "Mrs.",
    "Ms.",
    "Ph.D.",
    "Prof.",
    "Rep.",
    "Rev.",
    "Sen.",
    "St.",
    "vs.",
    "v.s.",
    "a.m.",
    "p.m.",
    "°c.",
    "°f.",
    "°k.",
    "°C.",
    "°F.",
    "°K.",
]


def _sentence_counts(chunks_list: pa.Array, doc_of_line: np.ndarray, n: int) -> np.ndarray:
    """Sentences per document, summed over its lines (each line split on its own, as
    datatrove counts them), by spaCy's sentencizer rule on the lines' whitespace chunks."""
    per_line = pc.list_value_length(chunks_list).to_numpy(zero_copy_only=False).astype(np.int64)
    chunks = pc.list_flatten(chunks_list)
    n_lines = len(per_line)
    line_of_chunk = np.repeat(np.arange(n_lines), per_line)
    nonempty = pc.utf8_length(chunks).to_numpy(zero_copy_only=False) > 0
    wordy = pc.match_substring_regex(chunks, r"[\p{L}\p{N}]").to_numpy(zero_copy_only=False)
    # Only chunks holding a terminal mark can end a sentence: the finer checks run on those.
    cand = np.flatnonzero(pc.match_substring_regex(chunks, _TERMINAL).to_numpy(zero_copy_only=False))
    sub = chunks.take(pa.array(cand))
    core = pc.replace_substring_regex(sub, r"^[(\[{\"'“‘«]+|[)\]}\"'”’»,;:]+$", "")
    ends = pc.match_substring_regex(core, _TERMINAL + "$").to_numpy(zero_copy_only=False)
    abbrev = pc.is_in(core, pa.array(_ABBREVIATIONS, core.type)).to_numpy(
        zero_copy_only=False
    ) | pc.match_substring_regex(core, r"^(?:\p{L}\.)+$|\.\.$").to_numpy(zero_copy_only=False)
    # A boundary needs a non-punctuation token after it in the same line.
    last_wordy = np.full(n_lines, -1, np.int64)
    wordy_idx = np.flatnonzero(wordy)
    np.maximum.at(last_wordy, line_of_chunk[wordy_idx], wordy_idx)
    boundary = ends & ~abbrev & (cand < last_wordy[line_of_chunk[cand]])
    # spaCy also splits a period between a lowercase and an uppercase letter ("end.Next").
    infix = pc.count_substring_regex(sub, r"\p{Ll}\.\p{Lu}").to_numpy(zero_copy_only=False)
    line_of_cand = line_of_chunk[cand]
    per_line_sent = np.bincount(line_of_cand, boundary + infix, n_lines) + (
        np.bincount(line_of_chunk, nonempty, n_lines) > 0
    )
    return np.bincount(doc_of_line, per_line_sent, n)


def _c4_lines(text: pa.Array, n: int, cfg: HeuristicsConfig, words: Words | None = None) -> dict:
    """datatrove's C4QualityFilter line rules over the whole batch: which documents lorem
    ipsum or a curly brace removes, the kept lines' text and sentence count, lines dropped.
    `words`: the batch's spaCy tokens (compat datatrove), whose sentences the kept lines count
    (without them, the kept lines are tokenized again)."""
    lines_list = pc.split_pattern_regex(text, _LINE_BREAK)
    line_counts = pc.list_value_length(lines_list).to_numpy(zero_copy_only=False).astype(np.int64)
    doc_of_line = np.repeat(np.arange(n), line_counts)
    untrimmed = pc.list_flatten(lines_list)
    lines = pc.utf8_trim_whitespace(untrimmed)
    # Enough words, as str.split() finds them.
    enough_words = _at_least_words(lines, cfg.c4_min_words_per_line)
    # Only a line longer than the longest word allowed can hold a longer word.
    long_word = np.zeros(len(lines), bool)
    long_lines = np.flatnonzero(pc.utf8_length(lines).to_numpy(zero_copy_only=False) > cfg.c4_max_word_length)
    if len(long_lines):
        long_words = split_words(lines.take(pa.array(long_lines)))
        lengths = pc.utf8_length(pc.list_flatten(long_words)).to_numpy(zero_copy_only=False)
        owner = np.repeat(np.arange(len(long_lines)), pc.list_value_length(long_words).to_numpy(zero_copy_only=False))
        long_word[long_lines] = np.bincount(owner, lengths > cfg.c4_max_word_length, len(long_lines)) > 0
    original_lines = lines
    bracket = None
    if cfg.c4_remove_citations:
        # Only a line with a "[" can hold a citation: the regex runs on those.
        bracket = pc.match_substring(lines, "[")
        if pc.any(bracket).as_py():
            lines = pc.replace_with_mask(
                lines, bracket, pc.replace_substring_regex(lines.filter(bracket), _CITATION, "")
            )
    terminal = pc.match_substring_regex(lines, r"[.?!\"']$").to_numpy(zero_copy_only=False) & ~pc.ends_with(
        lines, "..."
    ).to_numpy(zero_copy_only=False)
    lowered = pc.utf8_lower(lines)
    reaches_content = ~long_word & terminal & enough_words
    lorem = reaches_content & pc.match_substring(lowered, "lorem ipsum").to_numpy(zero_copy_only=False)
    javascript = pc.match_substring(lowered, "javascript").to_numpy(zero_copy_only=False)
    curly = reaches_content & ~javascript & pc.match_substring(lines, "{").to_numpy(zero_copy_only=False)
    policy = pc.match_substring_regex(lowered, "|".join(_POLICY)).to_numpy(zero_copy_only=False)
    kept = reaches_content & ~javascript & ~policy
    kept_per_doc = np.bincount(doc_of_line[kept], minlength=n)
    kept_lines = lines.filter(pa.array(kept))
    offsets = pa.array(np.concatenate([[0], np.cumsum(kept_per_doc)]).astype(np.int32))
    new_text = pc.utf8_trim_whitespace(pc.binary_join(pa.ListArray.from_arrays(offsets, kept_lines), "\n"))
    return {
        "lorem": _per_doc(lorem, doc_of_line, n) > 0,
        "curly": _per_doc(curly, doc_of_line, n) > 0,
        "text": new_text,
        "kept_per_doc": kept_per_doc,
        "dropped_per_doc": line_counts - kept_per_doc,
        "sentences": (
            np.bincount(
                doc_of_line[kept],
                english_words().sentences(kept_lines)
                if words is None
                else _kept_line_sentences(words, untrimmed, lines, kept, bracket),
                n,
            )
            if cfg.compat == "datatrove"
            else _sentence_counts(split_words(original_lines.filter(pa.array(kept))), doc_of_line[kept], n)
        ),
    }


_LINE_BREAK_CHARS = np.array([0x0A, 0x0B, 0x0C, 0x0D, 0x1C, 0x1D, 0x1E, 0x85, 0x2028, 0x2029], np.uint32)


def _line_starts(cps: np.ndarray, doc_offsets: np.ndarray) -> np.ndarray:
    """Where each line of each document starts (positions in cps), as split_pattern_regex
    with _LINE_BREAK cuts them: after each break ("\r\n" is one), a document's start too."""
    crlf = np.zeros(len(cps), bool)
    crlf[1:] = (cps[1:] == 0x0A) & (cps[:-1] == 0x0D)
    starts = doc_offsets[:-1]
    crlf[starts[starts < len(cps)]] = False  # no pair across two documents
    breaks = np.flatnonzero(np.isin(cps, _LINE_BREAK_CHARS) & ~crlf)
    after = breaks + 1  # "\r\n": one byte more
    inside = after < len(cps)
    after[inside] += crlf[after[inside]]
    doc = np.concatenate([np.arange(len(starts)), np.searchsorted(doc_offsets, breaks, side="right") - 1])
    at = np.concatenate([starts, after])
    return at[np.lexsort((at, doc))]


def _kept_line_sentences(
    words: Words, untrimmed: pa.Array, lines: pa.Array, kept: np.ndarray, bracket: pa.Array | None
) -> np.ndarray:
    """spaCy's sentences in each kept line, from the documents' tokens (Words.sentences_in_spans)
    where the line is a span of its document: its text unchanged by the citation rule, and its
    trimmed ends non-space to spaCy too (Arrow's trim and str.isspace may differ on a
    character). Any other kept line is tokenized again, alone."""
    kept_idx = np.flatnonzero(kept)
    starts = _line_starts(words.raw_cps, words.doc_offsets)
    if len(starts) != len(untrimmed):  # not the split Arrow made: every line alone
        return english_words().sentences(lines.filter(pa.array(kept)))
    raw = untrimmed.take(pa.array(kept_idx))
    trimmed = lines.take(pa.array(kept_idx))
    length = pc.utf8_length(trimmed).to_numpy(zero_copy_only=False).astype(np.int64)
    lead = (
        pc.utf8_length(raw).to_numpy(zero_copy_only=False)
        - pc.utf8_length(pc.utf8_ltrim_whitespace(raw)).to_numpy(zero_copy_only=False)
    ).astype(np.int64)
    a = starts[kept_idx] + lead
    b = a + length
    space = (words.raw_flags & SPACE) != 0
    last = len(space) - 1
    span = (length > 0) & ~space[np.minimum(a, last)] & ~space[np.clip(b - 1, 0, last)]
    if bracket is not None:
        span &= ~bracket.take(pa.array(kept_idx)).to_numpy(zero_copy_only=False)
    out = np.zeros(len(kept_idx), np.int64)
    out[span] = words.sentences_in_spans(a[span], b[span])
    if not span.all():
        out[~span] = english_words().sentences(trimmed.filter(pa.array(~span)))
    return out


# What str.split() splits a line on (a line holds no line break): RE2's \s is ASCII only, so
# the Unicode separators are added.
_STR_SPLIT_SEPARATOR = r"[\s\p{Z}\x{1c}-\x{1f}\x{85}]"
_STR_SPLIT_WORD = "[^" + _STR_SPLIT_SEPARATOR[1:]


def _at_least_words(lines: pa.Array, k: int) -> np.ndarray:
    """len(line.split()) >= k for each line, by an anchored regex that stops at the k-th word
    (counting every word of every line took most of the C4 line rules' time)."""
    if k <= 0:
        return np.ones(len(lines), bool)
    pattern = f"^{_STR_SPLIT_SEPARATOR}*(?:{_STR_SPLIT_WORD}+{_STR_SPLIT_SEPARATOR}+){{{k - 1}}}{_STR_SPLIT_WORD}"
    return pc.match_substring_regex(lines, pattern).to_numpy(zero_copy_only=False)


def _duplicate_units(units: pa.Array, doc_of_unit: np.ndarray, n: int, skip_empty: bool = True):
    """Gopher's duplicate lines/paragraphs: fraction of units that repeat an earlier one in the
    same document, and the characters in those repeats. Empty units are ignored (medprep) or
    counted like the others (datatrove: its lines and paragraphs include empty ones)."""
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
    if skip_empty:
        repeat &= nonempty
    units_per_doc = np.maximum(np.bincount(doc_of_unit, nonempty if skip_empty else None, n), 1)
    return np.bincount(doc_of_unit, repeat, n) / units_per_doc, np.bincount(doc_of_unit, repeat * lens, n)


class _NgramHashes:
    """The batch's word k-grams that fit inside one document (engines/ngram_hash.py's rolling
    hash), as doc-major keys."""

    def __init__(self, word_ids: np.ndarray, doc_of_word: np.ndarray, doc_bits: int = 24):
        self.rolling, self.doc_of_word = RollingNgramHashes(word_ids), doc_of_word
        self.doc_bits = doc_bits

    def keys(self, k: int, docs: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Start positions of the k-grams that fit inside their document (of `docs` only, if
        given), and a doc-major 64-bit key: document in the top doc_bits bits (24 unless
        given), the k-gram's hash below, so sorting groups each document's k-grams together."""
        h = self.rolling.at(k)
        if not len(h):
            return np.zeros(0, np.int64), np.zeros(0, np.uint64)
        total = len(self.doc_of_word)
        doc = self.doc_of_word
        fits = doc[: total - k + 1] == doc[k - 1 :]
        if docs is not None:
            fits &= docs[doc[: total - k + 1]]
        pos = np.flatnonzero(fits)
        key = _doc_major(doc[pos], h[pos], self.doc_bits)
        return pos, key


def _doc_major(doc: np.ndarray, h: np.ndarray, doc_bits: int) -> np.ndarray:
    return (doc.astype(np.uint64) << np.uint64(64 - doc_bits)) | (h >> np.uint64(doc_bits))


def _mix64(h: np.ndarray) -> np.ndarray:
    """splitmix64's finalizer: polynomial string hashes differ only in their low bits for
    strings that differ by a small amount in their first characters; keys keep the high bits."""
    with np.errstate(over="ignore"):
        h = (h ^ (h >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        h = (h ^ (h >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return h ^ (h >> np.uint64(31))


def _doc_bits(n: int) -> int:
    """Bits enough to number n documents (the rest of a 64-bit key is hash)."""
    return max(1, int(n).bit_length())


def _runs(sorted_keys):
    """Start index and length of each run of equal keys in a sorted array."""
    edges = np.flatnonzero(np.concatenate([[True], sorted_keys[1:] != sorted_keys[:-1]]))
    return edges, np.diff(np.concatenate([edges, [len(sorted_keys)]]))


def _top_ngram_chars(ngrams: _NgramHashes, word_len, k, n):
    """Per document: the largest count x length (words joined by spaces) of any of its
    k-grams. Gopher measures the most frequent k-gram; this is at least as strict."""
    pos, key = ngrams.keys(k)
    doc_of_word = ngrams.doc_of_word
    out = np.zeros(n)
    if not len(pos):
        return out
    order = np.argsort(key)
    run_start, run_len = _runs(key[order])
    first_pos = pos[order[run_start]]
    cum = np.concatenate([[0], np.cumsum(word_len)])
    score = run_len * (cum[first_pos + k] - cum[first_pos] + (k - 1))
    doc = doc_of_word[first_pos]  # non-decreasing: keys are doc-major
    doc_start = np.flatnonzero(np.concatenate([[True], doc[1:] != doc[:-1]]))
    out[doc[doc_start]] = np.maximum.reduceat(score, doc_start)
    return out


def _duplicate_ngram_chars(ngrams: _NgramHashes, word_len, k, n, docs=None):
    """Per document: characters of the words covered by a k-gram seen earlier in the document
    (Gopher's duplicate n-gram fraction, counted by coverage)."""
    pos, key = ngrams.keys(k, docs)
    doc_of_word = ngrams.doc_of_word
    out = np.zeros(n)
    if not len(pos):
        return out
    order = np.argsort(key, kind="stable")
    sk = key[order]
    repeat_pos = pos[order[1:][sk[1:] == sk[:-1]]]
    if not len(repeat_pos):
        return out
    total = len(doc_of_word)
    cover = np.bincount(repeat_pos, minlength=total + 1) - np.bincount(repeat_pos + k, minlength=total + 1)
    covered = np.cumsum(cover)[:-1] > 0
    return np.bincount(doc_of_word, covered * word_len, n)


def _top_ngram_chars_dt(ngrams: _NgramHashes, word_len, k, n, docs=None):
    """Per document, as Gopher (datatrove's find_top_duplicate): the most frequent k-gram (the
    first to occur, among equally frequent ones), its count times its length (words joined by
    spaces), 0 where the document has fewer than k words; and that count. Only for `docs`
    (a mask) if given; 0 elsewhere."""
    pos, key = ngrams.keys(k, docs)
    out, most = np.zeros(n), np.zeros(n, np.int64)
    if not len(pos):
        return out, most
    order = np.argsort(key, kind="stable")  # stable: a group's first entry occurs first
    run_start, run_len = _runs(key[order])
    first_pos = pos[order[run_start]]
    doc = ngrams.doc_of_word[first_pos]  # non-decreasing: keys are doc-major
    span = len(ngrams.doc_of_word) + 1
    # The largest count, then the earliest first occurrence, as one number to maximize.
    score = run_len.astype(np.int64) * span - first_pos
    doc_start = np.flatnonzero(np.concatenate([[True], doc[1:] != doc[:-1]]))
    best = np.maximum.reduceat(score, doc_start)
    count = (best + span - 1) // span
    first = count * span - best
    cum = np.concatenate([[0], np.cumsum(word_len)])
    out[doc[doc_start]] = count * (cum[first + k] - cum[first] + (k - 1))
    most[doc[doc_start]] = count
    return out, most


def _longest_ngram(word_len, doc, k, n):
    """Per document, the length of its longest k-gram (words joined by spaces)."""
    out = np.zeros(n)
    total = len(doc)
    if total < k:
        return out
    cum = np.concatenate([[0], np.cumsum(word_len)])
    p = np.arange(total - k + 1)
    width = np.where(doc[p] == doc[p + k - 1], cum[p + k] - cum[p] + (k - 1), 0)
    counts = np.bincount(doc, minlength=n)
    first = np.cumsum(counts) - counts
    has = counts >= k  # then the document's k-grams start at first, first + 1, ...
    out[has] = np.maximum.reduceat(width, np.minimum(first, len(width) - 1))[has]
    return out


def _duplicate_ngram_chars_dt(words: Words, k, n, docs=None):
    """Per document, as datatrove's find_all_duplicate: walk the k-grams (words joined with no
    space); one seen before adds its length and moves the walk k words on (the k-grams it
    skips are not seen), any other is remembered and the walk moves one word on.

    Only k-grams that occur twice or more can repeat. Given which of their occurrences the
    walk visits, each one's status follows (a repeat if an earlier visited occurrence exists),
    and the walk's repeats are the greedy chain of those at least k apart; which occurrences
    are visited follows from the repeats. Starting from "all visited", the two are iterated to
    their fixed point, which is the walk's (each round settles at least up to the first
    occurrence that was wrong; one or two rounds in practice).

    Also returns, per document, the characters of the words that repeats of a k-gram cover
    (a bound on any longer k-gram's repeated characters)."""
    doc = words.doc
    out, cover = np.zeros(n), np.zeros(n)
    total = len(doc)
    if total < k:
        return out, cover
    p = np.arange(total - k + 1)
    fits = doc[p] == doc[p + k - 1]
    if docs is not None:
        fits &= docs[doc[p]]
    pos = p[fits]
    if not len(pos):
        return out, cover
    a, b = words.start[pos], words.end[pos + k - 1]
    key = _doc_major(doc[pos], _mix64(words.text.hash(a, b)), _doc_bits(n))
    order = np.argsort(key, kind="stable")
    run_start, run_len = _runs(key[order])
    multi = run_len >= 2
    if not multi.any():
        return out, cover
    g_start, g_len = run_start[multi], run_len[multi]
    g_first = np.cumsum(g_len) - g_len  # each group's first, in occ order
    occ = order[np.repeat(g_start, g_len) + np.arange(g_len.sum()) - np.repeat(g_first, g_len)]
    occ_pos, occ_len = pos[occ], (b - a)[occ]
    occ_group = np.repeat(np.arange(len(g_len)), g_len)
    by_pos = np.argsort(occ_pos)
    visited = np.ones(len(occ_pos), bool)
    never = np.iinfo(np.int64).max
    while True:
        first_visited = np.minimum.reduceat(np.where(visited, occ_pos, never), g_first)
        cand = np.sort(occ_pos[occ_pos > first_visited[occ_group]])
        picks = _greedy_chain(cand, doc[cand], k)
        i = np.searchsorted(picks, occ_pos) - 1  # the last repeat before each one
        now = ~((i >= 0) & (occ_pos < picks[np.maximum(i, 0)] + k)) if len(picks) else np.ones(len(occ_pos), bool)
        if np.array_equal(now, visited):
            break
        visited = now
    pick_len = occ_len[by_pos][np.searchsorted(occ_pos[by_pos], picks)]
    repeats = occ_pos[np.arange(len(occ_pos)) != np.repeat(g_first, g_len)]
    reach = np.cumsum(np.bincount(repeats, minlength=total + 1) - np.bincount(repeats + k, minlength=total + 1))[:-1]
    words_covered = reach > 0
    return np.bincount(doc[picks], pick_len, n), np.bincount(doc[words_covered], words.lengths[words_covered], n)


def _greedy_chain(cand: np.ndarray, doc: np.ndarray, k: int) -> np.ndarray:
    """The positions a left-to-right walk takes from sorted candidates: in each document its
    first one, then the next one at least k further, and so on (pointer doubling: the chain
    from each document's first candidate, marked in log2(len) rounds)."""
    m = len(cand)
    if not m:
        return cand
    jump = np.append(np.searchsorted(cand, cand + k), m)  # next candidate >= c + k (m: none)
    reach = np.zeros(m + 1, bool)
    reach[np.flatnonzero(np.concatenate([[True], doc[1:] != doc[:-1]]))] = True
    while True:
        grown = reach.copy()
        grown[jump[np.flatnonzero(reach)]] = True
        if np.array_equal(grown, reach):
            break
        reach, jump = grown, jump[jump]
    return cand[reach[:m]]
