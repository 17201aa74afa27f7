"""The learned detector's span rules and the clinical date grammars, on their own (the committed
CRF model, no Presidio or spaCy): what the CRF proposes is never the letters of a code
("NCT01234567", "BRCA1") nor begins or ends with a closed-class word ("on", "our"); dates
written with the apostrophe after the year, glued to a two-digit year or as a slash range are
dates; heights and fractions are not."""
from __future__ import annotations

import pytest

from pipeline.phi.detector import (
    DEFAULT_MODEL,
    DEFAULT_WORD_FREE_MODEL,
    EDGE_WORDS,
    PhiDetector,
    alphanumeric_pieces,
    featurize,
    glued_letters,
    tokenize,
)
from pipeline.phi.notes import ClinicalDateRecognizer

TEXT = ("Seen at Mercy Hospital on March 3. Trial NCT01234567 and ISRCTN15535800; BRCA1, CD4 and Ste20 "
        "were assessed at our Chicago clinic by Dr. Ada K. Walsh, who spoke with the wife (Bo Lindqvist).")


@pytest.fixture(scope="module")
def detector():
    return PhiDetector(DEFAULT_MODEL, 0.5, (DEFAULT_WORD_FREE_MODEL,))


def test_the_word_free_model_reads_no_word_and_the_pair_takes_the_larger_marginal(detector):
    words, word_free = PhiDetector(DEFAULT_MODEL), PhiDetector(DEFAULT_WORD_FREE_MODEL)
    attributes = word_free.models[0].tagger.info().attributes
    assert attributes and not [a for a in attributes if a.startswith(("w=", "pw=", "nw=", "-1:w=", "1:w="))]
    assert [m.words for m in detector.models] == [True, False]
    text = ("per dr kowalczyk, sister ingeborg called from tromsø; Ms. Quist and Tadeusz Wrona visited "
            "the Ashgrove clinic. " + TEXT)
    toks, both, _ = detector.token_probabilities(text)
    _, p_words, _ = words.token_probabilities(text)
    _, p_free, _ = word_free.token_probabilities(text)
    assert both == [max(a, b) for a, b in zip(p_words, p_free)]
    # each model is the larger somewhere: their errors differ
    assert any(a > b for a, b in zip(p_words, p_free)) and any(b > a for a, b in zip(p_words, p_free))


def test_one_sequence_of_every_feature_gives_each_model_its_own_marginals(detector):
    # token_probabilities gives both models one sequence with the words' features: the
    # word-free model's marginals must be those of its own features alone, bit for bit.
    text = "pt seen by Dr. Ada Walsh at Mercy; wife Bo called from tromsø.\nPLAN: f/u w KOWALCZYK 3/4. " + TEXT
    toks = tokenize(text)
    joined, free = featurize(text, toks), featurize(text, toks, words=False)
    # the word-free features first, then the words': one list for both models
    assert all(full[:len(own)] == own and len(full) > len(own) for full, own in zip(joined, free))
    word_free = PhiDetector(DEFAULT_WORD_FREE_MODEL).models[0].tagger
    word_free.set(free)
    alone = [[word_free.marginal(label, i) for label in word_free.labels()] for i in range(len(toks))]
    word_free.set(joined)
    assert alone == [[word_free.marginal(label, i) for label in word_free.labels()] for i in range(len(toks))]


def test_alphanumeric_pieces_are_the_letters_glued_to_digits():
    toks = tokenize("NCT01234567 BRCA1 4Kids Ste20 Smith 12 Jones")
    coded = {t[2] for t, c in zip(toks, alphanumeric_pieces(toks)) if c}
    assert coded == {"NCT", "BRCA", "Kids", "Ste"}


def test_glued_letters_are_suffixes_and_shorthand_not_names(detector):
    text = "hr 90's, pt.'s plan, s/p cabg, d/w s/o, c/o pain; per d kline and Dr. A. Lee"
    toks = tokenize(text)
    glued = [t for t, g in zip(toks, glued_letters(text, toks)) if g]
    assert [w for _, _, w in glued] == ["s", "s", "s", "p", "d", "w", "s", "o", "c", "o"]
    # At a threshold this low every word is a candidate: none of these is ever in a span.
    spans = detector.spans(text, threshold=1e-6)
    assert any(text[s:e] == "kline" or "kline" in text[s:e] for s, e, _, _ in spans), spans
    for a, b, w in glued:
        assert not any(s <= a and b <= e for s, e, _, _ in spans), (w, a, spans)


def test_eponyms_and_words_of_origin_are_not_persons(detector):
    text = ("Pos Babinski sign, Stevens-Johnson syndrome; a 45yo African American male, Ana Ruiz. "
            "Daughter Ann Lee cell 410-555-0199. Insulin per U Iowa scale.")
    found = " ".join(text[s:e] for s, e, _, _ in detector.spans(text))
    for kept in ("Babinski", "Stevens", "African", "American"):
        assert kept not in found, found
    for value in ("Ruiz", "Lee", "Iowa"):
        assert value in found, found


def test_no_span_is_a_code_or_has_a_closed_class_word_at_its_edge(detector):
    # At a threshold this low nearly every word is a candidate: the span rules alone decide.
    spans = detector.spans(TEXT, threshold=1e-6)
    assert spans
    for s, e, _, _ in spans:
        words = [w for _, _, w in tokenize(TEXT[s:e]) if w[0].isalpha()]
        assert words, TEXT[s:e]
        for w in (words[0], words[-1]):
            assert not (w.lower() in EDGE_WORDS and (w.islower() or len(w) > 1)), TEXT[s:e]
        for code in ("NCT", "ISRCTN", "BRCA", "CD", "Ste"):
            assert code not in words, TEXT[s:e]


def test_the_committed_model_finds_the_names_and_keeps_the_codes(detector):
    found = " ".join(TEXT[s:e] for s, e, _, _ in detector.spans(TEXT))
    for value in ("Mercy", "Chicago", "Ada", "Lindqvist"):
        assert value in found, found
    for kept in ("NCT", "BRCA", "Trial", "on", "our"):
        assert kept not in found.split(), found
    # "Walsh" after the middle initial is below the threshold here (0.53 at 0.1); the surname
    # with the given name alone is the detector's, and the stage's title rule takes the rest.
    assert "Ada Walsh" in " ".join(t[s:e] for t in ["by Dr. Ada Walsh, who spoke"]
                                   for s, e, _, _ in detector.spans(t))


@pytest.mark.parametrize("text,dates", [
    ("PMH: CVA 74'. Cholecystectomy 77', HTN", ["74'", "77'"]),
    ("seen 11/21.93 neuro intact", ["11/21.93"]),
    ("had treatments 10/03/10/04 and is due", ["10/03/10/04"]),
    ("she is 5'6\" tall, 1/2.5 mg given, 10' of tubing", []),
])
def test_dates_with_the_year_after_an_apostrophe_a_full_stop_or_as_a_slash_range(text, dates):
    found = [text[r.start:r.end] for r in ClinicalDateRecognizer().analyze(text, ["DATE_TIME"])]
    assert sorted(found) == sorted(dates), found


def test_what_a_model_reads_is_asked_once_then_read_from_the_cache(tmp_path, monkeypatch):
    """Whether a CRF reads the words (and spaCy's entities) comes from its attribute list once, then
    from the user's cache under the file's digest; an unreadable cache is asked again."""
    import json

    import pycrfsuite

    from pipeline.phi.detector import DEFAULT_MODEL, DEFAULT_WORD_FREE_MODEL, model_reads
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    cache = tmp_path / "medprep" / "phi_detector_reads.json"

    def reads(path):
        tagger = pycrfsuite.Tagger()
        tagger.open(str(path))
        return model_reads(tagger, str(path))

    assert reads(DEFAULT_MODEL) == (False, True) and reads(DEFAULT_WORD_FREE_MODEL) == (False, False)
    known = json.loads(cache.read_text())
    assert sorted(known.values()) == [[False, False], [False, True]]
    cache.write_text(json.dumps({key: [True, True] for key in known}))
    assert reads(DEFAULT_WORD_FREE_MODEL) == (True, True)           # read back, not asked again
    cache.write_text("{not json")
    assert reads(DEFAULT_WORD_FREE_MODEL) == (False, False)
    assert len(json.loads(cache.read_text())) == 1
