"""CCNet's text normalization for KenLM, shared by the model build (scripts/build_kenlm.py)
and the perplexity stage so both see text the same way: lowercase, accents folded, digits to
0, unicode punctuation unified to ASCII, non-printing characters removed, and punctuation split
off words (our stand-in for CCNet's SentencePiece step). Vectorized over an Arrow array."""
from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

# Unicode punctuation -> ASCII, grouped by replacement so each target is one regex pass.
_PUNCT = {
    ",": "，、", ".": "。", '"': "„”“«»」「《》", "'": "´’‘", ":": "∶：", "?": "？", "!": "！",
    "(": "（", ")": "）", ";": "；", "-": "–—━►−", "~": "～", "<": "〈", ">": "〉", "[": "【", "]": "】",
    "%": "％", "x": "×", "...": "…",
}


def _fold_unicode(text):
    """Accents folded and unicode punctuation mapped to ASCII (a no-op on ASCII text)."""
    text = pc.utf8_normalize(text, form="NFD")
    text = pc.replace_substring_regex(text, r"\p{Mn}+", "")
    text = pc.utf8_normalize(text, form="NFC")
    text = pc.replace_substring_regex(text, r"\p{Nd}", "0")
    for target, sources in _PUNCT.items():
        text = pc.replace_substring_regex(text, "[" + sources + "]", target)
    return text


def normalize_lines(text: pa.Array | pa.ChunkedArray) -> pa.Array:
    """Normalize every line of every document (newlines are kept as line breaks)."""
    text = pc.utf8_lower(text)
    if isinstance(text, pa.ChunkedArray):
        text = text.combine_chunks()
    # Most abstracts are pure ASCII: the unicode passes run only on the others.
    non_ascii = pc.invert(pc.string_is_ascii(text))
    if pc.any(non_ascii).as_py():
        folded = _fold_unicode(pc.filter(text, non_ascii))
        text = pc.replace_with_mask(text, non_ascii, folded)
    text = pc.replace_substring_regex(text, r"[0-9]", "0")
    text = pc.replace_substring_regex(text, "[\\x{0}-\\x{9}\\x{B}-\\x{1F}\\x{7F}-\\x{9F}]", " ")
    text = pc.replace_substring_regex(text, r"([^\p{L}\p{N}\s])", r" \1 ")
    text = pc.replace_substring_regex(text, r"[ \t]+", " ")
    text = pc.replace_substring_regex(text, r" ?\n ?", "\n")
    return pc.utf8_trim(text, " \n")


def document_lines(normalized: str) -> list[str]:
    return [line for line in normalized.split("\n") if line]
