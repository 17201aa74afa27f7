"""The training copies, the mention forms and the span completion of
scripts/evaluation/detector_variants.py."""
from __future__ import annotations

from pipeline.phi.lexicon import detector_lexicon
from scripts.evaluation.detector_variants import completed_spans, lower_line_copies, upper_word_copies, written_form

TEXT = "Ann Lee went to Boston with her sister today.\nShe said they will meet Bob in Paris on the way home."
SPANS = [(0, 7, "PER"), (16, 22, "LOC"), (70, 73, "PER"), (77, 82, "LOC")]


def test_copies_keep_every_labelled_span_on_the_same_letters():
    examples = [(TEXT, SPANS, None)] * 8
    for copies in (lower_line_copies(examples), upper_word_copies(examples)):
        added = copies[len(examples):]
        assert copies[:len(examples)] == examples
        assert added, "every fourth document gets a copy"
        for text, spans, _ in added:
            assert text != TEXT and len(text) == len(TEXT)
            assert spans == SPANS
            assert [text[s:e].lower() for s, e, _ in spans] == [TEXT[s:e].lower() for s, e, _ in SPANS]


def test_lower_line_copies_lower_the_even_lines_only():
    (text, _, _), = lower_line_copies([(TEXT, SPANS, None)])[1:]
    first, second = text.split("\n")
    assert first == TEXT.split("\n")[0].lower() and second == TEXT.split("\n")[1]


def test_upper_word_copies_are_the_same_on_every_run_and_leave_other_case_modes_alone():
    examples = [(TEXT, SPANS, None)] * 12
    assert upper_word_copies(examples) == upper_word_copies(examples)
    assert upper_word_copies([(TEXT.upper(), SPANS, None)] * 4) == [(TEXT.upper(), SPANS, None)] * 4


def test_written_form_of_a_mention():
    assert [written_form(v) for v in ("#Boston", "BOSTON", "boston", "Boston", "McDonald", "J", "42")] == [
        "hashtag", "capitals", "lower_case", "capitalized", "capitalized", "capitalized", "no_letters"]


def test_completed_spans_grow_over_capitalized_words_beside_them_but_not_a_sentences_first():
    lex = detector_lexicon()
    text = "We met Jane Fairfax at Highbury. Then Zelda Woodhouse came. Ragnar Lodbrok left the Sherwood Forest."
    found = [(text.find(w), text.find(w) + len(w)) for w in ("Jane", "Woodhouse", "Lodbrok", "Sherwood")]
    grown = [text[s:e] for s, e in completed_spans(text, found, lex)]
    assert grown == ["Jane Fairfax", "Zelda Woodhouse", "Lodbrok", "Sherwood"]
    everything = [text[s:e] for s, e in completed_spans(text, found, lex, common=True)]
    assert everything == ["Jane Fairfax", "Zelda Woodhouse", "Lodbrok", "Sherwood Forest"]
