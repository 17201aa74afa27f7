r"""CCNet's text normalization for KenLM, shared by the model build (scripts/models/build_kenlm.py)
and the perplexity stage so both see text the same way: lowercase, accents folded, digits to
0, unicode punctuation unified to ASCII, non-printing characters removed, and punctuation split
off words (our stand-in for CCNet's SentencePiece step). Each line becomes its tokens (a run of
letters and digits, or one other character) joined by single spaces.

Vectorized over the whole batch as one UTF-8 buffer, in numpy: comparisons classify the bytes
and one compaction writes the tokens with one space between two tokens of a line. Arrow's
Unicode kernels (NFD, mark removal, NFC, unicode digits and punctuation) run only on the
distinct chunks (text between ASCII spaces) that hold a non-ASCII character, spliced back in
before the byte pass, which tells a non-ASCII letter or digit from any other character by a
table of RE2's own `[\p{L}\p{N}]`. Exact because no step looks across an ASCII space or
control character: tests/test_perplexity.py checks the text and the perplexities against the
per-document regex implementation this replaced, on real abstracts."""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

# Unicode punctuation -> ASCII.
_PUNCT = {
    ",": "，、", ".": "。", '"': "„”“«»」「《》", "'": "´’‘", ":": "∶：", "?": "？", "!": "！",
    "(": "（", ")": "）", ";": "；", "-": "–—━►−", "~": "～", "<": "〈", ">": "〉", "[": "【", "]": "】",
    "%": "％", "x": "×", "...": "…",
}
_PUNCT_SOURCES = "[" + "".join(_PUNCT.values()) + "]"
_PUNCT_TABLE = {ord(source): target for target, sources in _PUNCT.items() for source in sources}
# Appended to every document of the batch: a line end the output keeps, unlike the text's own
# NUL bytes (spaces), so the documents are found again in the output.
_END = "\x00"
# What a non-ASCII character is to the tokenizer (after the fold).
_LETTER_OR_DIGIT, _CONTROL, _OTHER = 0, 1, 2


# Each code point's kind, learned as the batches bring it, 4,096 code points at a time (the
# abstracts' characters fall in 12 such ranges, 4 batches of 1,000 brought new ones; each
# classification is one regex call, most of it compiling the regex):
# classifying all of Unicode up front costs ~0.3 s per process, a tenth of a retune.
# _UNKNOWN: not classified yet.
_UNKNOWN = 255
_KINDS = np.full(0x110000, _UNKNOWN, np.uint8)


def _code_point_kinds(cp: np.ndarray) -> np.ndarray:
    r"""_LETTER_OR_DIGIT, _CONTROL (U+0080-U+009F, a space) or _OTHER (a token of its own) of
    each code point (those of valid UTF-8: no surrogates): RE2's [\p{L}\p{N}], so the byte
    pass splits exactly where the regex `[^\p{L}\p{N}\s]` did."""
    kinds = _KINDS[cp]
    unknown = kinds == _UNKNOWN
    if unknown.any():
        blocks = np.unique(cp[unknown] >> 12).astype(np.uint32)
        new = (blocks[:, None] << 12 | np.arange(4096, dtype=np.uint32)).ravel()
        new = new[(new < 0xD800) | (new > 0xDFFF)]                 # surrogates are not characters
        data = new.tobytes().decode("utf-32-le").encode("utf-8")
        size = 1 + (new >= 0x80) + (new >= 0x800) + (new >= 0x10000)
        offsets = np.concatenate([[0], np.cumsum(size)]).astype(np.int32)
        chars = pa.Array.from_buffers(pa.string(), len(new), [None, pa.py_buffer(offsets), pa.py_buffer(data)])
        letter = np.asarray(pc.match_substring_regex(chars, r"[\p{L}\p{N}]"))
        control = (new >= 0x80) & (new < 0xA0)
        _KINDS[new] = np.where(control, _CONTROL, np.where(letter, _LETTER_OR_DIGIT, _OTHER))
        kinds = _KINDS[cp]
    return kinds


def _fold_unicode(text):
    """Accents folded and unicode punctuation mapped to ASCII (a no-op on ASCII text)."""
    text = pc.utf8_normalize(text, form="NFD")
    text = pc.replace_substring_regex(text, r"\p{Mn}+", "")
    text = pc.utf8_normalize(text, form="NFC")
    text = pc.replace_substring_regex(text, r"\p{Nd}", "0")
    has = pc.match_substring_regex(text, _PUNCT_SOURCES)
    if pc.any(has).as_py():
        # One str.translate per string that holds one (a few hundred distinct chunks a batch),
        # not one Arrow call per punctuation character (36, most finding nothing).
        some = pa.array([t.translate(_PUNCT_TABLE) for t in pc.filter(text, has).to_pylist()], text.type)
        text = pc.replace_with_mask(text, has, some)
    return text


def _normalize_chunks(chunks: pa.Array) -> pa.Array:
    """`_fold_unicode` of lowercased chunks, once per distinct chunk."""
    encoded = pc.dictionary_encode(chunks)
    return pc.take(_fold_unicode(encoded.dictionary), encoded.indices)


def string_buffers(arr: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """(offsets, UTF-8 bytes) of a string array, offsets starting at 0."""
    offsets_type = np.int64 if pa.types.is_large_string(arr.type) else np.int32
    _, offsets, data = arr.buffers()
    offsets = np.frombuffer(offsets, offsets_type)[arr.offset:arr.offset + len(arr) + 1].astype(np.int64)
    data = np.frombuffer(data, np.uint8) if data is not None else np.zeros(0, np.uint8)
    return offsets - offsets[0], data[offsets[0]:offsets[-1]]


def _splice_non_ascii_chunks(data: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The buffer with each chunk that holds a non-ASCII byte replaced by `_normalize_chunks`
    of it, and where the document ends have moved to."""
    high = np.flatnonzero(data >= 0x80)
    if not len(high):
        return data, ends
    # Chunk bounds: spaces, controls and line ends (every document ends with one).
    bounds = np.flatnonzero((data <= 0x20) | (data == 0x7F))
    at = np.searchsorted(bounds, high)
    lo = np.where(at > 0, bounds[np.maximum(at - 1, 0)] + 1, 0)
    lo, first = np.unique(lo, return_index=True)
    lo, hi = lo.tolist(), bounds[at[first]].tolist()
    # One copy per piece (a chunk, the text between two chunks), not per byte.
    raw = np.concatenate([data[a:b] for a, b in zip(lo, hi)])
    raw_offsets = np.concatenate([[0], np.cumsum(np.subtract(hi, lo))]).astype(np.int32)
    chunks = pa.Array.from_buffers(pa.string(), len(lo), [None, pa.py_buffer(raw_offsets), pa.py_buffer(raw)])
    offsets, repl = string_buffers(_normalize_chunks(chunks))
    offsets = offsets.tolist()
    pieces, at = [], 0
    for i, (a, b) in enumerate(zip(lo, hi)):
        pieces += [data[at:a], repl[offsets[i]:offsets[i + 1]]]
        at = b
    pieces.append(data[at:])
    # A document end after k chunks moves by their length change.
    shift = np.concatenate([[0], np.cumsum(np.diff(offsets) - np.subtract(hi, lo))])
    return np.concatenate(pieces), ends + shift[np.searchsorted(lo, ends)]


def non_ascii_characters(data: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The non-ASCII characters of a UTF-8 buffer: where each starts (its lead byte), its size
    in bytes, its kind (_LETTER_OR_DIGIT: RE2's [\\p{L}\\p{N}], _CONTROL or _OTHER), by code
    point, and the positions of all their bytes, character by character."""
    lead = np.flatnonzero(data >= 0xC0)
    if not len(lead):
        return lead, lead, np.zeros(0, np.uint8), lead
    size = 2 + (data[lead] >= 0xE0) + (data[lead] >= 0xF0)
    cp = (data[lead] & (0xFF >> (size + 1))).astype(np.int64)
    for k in range(1, 4):
        more = size > k
        cp[more] = (cp[more] << 6) | (data[lead[more] + k] & 0x3F)
    every = np.repeat(lead - (np.cumsum(size) - size), size) + np.arange(int(size.sum()))
    return lead, size, _code_point_kinds(cp), every


def letter_or_digit_bytes(data: np.ndarray) -> np.ndarray:
    """Which bytes of a UTF-8 buffer belong to a letter or digit ([\\p{L}\\p{N}], as the token
    pass reads them): the one definition of a word's characters that decontamination shares."""
    mask = np.take(_ASCII_LETTER_OR_DIGIT, data)
    lead, size, char, every = non_ascii_characters(data)
    if len(lead):
        mask[every] = np.repeat(char == _LETTER_OR_DIGIT, size)
    return mask


# ASCII letters and digits (the token pass tells them by comparisons).
_ASCII_LETTER_OR_DIGIT = np.zeros(256, bool)
_ASCII_LETTER_OR_DIGIT[list(b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789")] = True
# Bytes per piece of the token pass: its dozen temporaries stay in the caches.
_PIECE = 1 << 18


def _normalized_buffer(text: pa.Array | pa.ChunkedArray) -> tuple[np.ndarray, np.ndarray]:
    """The batch normalized: one buffer where every line ends with a newline, but a document's
    last line with NUL; and the number of tokens of each line."""
    if isinstance(text, pa.ChunkedArray):
        text = text.combine_chunks()
    lowered = pc.utf8_lower(pc.fill_null(text, ""))
    end, nothing = pa.scalar(_END, lowered.type), pa.scalar("", lowered.type)
    offsets, data = string_buffers(pc.binary_join_element_wise(lowered, end, nothing))
    data, ends = _splice_non_ascii_chunks(data, offsets[1:] - 1)
    # Pieces of whole documents.
    cuts = ends[np.searchsorted(ends, np.arange(_PIECE, len(data), _PIECE)) - 1] if len(ends) else []
    bounds = np.unique(np.concatenate([[0], np.asarray(cuts, np.int64) + 1, [len(data)]]))
    outs, tokens = [], []
    for lo, hi in zip(bounds[:-1].tolist(), bounds[1:].tolist()):
        piece_ends = ends[(ends >= lo) & (ends < hi)] - lo
        out, count = _token_pass(data[lo:hi], piece_ends)
        outs.append(out)
        tokens.append(count)
    if not outs:
        return np.zeros(0, np.uint8), np.zeros(0, np.int64)
    return np.concatenate(outs), np.concatenate(tokens)


def _token_pass(data: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Whole documents' spliced bytes (each ending with _END at `ends`) -> their tokens, one
    space between two tokens of a line, and each line's number of tokens."""
    # The byte classes by comparisons, which numpy vectorizes (a 256-entry table lookup per
    # byte cost more than all of them). Bytes of non-ASCII characters fall in none of them
    # and take their code point's kind below.
    word = (data | np.uint8(0x20)) - np.uint8(ord("a")) < 26      # ASCII letters, either case
    digit = data - np.uint8(ord("0")) < 10
    word |= digit
    newline = data == 0x0A
    newline[ends] = True
    sep = data <= 0x20                                           # space and controls become spaces
    sep |= data == 0x7F
    sep &= ~newline
    other = data < 0x80
    lead, size, char, every = non_ascii_characters(data)
    if len(lead):
        # A letter or digit's bytes are word bytes, a control's are spaces; any other
        # character is one token, started at its lead byte.
        byte_kind = np.repeat(char, size)
        word[every[byte_kind == _LETTER_OR_DIGIT]] = True
        sep[every[byte_kind == _CONTROL]] = True
    other &= ~word
    other &= ~sep
    other &= ~newline
    if len(lead):
        other[lead[char == _OTHER]] = True
    # Token starts: another character, or a word byte after a non-word byte.
    starts = other
    starts[:1] |= word[:1]
    starts[1:] |= word[1:] & ~word[:-1]
    # A space goes before a token that is not the first of its line: the previous event
    # (token start or line end) is a token start.
    event = np.flatnonzero(starts | newline)
    is_start = ~newline[event]
    spaced = event[1:][is_start[1:] & is_start[:-1]]
    # Each byte's two output slots, (space, byte): the byte is written unless a space, the
    # space only where set apart; digits are written as 0 (their low four bits cleared).
    written = np.zeros(2 * len(data), bool)
    written[1::2] = ~sep
    written[2 * spaced] = True
    byte = digit.view(np.uint8) * np.uint8(0x0F)
    np.bitwise_xor(byte, np.uint8(0xFF), out=byte)
    np.bitwise_and(byte, data, out=byte)
    slots = byte.astype("<u2")
    slots <<= 8
    slots |= ord(" ")
    out = np.compress(written, slots.view(np.uint8))          # 3x faster than a mask index
    line_end = np.flatnonzero(~is_start)                      # tokens of a line: events between its ends
    return out, np.diff(np.concatenate([[-1], line_end])) - 1


def normalize_lines(text: pa.Array | pa.ChunkedArray) -> pa.Array:
    """Normalize every line of every document (newlines are kept as line breaks; blank lines
    at the start and end of a document dropped)."""
    out, _ = _normalized_buffer(text)
    doc_end = np.flatnonzero(out == 0)
    out[doc_end] = ord("\n")
    bounds = np.concatenate([[0], doc_end + 1])
    large = len(out) >= 2**31
    docs = pa.Array.from_buffers(pa.large_string() if large else pa.string(), len(bounds) - 1,
                                 [None, pa.py_buffer(bounds.astype(np.int64 if large else np.int32)),
                                  pa.py_buffer(out)])
    return pc.utf8_trim(docs, " \n")


def scored_lines(text: pa.Array | pa.ChunkedArray) -> tuple[list[bytes], np.ndarray, np.ndarray]:
    """The batch's non-blank normalized lines (UTF-8, what KenLM reads), in order, with the
    document and the number of tokens of each."""
    out, tokens = _normalized_buffer(text)
    line_end = np.flatnonzero(out <= 0x0A)  # newlines and document ends
    last_of_doc = out[line_end] == 0
    doc = np.cumsum(last_of_doc) - last_of_doc
    line_start = np.concatenate([[0], line_end[:-1] + 1])
    keep = tokens > 0
    buffer = out.tobytes()
    lines = [buffer[a:b] for a, b in zip(line_start[keep].tolist(), line_end[keep].tolist())]
    return lines, doc[keep], tokens[keep]


def document_lines(normalized: str) -> list[str]:
    return [line for line in normalized.split("\n") if line]
