"""The text transform of the normalize stage: Unicode NFC, HTML tags and entities out, control
characters out, whitespace runs and line endings normalized, on Arrow string arrays. Whatever is
compared with the corpus (benchmark items, a passage cut out of a document) goes through it too."""
from __future__ import annotations

import html

import pyarrow as pa
import pyarrow.compute as pc
from pydantic import BaseModel, ConfigDict

# Only real HTML tag names, so "p <0.05" or "a<b and c>d" in science text survive.
_TAGS = ("a|abbr|b|bdi|big|blockquote|body|br|center|code|div|em|font|h[1-6]|head|hr|html|i|img|"
         "inf|li|link|mark|math|meta|mi|mml:[a-z]+|mn|mo|mrow|msub|msup|ol|p|pre|s|small|span|strike|"
         "strong|sub|sup|table|tbody|td|th|thead|title|tr|tt|u|ul")
# Attributes only in name=value form: "<b and c>" in "a<b and c>d" is not a tag.
_TAG = rf"(?i)</?(?:{_TAGS})(?:\s+[^<>=]*=[^<>]*)?\s*/?>"
_SCRIPT = r"(?is)<(script|style)\b[^>]*>.*?</(script|style)\s*>"
_ENTITY = r"&(?:#[0-9]{1,7}|#[xX][0-9a-fA-F]{1,6}|[A-Za-z][A-Za-z0-9]{1,31});"
# C0 and C1 controls except tab and newline, plus zero-width and BOM characters.
_CONTROL = "[\\x{0}-\\x{8}\\x{B}\\x{C}\\x{E}-\\x{1F}\\x{7F}-\\x{9F}\\x{200B}-\\x{200D}\\x{2060}\\x{FEFF}]"
_SPACES = "[ \\t\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{202F}\\x{205F}\\x{3000}]+"


class NormalizeOptions(BaseModel):
    """What the transform does: the normalize stage's options, and what a text compared with
    the corpus is normalized with."""
    model_config = ConfigDict(extra="forbid", frozen=True)

    strip_html: bool = True
    unescape_entities: bool = True
    # Up to this many consecutive blank lines are kept (paragraph breaks).
    max_blank_lines: int = 1


def normalize_text(text, config: NormalizeOptions) -> pa.ChunkedArray | pa.Array:
    """The stage's text transform on a string array: what any text compared with the corpus
    (benchmark items, a passage cut out of a document) goes through, so both read alike."""
    text = pc.utf8_normalize(text, form="NFC")
    text = pc.replace_substring_regex(text, "\r\n?|\\x{2028}|\\x{2029}|\\x{85}", "\n")
    if config.strip_html:
        text = pc.replace_substring_regex(text, _SCRIPT, " ")
        text = pc.replace_substring_regex(text, _TAG, " ")
    if config.unescape_entities:
        text = _unescape(text)
    text = pc.replace_substring_regex(text, _CONTROL, "")
    return tidy_whitespace(text, config.max_blank_lines)


def tidy_whitespace(text, max_blank_lines: int):
    """Runs of spaces to one, no space around a line end, at most `max_blank_lines` blank lines,
    none at the ends: the last step of the transform (and what a text cut into needs again)."""
    text = pc.replace_substring_regex(text, _SPACES, " ")
    text = pc.replace_substring_regex(text, " ?\n ?", "\n")
    keep = "\n" * (max_blank_lines + 1)
    text = pc.replace_substring_regex(text, "\n{%d,}" % (len(keep) + 1), keep)
    return pc.utf8_trim_whitespace(text)


def _unescape(text: pa.ChunkedArray) -> pa.ChunkedArray:
    # html.unescape runs only on the documents that hold an entity.
    has = pc.match_substring_regex(text, _ENTITY)
    if not pc.any(has).as_py():
        return text
    values = text.to_pylist()
    for i in pc.indices_nonzero(has).to_pylist():
        values[i] = html.unescape(values[i])
    return pa.chunked_array([pa.array(values, pa.string())])
