"""PHI triage (pipeline/phi/triage.py): spaCy only where its output is read. Literature: the NER
on the windows that can give a name only; on real abstracts with planted names the triaged engine
finds exactly what the full engine finds, while sending the NER a small share of the text.
Clinical (NER off): spaCy tokenizes only the texts whose tokens a recognizer reads; on real notes
the output is the full engine's, and PHI in lower case or after a cue is still removed. The stage
reports the share sent; the option is part of the stage's fingerprint."""
from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest

from pipeline.phi.engine import PhiEngine
from pipeline.phi.triage import NerTriage, TokenTriage
from pipeline.stages.phi import PhiConfig, PhiDeidentify

DEV = Path(__file__).resolve().parents[1] / "data/deid-dev"

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
    return PhiEngine(profile="literature").setup(), PhiEngine(profile="literature", triage=NerTriage()).setup()


def _spans(results):
    return [sorted((r.entity_type, r.start, r.end) for r in res) for res in results]


def test_triage_finds_what_the_full_engine_finds(engines, planted_texts):
    full, triaged = engines
    expected = _spans(full.analyze_batch(planted_texts))
    got = _spans(triaged.analyze_batch(planted_texts))
    assert got == expected
    names = {planted_texts[i][s:e] for i, res in enumerate(expected) for t, s, e in res if t == "PERSON"}
    # Patients' names go; the corresponding author's and the physician's are public.
    assert {"Liz Bertone", "Jonathan Pryce", "Kowalczyk"} <= names
    assert not {"Maria Lopez", "Okafor"} & names
    counts = triaged.triage.counts
    assert counts["docs_in"] == len(planted_texts)
    # Planted sentences and the odd name of the abstracts: a small share of the text.
    assert 0 < counts["chars_sent"] < 0.25 * counts["chars_in"]
    assert counts["docs_whole"] == 0


def test_windows_hold_the_triggers_and_cut_at_white_space(engines):
    triage = engines[1].triage
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
    engines[1].triage.counts.clear()
    table = pa.table({"id": [str(i) for i in range(len(planted_texts))], "text": planted_texts})
    totals = stage.batch_stats(stage.process(table))
    stats = stage.finish_stats(totals, None)
    assert stats["triage"]["chars_in"] == sum(map(len, planted_texts))
    assert 0 < stats["triage"]["share_sent"] < 0.25
    assert stats["triage"]["docs_sent"] < len(planted_texts)


def _namespace(config: PhiConfig) -> str:
    return PhiDeidentify(config, None).dependencies().cache_namespace


def test_option_in_fingerprint_and_on_in_both_profiles():
    on, off = PhiConfig(profile="literature"), PhiConfig(profile="literature", triage=False)
    assert on.triage and not off.triage and PhiConfig(profile="clinical").triage
    assert _namespace(on) != _namespace(off)
    assert on.model_dump()["triage"] != off.model_dump()["triage"]      # the run fingerprint digests model_dump
    clinical_off = PhiConfig(profile="clinical", triage=False)
    assert _namespace(PhiConfig(profile="clinical")) != _namespace(clinical_off)
    assert isinstance(PhiDeidentify(PhiConfig(profile="clinical"), None)._triage(), TokenTriage)
    assert PhiDeidentify(clinical_off, None)._triage() is None
    with pytest.raises(ValueError, match="NerTriage"):
        PhiEngine(profile="clinical", triage=NerTriage())


# ---------------------------------------------------------------- clinical profile

# A card and an IBAN (test numbers) after their context words: Presidio's context scoring reads
# spaCy's tokens there, so these texts are tokenized on demand.
ACCOUNTS = "Pt paid with credit card 4111 1111 1111 1111; IBAN DE89 3704 0044 0532 0130 00 on file."


@pytest.fixture(scope="module")
def clinical_engine():
    """One clinical engine; the tests switch its triage on and off (PhiEngine reads it per batch)."""
    return PhiEngine(profile="clinical").setup()


def _run(engine, triage, texts, redact=False):
    engine.triage = triage
    try:
        return engine.redact_batch(texts)[0] if redact else _spans(engine.analyze_batch(texts))
    finally:
        engine.triage = None


def test_clinical_triage_output_is_the_full_engines_on_real_notes(clinical_engine):
    notes = [json.loads(line)["text"] for _, line in zip(range(40), (DEV / "notes.jsonl").open(encoding="utf-8"))]
    texts = notes + [ACCOUNTS]
    triage = TokenTriage()
    spans = _run(clinical_engine, triage, texts)
    assert spans == _run(clinical_engine, None, texts)
    assert sum(map(len, spans)) > 40                # the notes' names, dates and places were found
    counts = triage.counts
    assert counts["docs_in"] == len(texts) and counts["chars_in"] == sum(map(len, texts))
    # spaCy tokenized the account text only (its card and IBAN are scored with context).
    assert counts["docs_sent"] == 1 and counts["chars_sent"] == len(ACCOUNTS)
    redacted = _run(clinical_engine, TokenTriage(), [ACCOUNTS], redact=True)[0]
    assert "4111" not in redacted and "3704" not in redacted


def test_clinical_triage_still_removes_lower_case_names_and_names_after_a_cue(clinical_engine):
    texts = ["pt resting comfortably. seen by dr okafor this am; plan to wean.",
             "family meeting held, spoke with son ahmed, who agrees with plan.",
             "called per thibodeaux re k 3.2, repleted. admitted to saint brennan's."]
    triage = TokenTriage()
    redacted = _run(clinical_engine, triage, texts, redact=True)
    assert redacted == _run(clinical_engine, None, texts, redact=True)
    for text, name in zip(redacted, ("okafor", "ahmed", "thibodeaux")):
        assert name not in text and "<|NAME|>" in text
    assert "brennan" not in redacted[2]
    assert triage.counts["docs_sent"] == 0          # spaCy never ran: nothing read its tokens


def test_clinical_stage_reports_the_share_sent(clinical_engine):
    stage = PhiDeidentify(PhiConfig(profile="clinical", id_mode="keep"), None)
    stage._engine_loaded = clinical_engine
    clinical_engine.triage = TokenTriage()
    try:
        stage.setup()
        texts = ["seen by dr okafor today.", ACCOUNTS]
        table = pa.table({"id": ["a", "b"], "text": texts})
        stats = stage.finish_stats(stage.batch_stats(stage.process(table)), None)
    finally:
        clinical_engine.triage = None
    assert stats["triage"]["chars_in"] == sum(map(len, texts))
    assert stats["triage"]["share_sent"] == round(len(ACCOUNTS) / sum(map(len, texts)), 4)


def test_clinical_stage_counts_the_texts_sent_to_the_prose_ner(clinical_engine):
    """The stage's stats say how many texts (and characters) went to spaCy's NER as prose."""
    stage = PhiDeidentify(PhiConfig(profile="clinical", id_mode="keep"), None)
    stage._engine_loaded = clinical_engine
    clinical_engine.prose_counts.clear()           # the module's engine: nothing counted before this test
    stage.setup()
    letter = "Mrs Featherstonehaugh wrote to the council about the bins on Quarry Row again this week."
    texts = [letter, "Pt 67M s/p CABG. BP 120/80, HR 88. Plan: cont lasix 40mg PO BID."]
    table = pa.table({"id": ["a", "b"], "text": texts})
    stats = stage.finish_stats(stage.batch_stats(stage.process(table)), None)
    assert stats["prose_ner"] == {"docs_sent": 1, "chars_sent": len(letter)}
