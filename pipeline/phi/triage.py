"""PHI triage: spaCy's NER (the engine's one slow part, ~87% of the default run's phi time)
runs only on the windows of a text that can give the engine a name.

In the literature profile spaCy's entities feed one recognizer, `ner_person_recognizer`
(engine.py), and it keeps a PERSON only when the span is name-shaped and either follows a
title ("Dr", "Mrs", ...) or holds two words or more of which the first is a given name of the
name lists (pipeline/phi/lexicon.py and Faker's en_US list). So a text can yield a name only
where one of these triggers is:
- a title followed by a capital letter;
- a capitalized given name followed (after white space, a hyphen or an apostrophe) by a
  capital letter.
Anything else spaCy tags there is dropped by that recognizer. A batch is screened with Arrow
(RE2 for the titles; a word split and a hash look-up against the given names for the rest);
only the texts that pass are searched with `re` for the triggers' positions. Each trigger
gets a window of MARGIN characters either side (cut at white space, overlapping windows
merged), so that spaCy sees the name with the context its NER reads (a CNN over a few tokens
either side and the parser state of the tokens just before). The whole text is tokenized as
before, the windows' entities are set on it, and every other recognizer (the RE2-gated
rules, the account checks, the name propagation) runs on the whole text as before.

Both triages hand Presidio artifacts that tokenize on demand (OnDemandArtifacts): a text
spaCy has not parsed is tokenized only when something reads its tokens, which in our
recognizer set is Presidio's context scoring of a result of a recognizer with context words
(the credit card and IBAN recognizers). A text with no window (literature) or any text
(clinical) is otherwise never tokenized by spaCy: the results are the same, by construction.

The clinical profile's names and places come from the learned detector and the name rules,
which read every token of the whole text with their own tokenizer; spaCy's NER is off there,
so its triage (TokenTriage) sends spaCy only the texts whose tokens are read. A detector model
that reads spaCy's entities turns the NER back on, and then TokenTriage runs the full pipeline
on every text (its features read the entities of every token). `docs/phi.md` ("Triage") gives
the measured difference to the untriaged engine."""
from __future__ import annotations

import re
from collections import Counter
from functools import lru_cache

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from presidio_analyzer.nlp_engine import NlpArtifacts

from pipeline.phi.engine import _L, _U, first_names
from pipeline.phi.eponyms import TITLES

# Characters of context either side of a trigger (~20 tokens of abstract text; spaCy's NER
# reads about four tokens either side).
MARGIN = 160
_TITLE_TRIGGER = TITLES + rf"\s*[{_U}]"
# The first word of a name as ner_person_recognizer's name shape has it (engine._WORD).
_FIRST_WORD = rf"[{_U}][{_L}]+"
_TRIGGERS = re.compile(rf"(?P<title>{_TITLE_TRIGGER})|(?P<word>{_FIRST_WORD})(?=(?:\s+|['’-])[{_U}])")
_NOT_LETTERS = rf"[^{_U}{_L}]+"


@lru_cache(maxsize=1)
def given_names() -> frozenset[str]:
    """The given names a literature-profile PERSON can start with: exactly the test of
    ner_person_recognizer (Faker's en_US list, or any locale's list and not a common word)."""
    from pipeline.phi.lexicon import lexicon
    world = lexicon()
    names = set(first_names()) | {w for w in world.given if not world.is_common(w)}
    return frozenset(names)


def arrow_lowered(names) -> pa.Array:
    """The names as Arrow's utf8_lower leaves the words that Python lowers to them: they differ
    on one letter, "İ" (Python: "i" and a combining dot; Arrow: "i")."""
    return pa.array(sorted(set(names) | {w.replace("i\u0307", "i") for w in names}), pa.string())


class NerTriage:
    """Chooses the windows of a batch that go to spaCy's NER, and builds Presidio's
    NlpArtifacts for the whole texts from them. `counts` holds what it sent (characters and
    documents in and sent, windows), for the stage's stats; the caller clears it."""

    profile = "literature"   # the engine refuses it in another profile

    def __init__(self, margin: int = MARGIN):
        self.margin = margin
        self.given = given_names()
        self._given_arrow = arrow_lowered(self.given)
        self.counts: Counter = Counter()

    def candidates(self, batch: pa.Array) -> np.ndarray:
        """Which texts of the batch hold a title trigger or a capitalized given name (Arrow)."""
        titled = pc.match_substring_regex(batch, _TITLE_TRIGGER).to_numpy(zero_copy_only=False)
        words = pc.split_pattern_regex(batch, _NOT_LETTERS)
        flat = pc.list_flatten(words)
        shaped = pc.match_substring_regex(flat, f"^{_FIRST_WORD}$")
        hit = pc.and_(shaped, pc.is_in(pc.utf8_lower(flat), value_set=self._given_arrow))
        hit = hit.to_numpy(zero_copy_only=False)
        owner = np.repeat(np.arange(len(batch)), pc.list_value_length(words).fill_null(0).to_numpy())
        named = np.bincount(owner[hit], minlength=len(batch)) > 0
        return (titled | named) & ~pc.is_null(batch).to_numpy(zero_copy_only=False)

    def windows(self, text: str) -> list[tuple[int, int]]:
        """The merged windows (start, end) around the text's triggers, cut at white space."""
        out: list[list[int]] = []
        for m in _TRIGGERS.finditer(text):
            if m.group("word") is not None and m.group("word").lower() not in self.given:
                continue
            start, end = _cut_before(text, m.start() - self.margin), _cut_after(text, m.end() + self.margin)
            if out and start <= out[-1][1]:
                out[-1][1] = max(out[-1][1], end)
            else:
                out.append([start, end])
        return [(s, e) for s, e in out]

    def process_batch(self, nlp_engine, texts: list[str], batch_size: int) -> list[tuple[str, object]]:
        """(text, NlpArtifacts) per text, as SpacyNlpEngine.process_batch gives them, with the
        NER run on the triggers' windows only."""
        nlp = nlp_engine.nlp["en"]
        chosen = self.candidates(pa.array(texts, pa.string()))
        spans = [(i, s, e) for i in np.flatnonzero(chosen) for s, e in self.windows(texts[i])]
        found: dict[int, list] = {}
        for (i, start, _), window in zip(spans, nlp.pipe([texts[i][s:e] for i, s, e in spans], batch_size=batch_size)):
            if window.ents:
                found.setdefault(i, []).extend((start + ent.start_char, start + ent.end_char, ent.label_)
                                               for ent in window.ents)
        # Only the texts with an entity need their spaCy tokens now (to set the entities on
        # them); every other text is tokenized if and when a recognizer reads its tokens.
        docs: dict[int, object] = {}
        whole = []
        for i, ents in found.items():
            doc = nlp.make_doc(texts[i])
            spans_of_doc = [doc.char_span(s, e, label=label) for s, e, label in ents]
            if any(span is None for span in spans_of_doc):
                whole.append(i)          # a window tokenized differently: the whole text instead
                continue
            doc.ents = spans_of_doc
            docs[i] = doc
        for i, doc in zip(whole, nlp.pipe([texts[i] for i in whole], batch_size=batch_size)):
            docs[i] = doc
        redone = set(whole)
        sent_chars = sum(e - s for i, s, e in spans if i not in redone) + sum(len(texts[i]) for i in whole)
        self.counts.update(docs_in=len(texts), docs_sent=len({i for i, _, _ in spans} | redone),
                           windows=len(spans), chars_in=sum(map(len, texts)), chars_sent=sent_chars,
                           docs_whole=len(whole), docs_tokenized=len(docs),
                           chars_tokenized=sum(len(texts[i]) for i in docs))
        return [
            (
                t,
                doc_artifacts(nlp_engine, docs[i])
                if i in docs
                else OnDemandArtifacts(nlp_engine, t, self.counts),
            )
            for i, t in enumerate(texts)
        ]


class TokenTriage:
    """The clinical profile's triage: spaCy's NER is off there (names and places are the
    detector's and the name rules', which tokenize the whole text themselves), so spaCy only
    tokenizes for Presidio, and only the texts whose tokens a recognizer reads (OnDemandArtifacts).
    `counts` as NerTriage's: what went to spaCy is what it tokenized (chars_sent, docs_sent)."""

    profile = "clinical"

    def __init__(self):
        self.counts: Counter = Counter()

    def process_batch(self, nlp_engine, texts: list[str], batch_size: int) -> list[tuple[str, object]]:
        nlp = nlp_engine.nlp["en"]
        chars = sum(map(len, texts))
        self.counts.update(docs_in=len(texts), chars_in=chars)
        if nlp.pipe_names:
            # A pipeline component runs (a detector model that reads spaCy's entities turned the
            # NER on): its output on every token can matter, so every text goes to spaCy whole.
            self.counts.update(docs_sent=len(texts), chars_sent=chars, docs_tokenized=len(texts), chars_tokenized=chars)
            return list(nlp_engine.process_batch(texts, language="en", batch_size=batch_size))
        self.counts.update(docs_sent=0, chars_sent=0)
        return [(t, _OnDemandTokens(nlp_engine, t, self.counts)) for t in texts]


def doc_artifacts(nlp_engine, doc, language: str = "en") -> NlpArtifacts:
    """Presidio's NlpArtifacts of a spaCy doc, as SpacyNlpEngine.process_batch makes them for
    the docs it runs (the lemmas, the token offsets, the entities under the engine's
    ner_model_configuration: labels mapped to Presidio's, ignored ones dropped, its default
    score, lowered for its low-score entities), for docs the triage ran itself."""
    config = nlp_engine.ner_model_configuration
    entities, scores = [], []
    for ent in doc.ents:
        if ent.label_ in config.labels_to_ignore:
            continue
        ent.label_ = config.model_to_presidio_entity_mapping.get(ent.label_, ent.label_)
        if ent.label_ in config.labels_to_ignore:
            continue
        entities.append(ent)
        low = ent.label_ in config.low_score_entity_names
        scores.append(config.default_score * (config.low_confidence_score_multiplier if low else 1))
    return NlpArtifacts(entities=entities, tokens=doc, tokens_indices=[t.idx for t in doc],
                        lemmas=[t.lemma_ for t in doc], nlp_engine=nlp_engine, language=language, scores=scores)


class OnDemandArtifacts(NlpArtifacts):
    """Presidio's NlpArtifacts of a text without entities, tokenized by spaCy on first use of
    its tokens, lemmas or keywords: doc_artifacts of nlp.make_doc(text), built when read.
    Counts the text in `counts` (docs_tokenized, chars_tokenized) when it is."""

    def __init__(self, nlp_engine, text: str, counts: Counter):
        # Not NlpArtifacts.__init__: it would read the tokens (for the keywords) at once.
        self.nlp_engine, self.entities, self.scores = nlp_engine, [], []
        self._text, self._counts, self._built = text, counts, None

    def _artifacts(self) -> NlpArtifacts:
        if self._built is None:
            self._built = doc_artifacts(self.nlp_engine, self.nlp_engine.nlp["en"].make_doc(self._text))
            self._counts.update(docs_tokenized=1, chars_tokenized=len(self._text))
            self._tokenized()
        return self._built

    def _tokenized(self) -> None:
        pass

    tokens = property(lambda self: self._artifacts().tokens)
    tokens_indices = property(lambda self: self._artifacts().tokens_indices)
    lemmas = property(lambda self: self._artifacts().lemmas)
    keywords = property(lambda self: self._artifacts().keywords)

    def to_json(self) -> str:
        self._artifacts()
        return self._built.to_json()


class _OnDemandTokens(OnDemandArtifacts):
    """OnDemandArtifacts of TokenTriage: a text tokenized is a text sent to spaCy."""

    def _tokenized(self) -> None:
        self._counts.update(docs_sent=1, chars_sent=len(self._text))


def _cut_before(text: str, pos: int) -> int:
    """The start of the white-space-delimited chunk that holds `pos` (0 if pos <= 0)."""
    if pos <= 0:
        return 0
    return max(text.rfind(c, 0, pos) for c in " \n\t\r") + 1


def _cut_after(text: str, pos: int) -> int:
    """The end of the chunk that holds `pos`: the next white space, or the text's end."""
    m = _SPACE.search(text, pos)
    return len(text) if m is None else m.start()


_SPACE = re.compile(r"\s")
