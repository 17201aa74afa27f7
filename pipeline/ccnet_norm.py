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


def normalize_lines(text: pa.Array | pa.ChunkedArray) -> pa.Array | pa.ChunkedArray:
    """Normalize every line of every document (newlines are kept as line breaks)."""
    text = pc.utf8_lower(text)
    # Accents: decompose, then drop combining marks.
    text = pc.utf8_normalize(text, form="NFD")
    text = pc.replace_substring_regex(text, r"\p{Mn}+", "")
    text = pc.utf8_normalize(text, form="NFC")
    text = pc.replace_substring_regex(text, r"\p{Nd}", "0")
    for target, sources in _PUNCT.items():
        text = pc.replace_substring_regex(text, "[" + sources + "]", target)
    text = pc.replace_substring_regex(text, "[\\x{0}-\\x{9}\\x{B}-\\x{1F}\\x{7F}-\\x{9F}]", " ")
    text = pc.replace_substring_regex(text, r"([^\p{L}\p{N}\s])", r" \1 ")
    text = pc.replace_substring_regex(text, r"[ \t]+", " ")
    text = pc.replace_substring_regex(text, r" ?\n ?", "\n")
    return pc.utf8_trim(text, " \n")


def document_lines(normalized: str) -> list[str]:
    return [line for line in normalized.split("\n") if line]
