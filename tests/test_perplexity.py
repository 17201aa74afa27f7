"""The perplexity stage's vectorized CCNet normalization gives the text, and so the perplexities,
of the per-document regex implementation it replaced (kept here as the reference), to the bit:
on 2,000 real MEDLINE records (English abstracts and other-language ones, raw and after the
normalize stage) and on text built to hit every rule."""
import math

import kenlm
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from conftest import RAW, ROOT
from pipeline.engines.ccnet_norm import _PUNCT, normalize_lines, scored_lines
from pipeline.stages.perplexity import DEFAULT_MODEL, Perplexity, PerplexityConfig, document_perplexity, perplexities

# ---- the reference: the implementation before the vectorized one, unchanged ---------------


def _reference_fold_unicode(text):
    text = pc.utf8_normalize(text, form="NFD")
    text = pc.replace_substring_regex(text, r"\p{Mn}+", "")
    text = pc.utf8_normalize(text, form="NFC")
    text = pc.replace_substring_regex(text, r"\p{Nd}", "0")
    for target, sources in _PUNCT.items():
        text = pc.replace_substring_regex(text, "[" + sources + "]", target)
    return text


def reference_normalize_lines(text):
    text = pc.utf8_lower(text)
    if isinstance(text, pa.ChunkedArray):
        text = text.combine_chunks()
    non_ascii = pc.invert(pc.string_is_ascii(text))
    if pc.any(non_ascii).as_py():
        folded = _reference_fold_unicode(pc.filter(text, non_ascii))
        text = pc.replace_with_mask(text, non_ascii, folded)
    text = pc.replace_substring_regex(text, r"[0-9]", "0")
    text = pc.replace_substring_regex(text, "[\\x{0}-\\x{9}\\x{B}-\\x{1F}\\x{7F}-\\x{9F}]", " ")
    text = pc.replace_substring_regex(text, r"([^\p{L}\p{N}\s])", r" \1 ")
    text = pc.replace_substring_regex(text, r"[ \t]+", " ")
    text = pc.replace_substring_regex(text, r" ?\n ?", "\n")
    return pc.utf8_trim(text, " \n")


# ---- the texts -----------------------------------------------------------------------------

# Every rule and its edges: whitespace and control characters of each kind, blank lines,
# accents precomposed and decomposed, marks with nothing to sit on, unicode digits and
# punctuation, letters outside Latin, no-break and em spaces, C1 controls, emoji, a long run.
EDGE_TEXTS = [
    "", " ", "\n", "\n\n \n", "  a  \n \n  b  ", "a\n\n\nb\n", "\n\nonly\n\n", "tab\tat\t\tend\t",
    "A\tB\rC\x0bD\x0cE\x01F\x7fG\x00H", "ÉCOLE naïve café — “quoted” ‘x’ 1,5 × 10⁵ … ½ ٣ ۴",
    "µg/ml ≥ 5 ± 0.2 °C, p<0.05 (n=12) [3]; 45%", "x\u00a0y\u2003z \x85 q\u0085r ab\u0085cd",
    " \u0301abc e\u0301 \u0301 e\u0301\u0302x", "ΣΟΦΟΣ İstanbul \u212a \u2126 ohm", "a,b;c:d!e?f(g)h[i]j{k}l_m-n'o\"p",
    "（全角）：测试，句子。「引用」【注】～〈〉？！；", "\u1100\u1161 hangul 한국어", "🙂 emoji 👍🏽 x🙂y",
    "αβγ-δ5 क्षत्रिय ﬁne soft\u00adhyphen", "word" * 80 + " end", "x" * 300 + "é",
]


@pytest.fixture(scope="module")
def texts() -> list[str]:
    """The first 2,000 records of the default corpus (582 hold non-ASCII text), as read and
    after the normalize stage, and the edge texts."""
    from pipeline.config import InputConfig
    from pipeline.readers import read_documents
    from pipeline.stages.normalize import Normalize, NormalizeConfig
    normalize = Normalize(NormalizeConfig(), None)
    raw, normalized = [], []
    for batch in read_documents(InputConfig(paths=[str(RAW)]), 1000):
        raw += batch.table["text"].to_pylist()
        normalized += normalize.process(batch.table)["text"].to_pylist()
        if len(raw) >= 2000:
            break
    assert len(raw) >= 2000 and sum(not t.isascii() for t in normalized[:2000]) > 300
    return normalized[:2000] + raw[:2000] + EDGE_TEXTS


@pytest.fixture(scope="module")
def reference(texts) -> list[str]:
    """The reference normalization of the texts, in the stage's batches of 1,000."""
    return [t for start in range(0, len(texts), 1000)
            for t in reference_normalize_lines(pa.array(texts[start:start + 1000])).to_pylist()]


@pytest.fixture(scope="module")
def model():
    return kenlm.Model(str(ROOT / DEFAULT_MODEL))


def test_normalization_is_the_reference(texts, reference):
    got = [
        t
        for start in range(0, len(texts), 1000)
        for t in normalize_lines(pa.array(texts[start : start + 1000])).to_pylist()
    ]
    assert got == reference
    for text in EDGE_TEXTS:  # each alone (a batch of one, no neighbour)
        assert normalize_lines(pa.array([text])).to_pylist() == reference_normalize_lines(pa.array([text])).to_pylist()


def test_scored_lines_are_the_reference_lines(texts, reference):
    lines, doc, tokens = scored_lines(pa.array(texts))
    expected = [(i, line) for i, t in enumerate(reference) for line in t.split("\n") if line]
    assert [(int(d), line.decode()) for d, line in zip(doc, lines)] == expected
    assert tokens.tolist() == [line.count(" ") + 1 for _, line in expected]


def test_perplexities_are_the_reference_to_the_bit(texts, reference, model):
    expected = [document_perplexity(model, t) for t in reference]
    got = [
        p for start in range(0, len(texts), 1000) for p in perplexities(model, pa.array(texts[start : start + 1000]))
    ]
    assert np.array(got, np.float64).tobytes() == np.array(expected, np.float64).tobytes()
    assert sum(math.isinf(p) for p in expected) >= 3  # the empty and punctuation-free texts
    # The stage's column (float32) holds them too.
    stage = Perplexity(PerplexityConfig(), None)
    stage.setup()
    column = stage.score(pa.table({"id": [str(i) for i in range(len(texts))], "text": texts}))["perplexity"]
    assert column.to_pylist() == pa.array(expected, pa.float32()).to_pylist()
