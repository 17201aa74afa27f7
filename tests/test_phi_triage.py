"""PHI triage (pipeline/phi/triage.py): spaCy's NER on the windows that can give a name only.
On real abstracts with planted names the triaged engine finds exactly what the full engine
finds, while sending the NER a small share of the text; the stage reports that share; the
option is part of the stage's fingerprint; the clinical profile refuses it."""
from __future__ import annotations

import pyarrow as pa
import pytest

from pipeline.phi.engine import PhiEngine
from pipeline.phi.triage import NerTriage
from pipeline.stages.phi import PhiConfig, PhiDeidentify

PLANTED = ["Correspondence to Maria Lopez, Department of Surgery.",
           "Dr. Okafor examined the patient on 12 March 2019.",
           "We describe Liz Bertone, a 45-year-old woman with a cough.",
           "The consent of Jonathan Pryce was obtained; Pryce agreed to publication.",
           "Mrs. Kowalczyk (born 1931) was referred by Prof. Hanna Berg."]


@pytest.fixture(scope="module")
def planted_texts(english_texts) -> list[str]:
    """45 real abstracts; every third one with a planted sentence after its first sentence."""
    out = []
    for i, text in enumerate(english_texts[:45]):
        if i % 3 == 0:
            cut = text.find(". ") + 2 or len(text)
            text = text[:cut] + PLANTED[i // 3 % len(PLANTED)] + " " + text[cut:]
        out.append(text)
    return out


@pytest.fixture(scope="module")
def engines():
    return PhiEngine(profile="literature").setup(), PhiEngine(profile="literature", ner_triage=NerTriage()).setup()


def _spans(results):
    return [sorted((r.entity_type, r.start, r.end) for r in res) for res in results]


def test_triage_finds_what_the_full_engine_finds(engines, planted_texts):
    full, triaged = engines
    expected = _spans(full.analyze_batch(planted_texts))
    got = _spans(triaged.analyze_batch(planted_texts))
    assert got == expected
    names = {planted_texts[i][s:e] for i, res in enumerate(expected) for t, s, e in res if t == "PERSON"}
    assert {"Maria Lopez", "Okafor", "Liz Bertone", "Jonathan Pryce", "Kowalczyk"} <= names
    counts = triaged.ner_triage.counts
    assert counts["docs_in"] == len(planted_texts)
    # Planted sentences and the odd name of the abstracts: a small share of the text.
    assert 0 < counts["chars_sent"] < 0.25 * counts["chars_in"]
    assert counts["docs_whole"] == 0


def test_windows_hold_the_triggers_and_cut_at_white_space(engines):
    triage = engines[1].ner_triage
    text = "Aspirin lowers risk. " * 20 + "Contact Dr. Smith today. " + "Gene expression rose. " * 20
    (start, end), = triage.windows(text)
    assert start < text.index("Dr.") < text.index("Smith") < end
    assert text[start - 1] == " " and text[end] == " "
    # Capitalized given names before a capital only: "Gene expression" and "Rose" alone are none.
    assert triage.windows("Gene expression and Rose levels. Mark Twain wrote.") == [(0, 50)]
    assert triage.windows("Gene expression and rose levels.") == []


def test_stage_reports_the_share_sent(engines, planted_texts):
    stage = PhiDeidentify(PhiConfig(profile="literature"), None)
    stage._engine_loaded = engines[1]
    stage.setup()
    engines[1].ner_triage.counts.clear()
    table = pa.table({"id": [str(i) for i in range(len(planted_texts))], "text": planted_texts})
    totals = stage.batch_stats(stage.process(table))
    stats = stage.finish_stats(totals, None)
    assert stats["triage"]["chars_in"] == sum(map(len, planted_texts))
    assert 0 < stats["triage"]["share_sent"] < 0.25
    assert stats["triage"]["docs_sent"] < len(planted_texts)


def test_option_in_fingerprint_and_refused_where_it_does_not_apply():
    on, off = PhiConfig(profile="literature"), PhiConfig(profile="literature", triage=False)
    assert on.triage and not off.triage and not PhiConfig(profile="clinical").triage
    assert PhiDeidentify(on, None).cache_namespace() != PhiDeidentify(off, None).cache_namespace()
    assert on.model_dump()["triage"] != off.model_dump()["triage"]      # the run fingerprint digests model_dump
    with pytest.raises(ValueError, match="triage"):
        PhiConfig(profile="clinical", triage=True)
