"""heuristics: the seeds' rules, Gopher quality, Gopher repetition and C4 rules, each its own
removal reason. Defaults are datatrove's (and the seeds' 200-word minimum); configs/pubmed.yaml
loosens the ones biomedical text trips (see docs/filters.md: "heuristics: rules for biomedical text").

Vectorized over the batch: words come from Arrow's list kernels, word n-grams are hashed in
numpy over the flattened batch (rolling hashes, one pass per n), and repeats are found by one
sort per n. C4's line and sentence rules (`c4_lines`, `c4_min_sentences`) work on the batch's
flattened lines the same way, and rewrite the text of the documents they keep."""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pydantic import Field

from pipeline.documents import first_reason, set_column, split_words
from pipeline.stages.base import DocumentStage, StageConfig

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


class Heuristics(DocumentStage):
    name = "heuristics"
    summary = "seeds' length/punctuation rules, Gopher quality and repetition, C4 rules"
    Config = HeuristicsConfig

    def output_fields(self):
        fields = [pa.field("n_words", pa.int32()), pa.field("punct_fraction", pa.float32()),
                  pa.field("alpha_words_ratio", pa.float32()), pa.field("avg_word_length", pa.float32())]
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

    def evaluate(self, text: pa.Array) -> tuple[list[tuple[str, np.ndarray]], dict[str, pa.Array], dict | None]:
        """Every enabled rule's mask (in the order reasons are given), the signal columns, and
        C4's line results when c4_lines is on. scripts/heuristics_table.py reads the masks."""
        cfg = self.config
        n = len(text)
        chars = pc.utf8_length(text).to_numpy(zero_copy_only=False).astype(np.float64)
        safe_chars = np.maximum(chars, 1)

        # Words: punctuation split off (but keep decimals like 0.05 and hyphenated terms whole).
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
        c4 = _c4_lines(text, n, cfg) if cfg.c4_lines else None
        if cfg.c4_lorem_ipsum:
            rules.append(("c4_lorem_ipsum", c4["lorem"] if c4 else
                          pc.match_substring(lowered_text, "lorem ipsum").to_numpy(zero_copy_only=False)))
        if cfg.c4_curly_braces:
            rules.append(("c4_curly_braces", c4["curly"] if c4 else
                          pc.match_substring_regex(text, "[{}]").to_numpy(zero_copy_only=False)))
        sentences = None
        if c4:
            sentences = c4["sentences"]
            rules.append(("c4_no_lines_left", c4["kept_per_doc"] == 0))
        elif cfg.c4_min_sentences:
            sentences = _sentence_counts(split_words(pc.list_flatten(lines)), doc_of_line, n)
        if cfg.c4_min_sentences:
            rules.append(("c4_too_few_sentences", sentences < cfg.c4_min_sentences))
        if cfg.c4_boilerplate_lines:
            js = pc.match_substring_regex(lowered_text, r"(?m)^.*javascript.*(enable|browser|disabled|required).*$|(?m)^.*(enable|browser).*javascript.*$")
            cookie = pc.match_substring_regex(lowered_text, r"cookie (policy|settings|preferences)|(uses|use of|accept( all)?) cookies")
            rules.append(("c4_javascript_notice", js.to_numpy(zero_copy_only=False)))
            rules.append(("c4_cookie_notice", cookie.to_numpy(zero_copy_only=False)))

        signals = {"n_words": pa.array(n_words.astype(np.int32)), "punct_fraction": pa.array(punct_frac.astype(np.float32)),
                   "alpha_words_ratio": pa.array(alpha_ratio.astype(np.float32)),
                   "avg_word_length": pa.array(avg_len.astype(np.float32))}
        if sentences is not None:
            signals["c4_sentences"] = pa.array(sentences.astype(np.int32))
        return rules, signals, c4


# datatrove's C4QualityFilter (after TFDS c4_utils): citations, terminal punctuation, policy text.
_CITATION = r"\[\d*\]|\[edit\]|\[citation needed\]"
_POLICY = ["terms of use", "privacy policy", "cookie policy", "uses cookies", "use of cookies", "use cookies"]
# str.splitlines() boundaries.
_LINE_BREAK = r"\r\n|[\n\r\x0b\x0c\x1c\x1d\x1e\x{85}\x{2028}\x{2029}]"
# Sentences are counted as spaCy's sentencizer (what datatrove uses for English) finds them: a
# token ".", "!" or "?" followed by a token that is not punctuation. Tokens here are
# whitespace-separated chunks with opening/closing punctuation stripped; a chunk ending in a
# period is not a sentence end when spaCy keeps the period inside an abbreviation token
# (initials such as "e.g." or "U.S.", and spaCy's English abbreviation exceptions below).
_TERMINAL = r"[.!?\x{0589}\x{061F}\x{06D4}\x{0964}\x{0965}\x{3002}\x{FF01}\x{FF1F}\x{203C}\x{203D}]"
_ABBREVIATIONS = [
    "Mt.", "Ak.", "Ala.", "Apr.", "Ariz.", "Ark.", "Aug.", "Calif.", "Colo.", "Conn.", "Dec.", "Del.", "Feb.", "Fla.",
    "Ga.", "Ia.", "Id.", "Ill.", "Ind.", "Jan.", "Jul.", "Jun.", "Kan.", "Kans.", "Ky.", "La.", "Mar.", "Mass.",
    "Mich.", "Minn.", "Miss.", "Neb.", "Nebr.", "Nev.", "Nov.", "Oct.", "Okla.", "Ore.", "Pa.", "Sep.", "Sept.",
    "Tenn.", "Va.", "Wash.", "Wis.", "Adm.", "Bros.", "co.", "Co.", "Corp.", "Dr.", "Gen.", "Gov.", "Inc.", "Jr.",
    "Ltd.", "Md.", "Messrs.", "Mo.", "Mont.", "Mr.", "Mrs.", "Ms.", "Ph.D.", "Prof.", "Rep.", "Rev.", "Sen.", "St.",
    "vs.", "v.s.", "a.m.", "p.m.", "°c.", "°f.", "°k.", "°C.", "°F.", "°K."]


def _per_item(values: np.ndarray, owner: np.ndarray, n: int) -> np.ndarray:
    return np.bincount(owner, weights=values, minlength=n)


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
    abbrev = (pc.is_in(core, pa.array(_ABBREVIATIONS, core.type)).to_numpy(zero_copy_only=False)
              | pc.match_substring_regex(core, r"^(?:\p{L}\.)+$|\.\.$").to_numpy(zero_copy_only=False))
    # A boundary needs a non-punctuation token after it in the same line.
    last_wordy = np.full(n_lines, -1, np.int64)
    wordy_idx = np.flatnonzero(wordy)
    np.maximum.at(last_wordy, line_of_chunk[wordy_idx], wordy_idx)
    boundary = ends & ~abbrev & (cand < last_wordy[line_of_chunk[cand]])
    # spaCy also splits a period between a lowercase and an uppercase letter ("end.Next").
    infix = pc.count_substring_regex(sub, r"\p{Ll}\.\p{Lu}").to_numpy(zero_copy_only=False)
    line_of_cand = line_of_chunk[cand]
    per_line_sent = (np.bincount(line_of_cand, boundary + infix, n_lines)
                     + (np.bincount(line_of_chunk, nonempty, n_lines) > 0))
    return np.bincount(doc_of_line, per_line_sent, n)


def _c4_lines(text: pa.Array, n: int, cfg: HeuristicsConfig) -> dict:
    """datatrove's C4QualityFilter line rules over the whole batch: which documents lorem
    ipsum or a curly brace removes, the kept lines' text and sentence count, lines dropped."""
    lines_list = pc.split_pattern_regex(text, _LINE_BREAK)
    line_counts = pc.list_value_length(lines_list).to_numpy(zero_copy_only=False).astype(np.int64)
    doc_of_line = np.repeat(np.arange(n), line_counts)
    lines = pc.utf8_trim_whitespace(pc.list_flatten(lines_list))
    # Words as str.split() finds them (RE2's \s is ASCII only: add the Unicode separators).
    n_words = pc.count_substring_regex(lines, r"[^\s\p{Z}\x{1c}-\x{1f}\x{85}]+").to_numpy(zero_copy_only=False).astype(np.int64)
    # Only a line longer than the longest word allowed can hold a longer word.
    long_word = np.zeros(len(lines), bool)
    long_lines = np.flatnonzero(pc.utf8_length(lines).to_numpy(zero_copy_only=False) > cfg.c4_max_word_length)
    if len(long_lines):
        long_words = split_words(lines.take(pa.array(long_lines)))
        lengths = pc.utf8_length(pc.list_flatten(long_words)).to_numpy(zero_copy_only=False)
        owner = np.repeat(np.arange(len(long_lines)), pc.list_value_length(long_words).to_numpy(zero_copy_only=False))
        long_word[long_lines] = np.bincount(owner, lengths > cfg.c4_max_word_length, len(long_lines)) > 0
    original_lines = lines
    if cfg.c4_remove_citations:
        lines = pc.replace_substring_regex(lines, _CITATION, "")
    terminal = (pc.match_substring_regex(lines, r"[.?!\"']$").to_numpy(zero_copy_only=False)
                & ~pc.ends_with(lines, "...").to_numpy(zero_copy_only=False))
    lowered = pc.utf8_lower(lines)
    reaches_content = ~long_word & terminal & (n_words >= cfg.c4_min_words_per_line)
    lorem = reaches_content & pc.match_substring(lowered, "lorem ipsum").to_numpy(zero_copy_only=False)
    javascript = pc.match_substring(lowered, "javascript").to_numpy(zero_copy_only=False)
    curly = reaches_content & ~javascript & pc.match_substring(lines, "{").to_numpy(zero_copy_only=False)
    policy = pc.match_substring_regex(lowered, "|".join(_POLICY)).to_numpy(zero_copy_only=False)
    kept = reaches_content & ~javascript & ~policy
    kept_per_doc = np.bincount(doc_of_line[kept], minlength=n)
    kept_lines = lines.filter(pa.array(kept))
    offsets = pa.array(np.concatenate([[0], np.cumsum(kept_per_doc)]).astype(np.int32))
    new_text = pc.utf8_trim_whitespace(pc.binary_join(pa.ListArray.from_arrays(offsets, kept_lines), "\n"))
    return {"lorem": _per_item(lorem, doc_of_line, n) > 0, "curly": _per_item(curly, doc_of_line, n) > 0,
            "text": new_text, "kept_per_doc": kept_per_doc, "dropped_per_doc": line_counts - kept_per_doc,
            "sentences": _sentence_counts(split_words(original_lines.filter(pa.array(kept))),
                                          doc_of_line[kept], n)}


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


class _NgramHashes:
    """Rolling hashes of the batch's word k-grams, one k after another: the hash of the k-gram
    at p is (hash of the (k-1)-gram at p ^ word p+k-1) * MIX + k, so going from k-1 to k is
    one vectorized pass over the words, and asking for increasing k (2, 3, 4, then 5 ... 10)
    costs one pass per k."""

    def __init__(self, word_ids: np.ndarray, doc_of_word: np.ndarray):
        self.word_ids, self.doc_of_word = word_ids, doc_of_word
        self.k, self.h = 0, np.full(len(word_ids), _MIX, np.uint64)

    def keys(self, k: int, docs: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Start positions of the k-grams that fit inside their document (of `docs` only, if
        given), and a doc-major 64-bit key: document in the top 24 bits, a 40-bit hash of the
        k-gram below, so sorting groups each document's k-grams together."""
        total = len(self.word_ids)
        if total < k:
            return np.zeros(0, np.int64), np.zeros(0, np.uint64)
        if k < self.k:
            self.k, self.h = 0, np.full(total, _MIX, np.uint64)
        with np.errstate(over="ignore"):
            while self.k < k:
                j = self.k
                self.h = (self.h[:total - j] ^ self.word_ids[j:]) * _MIX + np.uint64(j + 1)
                self.k += 1
        doc = self.doc_of_word
        fits = doc[:total - k + 1] == doc[k - 1:]
        if docs is not None:
            fits &= docs[doc[:total - k + 1]]
        pos = np.flatnonzero(fits)
        key = (doc[pos].astype(np.uint64) << np.uint64(40)) | (self.h[pos] >> np.uint64(24))
        return pos, key


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
    doc = doc_of_word[first_pos]                 # non-decreasing: keys are doc-major
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
