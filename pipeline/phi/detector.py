"""The learned name and place detector: a linear-chain CRF (python-crfsuite) over word tokens.

It tags persons (patients, relatives, clinicians) and locations (towns, streets, wards and
facilities) with BIO labels from features that carry across writing styles rather than values:
word shape and case pattern against the case mode of the note and of the line, membership in the
general lists (given names, surnames, English and medical words, places, US hospital name words;
pipeline/phi/lexicon.py, data/phi/, data/us-hospitals/), the cue word before a token (title,
role, relation, a verb of moving a patient), the words around it (window +-2) and its place in
the line. Nothing here is a value seen in an evaluation set.

A token is PHI when the CRF's marginal probability of its not being O is at least `threshold`
(the recall setting); consecutive PHI tokens form a span, typed by the larger of the PERSON and
LOCATION marginal mass. `scripts/models/train_phi_detector.py` builds data/phi/phi_detector.crfsuite."""
from __future__ import annotations

import csv
import re
from collections import Counter
from functools import lru_cache
from pathlib import Path
from typing import NamedTuple

from pipeline.phi.lexicon import (
    DATA,
    Lexicon,
    detector_lexicon,  # the lists the committed model was trained on
)
from pipeline.resources import resource

DEFAULT_MODEL = DATA / "phi_detector.crfsuite"
# The second model: the same features without the words themselves (no `w=`, `pw=`, `nw=`), so
# it cannot remember names, and its errors differ from the first's; their marginals are combined
# by the larger (docs/phi.md, "The learned name and place detector").
DEFAULT_WORD_FREE_MODEL = DATA / "phi_detector_word_free.crfsuite"
# The marginal probability of not being O that makes a token PHI (scripts/evaluation/eval_phi.py --curve).
DEFAULT_THRESHOLD = 0.2
HOSPITALS = resource("data/us-hospitals/hospitals.csv")
LABELS = ("PER", "LOC")
ENTITY = {"PER": "PERSON", "LOC": "LOCATION"}

# Words (runs of letters with inner apostrophes), numbers, single punctuation marks.
TOKEN = re.compile(r"[^\W\d_]+(?:['’][^\W\d_]+)*|\d+|[^\w\s]|_")

# Cue words before a name or a place: general English, not values of any note.
TITLE = frozenset("dr drs doctor doctors mr mrs ms miss mister mx prof professor sir madam dame".split())
ROLE = frozenset("""np pa md do rn lpn rrt crt cna sw msw lcsw licsw cm ho hos fellow resident intern attending
nurse chaplain rabbi father fr rev reverend sister pastor priest imam pharmacist pharmd therapist pt ot rt
slp cardiologist surgeon physician pcp neurologist oncologist dietitian nutritionist coordinator manager
case caseworker interpreter translator tech technician aide student sn srna crna anesthesia anesthesiologist
radiologist hospitalist intensivist fellow team""".split())
RELATION = frozenset("""wife husband son sons daughter daughters dtr dau sister sisters brother brothers mother
mom mum father dad parent parents friend friends niece nephew aunt uncle grandson granddaughter grandmother
grandfather grandma grandpa cousin fiance fiancee boyfriend girlfriend partner spouse proxy hcp neighbor
neighbour guardian sibling siblings stepdaughter stepson stepmother stepfather companion roommate caregiver
lawyer attorney employer landlord family relative relatives visitor visitors contact""".split())
SPEECH = frozenset("""spoke talked discussed called paged notified informed updated per met visited seen seeing
page contact contacted asked told with w aware consulted consult by named name called signed dictated""".split())
MOVE = frozenset("""transferred transfered transfer trans tx txd sent admitted admit adm taken went go going
moved returned return discharged dc dced arrived came come brought screened accepted followed presented
referred transported flown flew drove treated seen evaluated visited lives living lived resides residing
born raised works worked located visiting vacation home""".split())
PREP = frozenset("to from at in into near of via @".split())
# List tags of a word, in the order the features were trained with.
_CUE_TAGS = ((TITLE, "title"), (ROLE, "role"), (RELATION, "rel"), (SPEECH, "speech"), (MOVE, "move"), (PREP, "prep"))
# Words of a facility's name that are not the name itself; the list's frequent words are learned
# from data/us-hospitals (see _hospital_words); these are the ones outside it.
# Closed-class words that never begin or end a name or a place ("Mercy Hospital [on] May 3",
# "[our] Chicago clinic"): a run of PHI tokens is trimmed of them at both ends.
EDGE_WORDS = frozenset("""on in at to from of by for with near via into onto the a an and or our my his her their
your its is was were are be been has had seen since like as than who which that this these those""".split())
# The head nouns after which a person's or a place's name is an eponym of a disease or a sign
# ("Babinski sign", "Stevens-Johnson syndrome", "Lyme disease"); not "scale", "score" or "cell",
# which follow places and phone labels' names too ("U Iowa scale", "Ann Lee cell 410-...").
DISEASE_HEADS = frozenset("""disease diseases syndrome syndromes reflex sign lymphoma sarcoma palsy phenomenon triad
maneuver manoeuvre aphasia encephalopathy dementia thyroiditis granulomatosis ulcer disorder anomaly malformation
tumor tumour""".split())
# Words of origin or ethnicity, which describe a patient ("a 45yo African American male"), not name one.
ORIGIN_WORDS = frozenset("""american african asian hispanic latino latina latinx caucasian european mexican chinese
japanese korean vietnamese filipino haitian jamaican russian italian german polish greek portuguese brazilian cuban
dominican arab arabic somali ethiopian nigerian indian pakistani native""".split())
FACILITY_EXTRA = frozenset("""hospital hosp hospitals clinic clinics center centre ctr med medical health
healthcare rehab rehabilitation infirmary hospice nursing home manor house snf ltac ltach va vamc unit ward
floor icu micu sicu ccu csru university univ u college institute""".split())
# The head words of a facility's name ("Holy Cross Hospital", "Mercy Medical Center").
FACILITY_HEAD = frozenset("""hospital hosp hospitals medical med center centre ctr clinic clinics health healthcare
memorial regional general infirmary institute rehab rehabilitation hospice campus manor""".split())


# Nouns that take a number after them as the points of a schedule or a document ("Week 12",
# "Time 2", "Cycle 3", "Figure 2"): never a place or a person by themselves.
COUNTED_NOUNS = frozenset("""week weeks day days month months year years time visit cycle phase stage grade
level step dose session round wave period arm group part section figure table chapter version""".split())


_DROP_LOWER = str.maketrans("", "", "abcdefghijklmnopqrstuvwxyz")


def case_mode(text: str) -> str:
    """'upper' for ALL-CAPS text, 'lower' for lower-case text, else 'mixed'."""
    letters = re.sub(r"[^A-Za-z]", "", text[:4000])
    if not letters:
        return "mixed"
    upper = len(letters.translate(_DROP_LOWER)) / len(letters)
    return "upper" if upper > 0.6 else "lower" if upper < 0.02 else "mixed"


def _shape(word: str) -> str:
    """'Xx', 'X', 'XX', 'x', 'x.X' ...: case pattern with runs collapsed; 'd2' for numbers."""
    if word.isdigit():
        return f"d{min(len(word), 5)}"
    if not word[0].isalnum():
        return word[0]
    s = re.sub(r"[^\W\d_]", lambda m: "X" if m.group().isupper() else "x", word)
    s = re.sub(r"\d", "d", s)
    return re.sub(r"(.)\1+", r"\1\1", s) if len(s) > 2 else s


@lru_cache(maxsize=1)
def hospital_words() -> tuple[frozenset[str], frozenset[str], frozenset[str]]:
    """From the US hospital list: (facility words: in at least 20 names, like "medical",
    "regional", "mercy"; naming words: the rest of the names' words; initialisms: "MGH" for
    Massachusetts General Hospital, "UCMC" style)."""
    with open(HOSPITALS, encoding="utf-8") as f:
        names = [row["name"] for row in csv.DictReader(f)]
    counts: Counter = Counter()
    initials = set()
    for name in names:
        words = re.findall(r"[A-Za-z]+(?:'[a-z]+)?", name)
        counts.update({w.lower() for w in words if len(w) > 2 and w.lower() not in ("and", "the")})
        content = [w for w in words if w.lower() not in ("of", "the", "and", "at", "inc", "llc")]
        if 2 <= len(content) <= 6:
            initials.add("".join(w[0] for w in content).lower())
    facility = frozenset(w for w, c in counts.items() if c >= 20) | FACILITY_EXTRA
    naming = frozenset(w for w in counts if w not in facility)
    return facility, naming, frozenset(initials)


def tokenize(text: str) -> list[tuple[int, int, str]]:
    return [(m.start(), m.end(), m.group()) for m in TOKEN.finditer(text)]


def _lex_tags(low: str, word: str, lex: Lexicon, hosp) -> list[str]:
    facility, naming, initials = hosp
    tags = []
    if low in lex.given:
        tags.append("given")
    if low in lex.surnames:
        tags.append("sur")
    if lex.is_common(low):
        tags.append("common")
    if low in lex.english:
        tags.append("eng")
    if low in lex.place_words:
        tags.append("place")
    if low in facility:
        tags.append("fac")
    elif low in naming:
        tags.append("hname")
    if low in initials and word.isupper() and len(word) > 1:
        tags.append("hinit")
    tags += [tag for words, tag in _CUE_TAGS if low in words]
    return tags or ["nolist"]


class _WordFeatures:
    """The features of a token that depend on its text alone, and those it lends to its
    neighbours, computed once per distinct word (per process): feature extraction is then
    mostly the joining of cached lists."""

    def __init__(self, lex: Lexicon):
        self.lex, self.hosp = lex, hospital_words()
        self.words: dict[str, tuple] = {}
        self.pairs: dict[tuple, list[str]] = {}
        self.moded: dict[tuple, list[str]] = {}

    def get(self, w: str) -> tuple:
        """(lexicon tags, own features, {offset: features as a neighbour at that offset}, shape,
        own word features, {offset: word features as a neighbour}): the word features (the word
        itself) apart, as the word-free model has none."""
        hit = self.words.get(w)
        if hit is not None:
            return hit
        if len(self.words) > 200_000:
            self.words.clear()
        low, sh = w.lower(), _shape(w)
        if w[0].isalpha():
            tags = tuple(_lex_tags(low, w, self.lex, self.hosp))
            if "hinit" in tags and not w.isupper():
                tags = tuple(t for t in tags if t != "hinit")
            own = ["sh=" + sh, f"len={min(len(w), 7)}"] + (["suf=" + low[-3:]] if len(low) > 3 else [])
            own_words = ["w=" + low]
        else:
            tags = ("num",) if w[0].isdigit() else ("punct",)
            own = ["sh=" + sh, f"num={min(len(w), 5)}" if w[0].isdigit() else "p=" + w]
            own_words = []
        own += ["x=" + t for t in tags]
        if len(w) == 1 and w.isalpha() and w.isupper():
            own.append("single")
        near, near_words = {}, {}
        for d in (-2, -1, 1, 2):
            f = [f"{d}:sh={sh}"]
            near_words[d] = [f"{d}:w={low}"] if w[0].isalpha() or abs(d) == 1 else []
            if abs(d) == 1:
                f += [f"{d}:x={t}" for t in tags]
            elif w[0].isalpha():
                f += [f"{d}:x={t}" for t in tags if t not in ("common", "eng", "nolist")]
            near[d] = f
        hit = self.words[w] = (tags, own, near, sh, own_words, near_words)
        return hit

    def pair(self, d: int, a: tuple, b: tuple) -> list[str]:
        key = (d, a, b)
        hit = self.pairs.get(key)
        if hit is None:
            hit = self.pairs[key] = [f"{d}x|0x={x}|{y}" for x in a for y in b]
        return hit

    def with_mode(self, mode: str, sh: str, tags: tuple) -> list[str]:
        key = (mode, sh, tags)
        hit = self.moded.get(key)
        if hit is None:
            hit = self.moded[key] = [f"msh={mode}|{sh}"] + [f"mx={mode}|{t}" for t in tags]
        return hit


@lru_cache(maxsize=4)
def _word_features(lex: Lexicon) -> _WordFeatures:
    return _WordFeatures(lex)


def featurize(text: str, toks: list[tuple[int, int, str]], lex: Lexicon | None = None,
              ents: list[tuple[int, int, str]] | None = None, words: bool = True) -> list[list[str]]:
    """Feature strings per token: the word-free features, then (unless `words` is False: the
    word-free model's features) the words themselves. `ents`: (start, end, label) of spaCy
    entities, when given. The word-free features come first, so a word-free model reads the full
    list as its own (crfsuite skips attributes a model does not have)."""
    return _features(text, toks, lex, ents, words)


def _features(text: str, toks: list[tuple[int, int, str]], lex: Lexicon | None,
              ents: list[tuple[int, int, str]] | None, with_words: bool) -> list[list[str]]:
    wf = _word_features(lex or detector_lexicon())
    n = len(toks)
    mode = case_mode(text)
    info = [wf.get(w) for _, _, w in toks]
    lows = [w.lower() for _, _, w in toks]
    words = [w[0].isalpha() for _, _, w in toks]
    # Multi-word places ("new york", "salt lake city"): B/I over the phrase.
    places = wf.lex.places
    multi = [""] * n
    for i in range(n - 1):
        if not (words[i] and words[i + 1]):
            continue
        for k in (3, 2):
            if i + k <= n and all(words[i:i + k]) and " ".join(lows[i:i + k]) in places \
                    and "\n" not in text[toks[i][0]:toks[i + k - 1][1]]:
                multi[i] = "mplace=B"
                for j in range(i + 1, i + k):
                    multi[j] = "mplace=I"
                break
    gaps = [text[toks[i - 1][1]:toks[i][0]] if i else text[:toks[0][0]] for i in range(n)]
    newline = ["\n" in g for g in gaps]
    # Line structure: first/last token of a line, the line's own case.
    line_mode, start = [mode] * n, 0
    for i in range(n):
        if i == n - 1 or newline[i + 1]:
            seg = text[toks[start][0]:toks[i][1]]
            if len(seg) > 12:
                m = case_mode(seg)
                for j in range(start, i + 1):
                    line_mode[j] = m
            start = i + 1
    ent = [""] * n
    if ents:
        import bisect
        starts = [s for s, _, _ in toks]
        for s, e, label in ents:
            i = bisect.bisect_left(starts, s)
            first = True
            while i < n and toks[i][0] < e:
                ent[i] = ("B-" if first else "I-") + label
                first = False
                i += 1
    # The nearest word before and after (across punctuation, within the line): "Mr. Lee",
    # "wife (Ann)", "Lee, RN".
    prev_word, next_word = [-1] * n, [-1] * n
    last = -1
    for i in range(n):
        if newline[i]:
            last = -1
        prev_word[i] = last
        if words[i]:
            last = i
    last = -1
    for i in range(n - 1, -1, -1):
        next_word[i] = last
        if newline[i]:
            last = -1
        if words[i]:
            last = i
    coded = alphanumeric_pieces(toks)
    head = ["bias", "m=" + mode]
    feats = []
    for i in range(n):
        tags, own, _, sh, own_words, _ = info[i]
        f = head + ["lm=" + line_mode[i]] + own + wf.with_mode(line_mode[i], sh, tags)
        fw = list(own_words)
        if multi[i]:
            f.append(multi[i])
        if i == 0 or newline[i]:
            f.append("bol")
        if i == n - 1 or newline[i + 1]:
            f.append("eol")
        if ent[i]:
            f += ["ent=" + ent[i], "entl=" + ent[i][2:]]
        end = toks[i][1]
        if len(own) and "single" in own and text[end:end + 1] == ".":
            f.append("initial")
        if i and not gaps[i]:
            f.append("glued")
        if coded[i]:
            f.append("code")
        for d in (-2, -1, 1, 2):
            j = i + d
            if j < 0 or j >= n:
                f.append(f"{d}:edge")
                continue
            f += info[j][2][d]
            fw += info[j][5][d]
            if abs(d) == 1:
                f += wf.pair(d, info[j][0], tags)
        if i and newline[i]:
            f.append("-1:newline")
        j = prev_word[i]
        if j >= 0 and j < i - 1:                    # a word before, punctuation between
            f += ["pwx=" + t for t in info[j][0]]
            fw.append("pw=" + lows[j])
        j = next_word[i]
        if j > i + 1:
            f += ["nwx=" + t for t in info[j][0]]
            fw.append("nw=" + lows[j])
        if with_words:
            f += fw
        feats.append(f)
    return feats


def _edge_word(w: str) -> bool:
    """A closed-class word at the edge of a run; a capital letter alone is an initial ("A.")."""
    return w.lower() in EDGE_WORDS and (w.islower() or len(w) > 1)


def alphanumeric_pieces(toks: list[tuple[int, int, str]]) -> list[bool]:
    """Whether each token is the letter part of a word glued to digits ("NCT01234567",
    "BRCA1", "CD4", "Ste20"): a code, a gene or a registry number, never a person's or a
    place's name (numbers after a cue are the structured recognizers')."""
    n = len(toks)
    out = [False] * n
    for i in range(n):
        if not toks[i][2][0].isalpha():
            continue
        before = i > 0 and toks[i - 1][1] == toks[i][0] and toks[i - 1][2][0].isdigit()
        after = i + 1 < n and toks[i + 1][0] == toks[i][1] and toks[i + 1][2][0].isdigit()
        out[i] = before or after
    return out


def glued_letters(text: str, toks: list[tuple[int, int, str]]) -> list[bool]:
    """Whether each token is a single letter glued to an apostrophe before it or to a slash:
    the plural or possessive "s" of "90's" and "pt.'s", and the letters of shorthand ("s/p",
    "s/o", "w/", "c/o"), which are never a name or a place by themselves."""
    out = [False] * len(toks)
    for i, (s, e, w) in enumerate(toks):
        if len(w) != 1 or not w.isalpha():
            continue
        out[i] = (s > 0 and text[s - 1] in "'’") or text[e:e + 1] == "/" or (s > 0 and text[s - 1] == "/")
    return out


def bio_labels(toks: list[tuple[int, int, str]], spans: list[tuple[int, int, str]]) -> list[str]:
    """BIO labels of the tokens for (start, end, label) spans: a word token inside a span is
    B- or I- (I- after a token of the same label). Numbers, punctuation and the letters of
    alphanumeric codes are O: house numbers, postal codes and ids are the structured
    recognizers' (pipeline/phi/recognizers.py)."""
    import bisect
    labels = ["O"] * len(toks)
    starts = [t[0] for t in toks]
    coded = alphanumeric_pieces(toks)
    for s, e, label in sorted(spans):
        i = max(bisect.bisect_right(starts, s) - 1, 0)
        while i < len(toks) and toks[i][0] < e:
            if toks[i][1] > s and toks[i][2][0].isalpha() and not coded[i]:
                cont = i > 0 and labels[i - 1][2:] == label
                labels[i] = ("I-" if cont else "B-") + label
            i += 1
    return labels


def check_model(path: str | Path) -> None:
    """Raise ValueError unless path is a CRF model of this detector (labels B-/I- PER, LOC)."""
    import pycrfsuite
    tagger = pycrfsuite.Tagger()
    try:
        tagger.open(str(path))
    except Exception as e:
        raise ValueError(f"{path} is not a python-crfsuite model ({e})") from None
    labels = set(tagger.info().labels)
    if not labels or not labels <= {"O"} | {f"{p}-{lab}" for p in "BI" for lab in LABELS}:
        raise ValueError(f"{path}: labels {sorted(labels)} are not the detector's (O, B-/I- PER, LOC)")


class _Model(NamedTuple):
    """One CRF of the detector, with what its features and labels are."""
    tagger: object
    per: list[str]          # its PER labels (B-PER, I-PER)
    loc: list[str]
    uses_entities: bool     # reads spaCy's entities
    words: bool             # reads the words themselves (the word-free model does not)


def model_reads(tagger, path: str) -> tuple[bool, bool]:
    """Whether a CRF reads spaCy's entities and the words themselves (attributes `ent=`, `w=`).
    Listing its attributes parses the whole model (about half a second in every process that
    loads it), so the answer is kept in the user's cache folder under the file's digest."""
    import json

    from pipeline.digests import file_digest, user_cache_dir, write_user_cache

    cache = user_cache_dir() / "phi_detector_reads.json"
    key = file_digest(Path(path))
    try:
        known = json.loads(cache.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        known = {}
    if not isinstance(known, dict):
        known = {}
    hit = known.get(key)
    if isinstance(hit, list) and len(hit) == 2:
        return bool(hit[0]), bool(hit[1])
    attributes = tagger.info().attributes
    reads = (any(a.startswith("ent=") for a in attributes), any(a.startswith("w=") for a in attributes))
    write_user_cache(cache, json.dumps({**known, key: list(reads)}, sort_keys=True))
    return reads


class PhiDetector:
    """The trained CRFs: spans of PERSON and LOCATION with their marginal probability. With
    several models (the committed one and its word-free companion), a token's marginal is the
    largest of theirs: each finds what the other misses on a style it was not trained on."""

    def __init__(self, model_path: str | Path | None = None, threshold: float = 0.5,
                 more_models: tuple[str | Path, ...] = ()):
        import pycrfsuite
        self.model_path = str(model_path or DEFAULT_MODEL)
        self.threshold = self._lowest = threshold
        self.models = []
        for path in (self.model_path, *map(str, more_models)):
            tagger = pycrfsuite.Tagger()
            tagger.open(path)
            labels = tagger.labels()
            uses_entities, words = model_reads(tagger, path)
            self.models.append(_Model(tagger, [lab for lab in labels if lab.endswith("PER")],
                                      [lab for lab in labels if lab.endswith("LOC")], uses_entities, words))
        self.uses_entities = any(m.uses_entities for m in self.models)
        self.lex = detector_lexicon()

    def token_probabilities(self, text: str, ents=None):
        """(tokens, P(not O) per token, lean per token: P(PER) - P(LOC), computed only for the
        tokens whose P(not O) reaches the lowest threshold asked for, else 0), from the model
        with the largest P(not O) at that token."""
        toks = tokenize(text)
        if not toks:
            return toks, [], []
        import pycrfsuite
        p_phi, lean = [0.0] * len(toks), [0.0] * len(toks)
        # One sequence of every feature for all the models that read the same entities: a
        # word-free model ignores the words' features (crfsuite skips attributes a model does
        # not have), so the features are built and converted once, with the same scores.
        sequences = {}
        for tagger, per, loc, uses_entities, _ in self.models:
            if uses_entities not in sequences:
                sequences[uses_entities] = pycrfsuite.ItemSequence(
                    featurize(text, toks, self.lex, ents if uses_entities else None))
            tagger.set(sequences[uses_entities])
            for i in range(len(toks)):
                p = 1.0 - tagger.marginal("O", i)
                if p > p_phi[i]:
                    p_phi[i] = p
                    if p >= self._lowest:
                        lean[i] = sum(tagger.marginal(lab, i) for lab in per) - sum(
                            tagger.marginal(lab, i) for lab in loc)
        return toks, p_phi, lean

    def spans(self, text: str, ents=None, threshold: float | None = None) -> list[tuple[int, int, str, float]]:
        """(start, end, PERSON | LOCATION, mean marginal) of each run of tokens whose marginal of
        not being O reaches the threshold; punctuation joins a run only between two of its words."""
        thr = self.threshold if threshold is None else threshold
        self._lowest = min(thr, self.threshold)
        toks, p_phi, lean = self.token_probabilities(text, ents)
        out, i, n = [], 0, len(toks)
        # The letters of an alphanumeric code are not a name, whatever the marginal says.
        word = [t[2][0].isalpha() and not c and not a
                for t, c, a in zip(toks, alphanumeric_pieces(toks), glued_letters(text, toks))]
        while i < n:
            if p_phi[i] < thr or not word[i]:
                i += 1
                continue
            j = i
            while True:
                if j + 1 < n and word[j + 1] and p_phi[j + 1] >= thr:
                    step = 1
                elif j + 2 < n and not toks[j + 1][2][0].isalnum() and word[j + 2] and p_phi[j + 2] >= thr:
                    step = 2                                 # "St. Mary", "Smith-Jones", "Lee, Ann"
                else:
                    break
                if "\n" in text[toks[j][1]:toks[j + step][0]]:
                    break
                j += step
            first, last = i, j
            while first <= last and (not word[first] or _edge_word(toks[first][2])):
                first += 1
            while last >= first and (not word[last] or _edge_word(toks[last][2])):
                last -= 1
            if first > last:
                i = j + 1
                continue
            i_next, (i, j) = j + 1, (first, last)
            end = toks[j][1]
            if text[end:end + 1] == "." and len(toks[j][2]) == 1:      # "K." keeps its full stop
                end += 1
            words = range(i, j + 1)
            entity = "PERSON" if sum(lean[k] for k in words) >= 0 else "LOCATION"
            k = j + 1                       # past the rest of a hyphenated compound ("Stevens[-Johnson]")
            while k + 1 < n and toks[k][2] in "-–" and toks[k][0] == toks[k - 1][1] and toks[k + 1][0] == toks[k][1]:
                k += 2
            eponym = k < n and toks[k][2].lower() in DISEASE_HEADS \
                and not text[toks[k - 1][1]:toks[k][0]].strip()
            if eponym or all(toks[w][2].lower() in ORIGIN_WORDS for w in words if word[w]):
                i = i_next                  # an eponym ("Babinski sign") or an origin ("African American")
                continue
            if i == j and toks[i][2].lower() in COUNTED_NOUNS and re.match(r"[ \t]*#?\d", text[end:end + 4]):
                i = i_next                  # a numbered point of a schedule ("at Week 12", "Visit 3")
                continue
            out.append((toks[i][0], end, entity, sum(p_phi[k] for k in words) / len(words)))
            i = i_next
        return out


def detector_recognizer(model_path: str | Path | None = None, threshold: float = 0.5, score_floor: float = 0.0,
                        more_models: tuple[str | Path, ...] = ()):
    """A Presidio recognizer over the detector's spans. Its own threshold decides; the score
    it reports is the span's mean marginal, raised to `score_floor` so that the analyzer's
    score_threshold does not filter a second time."""
    from presidio_analyzer import EntityRecognizer, RecognizerResult

    detector = PhiDetector(model_path, threshold, more_models)

    class DetectorRecognizer(EntityRecognizer):
        def load(self):
            pass

        def analyze(self, text, entities, nlp_artifacts=None):
            ents = None
            if detector.uses_entities and nlp_artifacts is not None:
                ents = [(e.start_char, e.end_char, e.label_) for e in nlp_artifacts.entities]
            return [RecognizerResult(entity, s, e, max(score, score_floor))
                    for s, e, entity, score in detector.spans(text, ents)]

    rec = DetectorRecognizer(supported_entities=["PERSON", "LOCATION"], name="medprep_detector",
                             supported_language="en")
    rec.detector = detector
    return rec


# ---------------------------------------------------------------- training

TRAIN_PARAMS = {"c1": 0.05, "c2": 0.01, "max_iterations": 100, "feature.possible_transitions": True,
                "feature.minfreq": 2}


def train(examples, model_path: str | Path, params: dict | None = None, use_entities: bool = False,
          words: bool = True) -> None:
    """Train a CRF on examples [(text, [(start, end, 'PER' | 'LOC')], ents or None)] and write
    it to model_path (`words=False`: the word-free model). The same examples in the same order
    give the same file."""
    import pycrfsuite
    lex = detector_lexicon()
    trainer = pycrfsuite.Trainer(verbose=False)
    for text, spans, ents in examples:
        toks = tokenize(text)
        if toks:
            trainer.append(featurize(text, toks, lex, ents if use_entities else None, words=words),
                           bio_labels(toks, spans))
    trainer.set_params({**TRAIN_PARAMS, **(params or {})})
    trainer.train(str(model_path))
