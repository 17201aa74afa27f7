"""The PHI scorer of scripts/evaluation/eval_phi.py on hand-made outputs of real notes (data/deid-dev), and
the multi-locale synthetic set it scores. No model runs here: this checks the ruler itself."""
from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pyarrow as pa
import pytest

from scripts.evaluation.eval_phi import read_stage_output, score, value_survives
from scripts.evaluation.phi_synth_locales import make_locale_documents

DEV = Path(__file__).resolve().parents[1] / "data/deid-dev"


@pytest.fixture(scope="module")
def dev():
    notes = {}
    with open(DEV / "notes.jsonl", encoding="utf-8") as f:
        for line in f:
            row = json.loads(line)
            notes[row["id"]] = row["text"]
    return notes, json.loads((DEV / "gold.json").read_text(encoding="utf-8"))


def redact_gold(text: str, mentions: list[dict]) -> str:
    for m in sorted(mentions, key=lambda m: -m["start"]):
        text = text[:m["start"]] + "[PHI]" + text[m["end"]:]
    return text


def test_gold_spans_replaced_score_no_leak_and_no_change(dev):
    notes, gold = dev
    ids = ["p1-n1", "p1-n4", "p3-n5", "p49-n35"]
    originals = {i: notes[i] for i in ids}
    outputs = {i: redact_gold(notes[i], gold[i]) for i in ids}
    s = score(originals, outputs, gold)
    assert s["mention_leak"]["n"] > 10 and s["mention_leak"]["leaked"] == 0
    assert s["mention_leak_safe_harbor_allowed"]["n"] >= 1       # p1-n1's year 1992
    assert s["mention_leak_safe_harbor_allowed"]["leaked"] == 0
    # lengths changed ("CALVERT" -> "[PHI]"), yet every other token counts as left in place
    assert s["non_phi_tokens"]["n"] > 300 and s["non_phi_tokens"]["changed"] == 0


def test_other_tokens_changed_are_counted_by_what_replaced_them():
    text = "Ann Lee came on 3 May 2019 with her dog; see https://example.org/x for the form."
    gold = {"d": [{"type": "NAME", "value": "Ann Lee", "start": 0, "end": 7}]}
    out = "<|NAME|> came on <|DATE|> with her <|NAME|>; see <|URL|> for the <|LOCATION|> <|DATE|>."
    s = score({"d": text}, {"d": out}, gold)
    by = {t: r["changed"] for t, r in s["non_phi_tokens_changed_by"].items()}
    # the date's three tokens, the URL's four, "dog" under a name; "form" under two placeholders
    assert by == {"URL": 4, "DATE": 3, "NAME": 1, "mixed": 1}
    assert sum(by.values()) == s["non_phi_tokens"]["changed"] and s["mention_leak"]["leaked"] == 0
    s = score({"d": text}, {"d": text.replace("dog", "cat")}, gold)
    assert {t: r["changed"] for t, r in s["non_phi_tokens_changed_by"].items()} == {"other": 1}


def test_urls_mails_and_handles_the_corpus_leaves_unlabelled_are_counted_apart():
    text = "Ann wrote to bo.k@mail.example.com and @bo_k about https://t.co/Ab12 and her dog."
    gold = {"d": [{"type": "NAME", "value": "Ann", "start": 0, "end": 3}]}
    out = "<|NAME|> wrote to <|EMAIL|> and <|USERNAME|> about <|URL|> and her <|NAME|>."
    s = score({"d": text}, {"d": out}, gold)
    # 18 other tokens: the address's five, the handle's two, the URL's four, and seven words
    assert s["non_phi_tokens"] == {"n": 18, "changed": 12, "rate": round(12 / 18, 5)}
    # outside those identifiers only "dog" is damage; an "@" before a space is no address or handle
    assert s["non_phi_tokens_outside_identifiers"] == {"n": 7, "changed": 1, "rate": round(1 / 7, 5)}
    plain = "Mail me at home@ night, a 5@ rate."
    s = score({"d": plain}, {"d": plain}, {})
    assert s["non_phi_tokens_outside_identifiers"]["n"] == s["non_phi_tokens"]["n"] == 8


def test_fully_redacted_note_leaks_nothing_and_changes_everything(dev):
    notes, gold = dev
    originals = {"p1-n1": notes["p1-n1"]}
    s = score(originals, {"p1-n1": re.sub(r"[A-Za-z0-9]", "*", notes["p1-n1"])}, gold)
    assert s["mention_leak"]["leaked"] == 0 and s["value_leak"]["leaked"] == 0
    assert s["non_phi_tokens"]["rate"] == 1.0


def test_intact_note_leaks_every_mention_and_changes_nothing(dev):
    notes, gold = dev
    ids = ["p1-n1", "p49-n35"]
    originals = {i: notes[i] for i in ids}
    s = score(originals, dict(originals), gold)
    n = sum(1 for i in ids for m in gold[i] if not m["safe_harbor_allowed"])
    assert s["mention_leak"] == {"n": n, "leaked": n, "rate": 1.0}
    assert s["value_leak"] == {"n": n, "leaked": n, "rate": 1.0}
    assert s["mention_leak_by_type"]["Location"]["rate"] == 1.0
    assert s["mention_leak_by_type"]["HCPName"]["rate"] == 1.0
    assert s["non_phi_tokens"]["changed"] == 0


def test_partial_name_is_a_mention_leak_but_not_a_value_leak(dev):
    notes, gold = dev
    text = notes["p3-n5"]
    mention = next(m for m in gold["p3-n5"] if m["value"] == "FORMAN-LYONS")
    # only LYONS replaced: FORMAN stays in place
    out = text[:mention["start"]] + "FORMAN-[NAME]" + text[mention["end"]:]
    s = score({"p3-n5": text}, {"p3-n5": out}, {"p3-n5": [mention]})
    assert s["mention_leak"]["leaked"] == 1
    assert s["value_leak"]["leaked"] == 0


def test_value_match_is_case_insensitive_and_whole():
    assert value_survives("Calvert", "transfer from CALVERT hospital")
    assert value_survives("7/22", "found 7/22 on floor")
    assert not value_survives("7/22", "found 17/22 on floor")
    assert not value_survives("GH", "high")
    assert value_survives("+41 36 507 52 91", "call +41 36 507 52 91.")


def test_missing_output_is_an_error(dev):
    notes, gold = dev
    with pytest.raises(ValueError):
        score({"p1-n1": notes["p1-n1"]}, {}, gold)


def _write_shard(folder: Path, rows: list[dict]) -> None:
    folder.mkdir(parents=True)
    table = pa.Table.from_pylist(rows)
    with pa.OSFile(str(folder / "00000.arrow"), "wb") as sink, pa.ipc.new_stream(sink, table.schema) as w:
        w.write_table(table)


def test_stage_output_matched_by_id_or_by_position(tmp_path):
    docs = [{"id": "a", "text": "x"}, {"id": "b", "text": "y"}]
    _write_shard(tmp_path / "byid/data", [{"id": "b", "text": "B"}, {"id": "a", "text": "A"}])
    assert read_stage_output(tmp_path / "byid", docs) == ({"a": "A", "b": "B"}, 0)
    # pseudonymized ids: the stage keeps input order
    _write_shard(tmp_path / "pseudo/data", [{"id": "h1", "text": "A"}, {"id": "h2", "text": "B"}])
    assert read_stage_output(tmp_path / "pseudo", docs) == ({"a": "A", "b": "B"}, 0)
    _write_shard(tmp_path / "short/data", [{"id": "a", "text": "A"}])
    with pytest.raises(RuntimeError):
        read_stage_output(tmp_path / "short", docs)


def test_locale_set_is_deterministic_with_exact_offsets():
    docs = make_locale_documents(40, 3)
    assert docs == make_locale_documents(40, 3)
    assert docs != make_locale_documents(40, 4)
    # ... and the same in another process, whatever its hash seed (it_IT's cities come from a set)
    import subprocess
    import sys
    code = ("import hashlib, json\n"
            "from scripts.evaluation.phi_synth_locales import make_locale_documents\n"
            "print(hashlib.sha256(json.dumps(make_locale_documents(300, 7)).encode()).hexdigest())\n")
    root = Path(__file__).resolve().parents[1]
    digests = {subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, check=True,
                              env={**os.environ, "PYTHONHASHSEED": seed}, timeout=300).stdout for seed in ("1", "2")}
    assert len(digests) == 1
    assert len({d["locale"] for d in docs}) >= 12
    types = set()
    for d in docs:
        for g in d["gold"]:
            assert d["text"][g["start"]:g["end"]] == g["value"]
            types.add(g["type"])
    assert {"PHONE", "STREET_ADDRESS", "POSTAL_CODE", "PERSON", "PERSON_CUE", "IBAN"} <= types
    # the scorer takes the set as it is: an intact output leaks every value
    s = score({d["id"]: d["text"] for d in docs}, {d["id"]: d["text"] for d in docs},
              {d["id"]: d["gold"] for d in docs}, group_by=("locale",))
    assert s["value_leak"]["rate"] == 1.0 and s["value_leak_by_locale"]["de_CH"]["rate"] == 1.0


def test_patient_folds_keep_each_patient_in_one_fold(dev):
    from scripts.models.train_phi_detector import patient, patient_folds
    notes, _ = dev
    ids = sorted(notes)
    folds = patient_folds(ids, 5)
    assert folds == patient_folds(list(reversed(ids)), 5)           # not the order of the input
    assert sorted(i for f in folds for i in f) == ids
    patients = [{patient(i) for i in f} for f in folds]
    assert all(not (patients[a] & patients[b]) for a in range(5) for b in range(a + 1, 5))
    sizes = [len(f) for f in folds]
    assert max(sizes) - min(sizes) <= 141                           # the largest patient has 141 notes


def test_mimesis_set_is_deterministic_with_exact_offsets():
    from scripts.evaluation.phi_synth_mimesis import make_mimesis_documents
    docs = make_mimesis_documents(30, 2)
    assert docs == make_mimesis_documents(30, 2) and docs != make_mimesis_documents(30, 3)
    for d in docs:
        for g in d["gold"]:
            assert d["text"][g["start"]:g["end"]] == g["value"]
    assert {"PERSON", "LOCATION", "FACILITY"} == {g["type"] for d in docs for g in d["gold"]}
    assert any(d["text"].isupper() for d in docs) and any(d["text"].islower() for d in docs)


def test_gold_spans_for_training_drop_titles_and_take_facility_words():
    from scripts.models.train_phi_detector import gold_spans
    text = "seen by Dr. Samantha Brown at Holy Cross Hospital today"
    gold = [{"type": "NAME", "start": 8, "end": 26}, {"type": "Location", "start": 30, "end": 34},
            {"type": "Location", "start": 35, "end": 40}, {"type": "Date", "start": 50, "end": 55}]
    assert [(text[s:e], label) for s, e, label in gold_spans(text, gold)] == [
        ("Samantha Brown", "PER"), ("Holy", "LOC"), ("Cross Hospital", "LOC")]


def test_web_ewt_gold_spans_are_the_labelled_words():
    """The held-out web set: every gold span is the text its PER/LOC tags cover, one span per
    B- tag, five genres; countries and US states are marked allowed by Safe Harbor."""
    import gzip

    from scripts.evaluation.eval_phi import EWT, web_ewt_documents
    docs, gold = web_ewt_documents()
    begins = sum(line.split("\t")[2] in ("B-PER", "B-LOC")
                 for split in ("dev", "test")
                 for line in gzip.open(EWT / f"en_ewt-ud-{split}.iob2.gz", "rt", encoding="utf-8")
                 if line.count("\t") >= 2 and not line.startswith("#"))
    entries = [e for d in docs for e in gold[d["id"]]]
    assert len(entries) == begins > 1000
    texts = {d["id"]: d["text"] for d in docs}
    assert all(texts[d["id"]][e["start"]:e["end"]] == e["value"] for d in docs for e in gold[d["id"]])
    assert {e["genre"] for e in entries} == {"answers", "email", "newsgroup", "reviews", "weblog"}
    allowed = {e["value"] for e in entries if e["safe_harbor_allowed"]}
    assert {"Iraq", "Texas"} & allowed and not {e["value"] for e in entries if e["type"] == "NAME"} & allowed


def test_held_out_summary_names_the_worst_source():
    from scripts.evaluation.eval_phi import held_out

    def leak(m, v, t, n=100):
        return {"mention_leak": {"rate": m, "n": n}, "value_leak": {"rate": v}, "non_phi_tokens": {"rate": t}}
    report = {"cv": {"at_default": leak(0.01, 0.02, 0.005)},
              "web_ewt": {"systems": {"medprep_phi": leak(0.12, 0.09, 0.07)}},
              "synthetic_mimesis": {"systems": {"medprep_phi": {"error": "crashed"}}},
              "synthetic_mimesis_formats": {"systems": {"medprep_phi": leak(0.02, 0.15, 0.04)}}}
    summary = held_out(report)
    assert [r["key"] for r in summary["sources"]] == ["deid_dev_cv", "web_ewt", "mimesis_formats"]
    assert summary["worst"]["key"] == "web_ewt" and summary["worst_by_values"]["key"] == "mimesis_formats"


def test_a_public_training_corpus_is_held_out_beside_its_in_sample_result_and_the_anchors():
    """web-ner's row: the stage with a detector fitted without it, the committed stage's result on
    the same text as in-sample, and the anchors' results."""
    from scripts.evaluation.eval_phi import held_out

    def leak(m):
        return {"mention_leak": {"rate": m, "n": 10}, "value_leak": {"rate": m}, "non_phi_tokens": {"rate": 0.1}}
    report = {"cross_style": {"web_ner_without_web": {"at_default": leak(0.16)}},
              "web_ner": {"systems": {"medprep_phi": leak(0.03), "philter": leak(0.2)}}}
    row, = held_out(report)["sources"]
    assert row["key"] == "web_ner" and row["mention_leak"] == 0.16 and not row["never_fitted"]
    assert row["in_sample"]["mention_leak"] == 0.03 and row["anchors"]["philter"]["mention_leak"] == 0.2
    assert row["anchors"]["presidio"] is None


def test_litbank_training_spans_are_names_not_descriptions():
    """LitBank labels every mention, nested: the reader keeps the names ("Kellynch Hall", "Sir
    Walter Elliot" without "Sir"), never a description ("a man who ...", "the printer"), a title
    or an opening article; Gloucester of "the county of Gloucester" is a place."""
    from scripts.models.train_phi_detector import LITBANK_OPENERS, LITBANK_TITLES, _litbank_names, litbank_documents
    docs = litbank_documents()
    spans = [(text[s:e], label) for text, found in docs for s, e, label in found]
    assert len(docs) > 800 and len(spans) > 3000
    assert all(v[:1].isupper() or v[:1].isdigit() for v, _ in spans)
    assert not [v for v, label in spans if v.split()[0].lower().rstrip(".") in
                (LITBANK_OPENERS | LITBANK_TITLES if label == "PER" else LITBANK_OPENERS)]
    words = "Sir Walter Elliot , of Kellynch Hall , was a man who read the county of Gloucester".split()
    layer1 = ["B-PER", "I-PER", "I-PER", "O", "O", "B-FAC", "I-FAC", "O", "O", "B-PER", "I-PER", "I-PER", "I-PER",
              "B-GPE", "I-GPE", "I-GPE", "I-GPE"]
    got = _litbank_names([(w, [t]) for w, t in zip(words, layer1)])
    assert [(w, g) for w, g in zip(words, got) if g] == [
        ("Walter", "PER"), ("Elliot", "PER"), ("Kellynch", "LOC"), ("Hall", "LOC"), ("Gloucester", "LOC")]


def test_a_handles_at_sign_is_never_a_name():
    """The Broad Twitter Corpus tags the "@" of a handle B-PER: the reader labels the handle only."""
    from scripts.models.train_phi_detector import web_documents
    spans = [text[s:e] for text, found in web_documents(("btc-test.conll.gz",)) for s, e, _ in found]
    assert spans and "@" not in spans and all(any(c.isalnum() for c in v) for v in spans)


def test_news_set_keeps_articles_apart_and_pud_as_written(tmp_path):
    """data/phi/news, held out: WikiGold's IOB1 tags give one span per name (an adjacent name of
    the same type opens with B-), no document crosses an article's -DOCSTART- line and the marker
    is never text; PUD's sentences are read as written (curly quotes, no space before a comma),
    one span per B- tag; every gold span is its value in the text."""
    import gzip

    from scripts.evaluation.eval_phi import PUD, news_documents, uner_documents
    from scripts.models.train_phi_detector import conll_documents
    sample = tmp_path / "sample.conll.gz"
    with gzip.open(sample, "wt", encoding="utf-8") as f:
        f.write("-DOCSTART- O\n\nAnn I-PER\nLee I-PER\nBo B-PER\nin O\nOslo I-LOC\n\n"
                "-DOCSTART- O\n\nRome I-LOC\n\n")
    docs = conll_documents(sample)
    assert [[text[s:e] for s, e, _ in spans] for text, spans in docs] == [["Ann Lee", "Bo", "Oslo"], ["Rome"]]
    pud = uner_documents(PUD)
    lines = gzip.open(PUD, "rt", encoding="utf-8").read().splitlines()
    begins = sum(line.split("\t")[2] in ("B-PER", "B-LOC") for line in lines
                 if line.count("\t") >= 2 and not line.startswith("#"))
    assert sum(len(spans) for _, _, spans in pud) == begins > 500
    first = pud[0][1]
    assert first.startswith("“While much of the digital transition") and "States, the" in first
    assert ("Kori Schulman", "PER") in {(first[s:e], label) for s, e, label in pud[0][2]}
    docs, gold = news_documents()
    texts = {d["id"]: d["text"] for d in docs}
    entries = [e for d in docs for e in gold[d["id"]]]
    assert len(docs) > 500 and not [t for t in texts.values() if "DOCSTART" in t]
    assert all(texts[d["id"]][e["start"]:e["end"]] == e["value"] for d in docs for e in gold[d["id"]])
    assert {e["corpus"] for e in entries} == {"wikigold", "pud"}
