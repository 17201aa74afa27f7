"""What the literature profile removes: identifiers, not science.

Published abstracts name scientists, historical figures, eponyms, study periods, URLs, DOIs,
registry and EC numbers: all public, none of them a patient's. A patient's identifiers still
appear in case reports and letters. So after the recognizers have run, a result is kept when:

- it is a contact or record format (e-mail, phone, SSN, card, account, record, licence, device or
  national id, a street address or postal code), not glued inside a number and not a registry,
  DOI or EC number; a phone without a phone word is not a number in thousands ("107 000");
- it is a name, date, age or town written about one person: a patient title before a name
  (`Mr. K.`), a singular person right after it (`X Y, a 45-year-old man`, `X Y was admitted`),
  a date or town in a sentence about one patient and not part of a range (`admitted on 3 May
  2019`; `between 1 March 2020 and ...` is a study period).

URLs and IP-shaped numbers (EC numbers) are never removed here."""
from __future__ import annotations

import re

from pipeline.phi.international import PHONE_CUE
from pipeline.phi.recognizers import ABOUT_AFTER

# Types removed wherever their format is found (subject to the number and registry checks).
STRUCTURED = {"EMAIL_ADDRESS", "PHONE_NUMBER", "US_SSN", "ACCOUNT_NUMBER", "MEDICAL_RECORD", "LICENSE_NUMBER",
              "DEVICE_OR_VEHICLE_ID", "ID", "CREDIT_CARD", "IBAN_CODE"}
NEVER = {"URL", "IP_ADDRESS"}

_AGE_PHRASE = r"\d{1,3}[- ](?:years?|yrs?|months?|weeks?|days?)[- ]old"
_RELATIVE = (
    r"(?:husband|wife|mother|father|son|daughter|brother|sister|partner|spouse|parents?|grandmother|grandfather)"
)
_ONE_OF = r"(?:patient|boy|girl|child|infant|woman|man|proband)"
# One person the sentence is about: "a 45-year-old man", "a frail 92-year-old", "Mr. K.", "the
# patient was", "she was admitted", "our patient".
ONE_PERSON = re.compile(
    rf"(?i:\b(?:an?|the|this|our)\s+(?:[a-z]+\s+){{0,2}}{_AGE_PHRASE}\b)"
    r"|\b(?:Mr|Mrs|Ms|Miss|Mister)\b\.?\s+[A-Z]"
    r"|(?i:\b(?:the|our|this|a|one)\s+(?:patient|proband|index\s+case)\b(?!s\b|['’]))"
    rf"|(?i:\b(?:the|a|our)\s+{_ONE_OF}['’]s\s+{_RELATIVE}\b)"
    r"|(?i:\b(?:he|she)\s+(?:was|is|had|has|presented|died|underwent|lives|lived|resides|resided|returned)\b)"
    r"|(?i:\bcase\s+report\b)"
)
# Words of a sentence about a study, a search or a publication, not about a patient's care.
STUDY_WORDS = re.compile(
    r"(?i)\b(?:registered|registration|searched|search|published|publication|launched|approved|"
    r"enrolled|recruited|recruitment|database|databases|survey|trial|cohort|study|studies|"
    r"participants|patients|subjects|period|deadline|inclusive)\b"
)
RANGE_BEFORE = re.compile(
    r"(?i)(?:\b(?:between|from|to|until|till|through|thru|and|since|before|after|up\s+to|"
    r"by|as\s+of|ending|starting|beginning)\s+(?:the\s+)?|[-–—]\s*)$"
)
RANGE_AFTER = re.compile(
    r"(?i)^,?\s*(?:(?:to|and|until|till|through|thru)\s+|[-–—]\s*)"
    r"(?:the\s+)?(?:\d|jan|feb|mar|apr|may|jun|jul|aug|sep|oct|nov|dec)"
)
EVENT_ON = re.compile(
    r"(?i)\b(?:admitted|readmitted|discharged|born|died|presented|hospitali[sz]ed|operated|"
    r"transferred|seen|examined|diagnosed|injured|vaccinated|delivered|referred|underwent\s+\w+|"
    r"dob|birth|death)\b[^.;\n]{0,30}?\b(?:on|in|at)?\s*:?\s*$"
)
DOB = re.compile(r"(?i)(?:\bDOB\b|D\.O\.B\.|date\s+of\s+birth|birth\s*date)\s*[:#]?\s*$")
# Titles of a patient (not of a scientist: "Dr", "Prof", "Sir" name the public).
PATIENT_TITLE = re.compile(r"\b(?:Mr|Mrs|Ms|Miss|Mister|Mx)\.?\s*$")
# A singular person right after a name: the recognizers' own test, or an age with words before it
# ("X Y, a frail 92-year-old").
PERSON_AFTER = re.compile(rf"^(?:['’]s)?(?:{ABOUT_AFTER}|,?\s*(?:an?\s+)?(?:[a-z]+\s+){{0,2}}{_AGE_PHRASE}\b)")
PERSON_BEFORE = re.compile(
    r"(?i)(?:\b(?:the|our|this)\s+(?:patient|proband|index\s+case)\s*[,:(]\s*|\bpatient(?:\s+name)?\s*:\s*"
    rf"|\b(?:his|her|their|whose|the\s+{_ONE_OF}['’]s)\s+{_RELATIVE}\s*(?:[,(]\s*)?"
    rf"|\b{_ONE_OF}\s*\(\s*)$"
)
PERSON_CUED = re.compile(
    r"(?i)(?:\b(?:treatment|care|death|admission|discharge|examination|surgery|records?|"
    r"consent)\s+of"
    r"|\bwe\s+(?:describe|report|present)(?:\s+the\s+case\s+of)?|\bcontact)\s+$"
)
# Public numbers an identifier rule can take for a record or a phone.
REGISTRY_BEFORE = re.compile(
    r"(?i)(?:\b(?:EudraCT|ISRCTN|NCT|ChiCTR|ACTRN|DRKS|UMIN|JPRN|CTRI|IRCT|PACTR|CRD|"
    r"PROSPERO|"
    r"PMID|PMCID|DOI|ISBN|ISSN|EC|E\.C\.|GenBank|GEO|accession|registration|registry|"
    r"trial|grant|project|award|protocol|approval|ethics|IRB)\b[^.;\n]{0,20}$"
    r"|\b10\.\d{4,}/\S*$)"
)
THOUSANDS = re.compile(r"\d{1,3}(?:[ \u202f\u2009]\d{3})+(?:\s*[-–]\s*\d{1,3}(?:[ \u202f\u2009]\d{3})+)?")


def _glued_to_number(text: str, start: int, end: int) -> bool:
    """A span with a digit against it, or a digit and a decimal mark or thousands separator
    between ("1,<...>", "<...>.5"), is a piece of a number."""
    before, after = text[max(0, start - 2) : start], text[end : end + 2]
    if before[-1:].isdigit() or len(before) == 2 and before[1] in ",." and before[0].isdigit():
        return True
    if any(c.isspace() for c in text[start:end]):  # a block of words (an address) ends where it ends
        return False
    return (
        after[:1].isdigit() or len(after) == 2 and after[0] in ",." and after[1].isdigit() and text[end - 1].isdigit()
    )


def _name_like(value: str) -> bool:
    """Two words or more, or a word on the name lists that is not an English or medical word
    ("Eosinophilia was seen" is a finding)."""
    from pipeline.phi.lexicon import lexicon

    words = re.findall(r"[^\W\d_]+", value)
    if len(words) >= 2:
        return True
    lex = lexicon()
    return len(words) == 1 and lex.is_name(words[0].lower()) and not lex.is_common(words[0].lower())


# A sentence ends at . ! ? before white space and a capital, unless the word before the full stop
# is a title, an initial or a short abbreviation ("Mr. K", "al. Siejówka", "No. 5", "Fig. 2").
SENTENCE_END = re.compile(
    r"(?:(?<=[!?])|(?<!\b[A-Za-z])(?<!\b[A-Za-z]{2})(?<!\b(?:Mrs|Fig|Nos|etc|ref|vol))\.)"
    r"\s+(?=[A-Z(\"“])|\n"
)


def _sentence(text: str, start: int, end: int) -> str:
    left = 0
    for m in SENTENCE_END.finditer(text, max(0, start - 400), start):
        left = m.end()
    m = SENTENCE_END.search(text, end)
    return text[left : m.start() if m else len(text)]


def _about_one_person(text: str, start: int, end: int) -> bool:
    sentence = _sentence(text, start, end)
    return bool(ONE_PERSON.search(sentence)) and not STUDY_WORDS.search(sentence)


def removes(text: str, entity: str, start: int, end: int) -> bool:
    """Whether the literature profile removes this recognizer result."""
    if entity in NEVER:
        return False
    before = text[max(0, start - 60) : start]
    after = text[end : end + 80]
    if _glued_to_number(text, start, end):
        return False
    if entity in STRUCTURED:
        if REGISTRY_BEFORE.search(before) and entity != "EMAIL_ADDRESS":
            return False
        if entity == "PHONE_NUMBER":
            value = text[start:end].strip()
            if value.count("(") != value.count(")"):  # "82.75 (50-100": a value and its range
                return False
            # Digits in groups of three after the first are a number's thousands ("107 000-127 000").
            return bool(PHONE_CUE.search(before)) or not THOUSANDS.fullmatch(value)
        return True
    if entity == "PERSON":
        if PATIENT_TITLE.search(before):
            return True
        if PERSON_AFTER.match(after) or PERSON_BEFORE.search(before):
            return _name_like(text[start:end])
        # "the treatment of X Y", "We describe X Y", "contact X Y at ...": a full name that opens with
        # a given name (a method, a reagent or a place does not).
        from pipeline.phi.recognizers import given_full_name

        return bool(PERSON_CUED.search(before)) and given_full_name(text[start:end])
    if entity == "DATE_TIME":
        if DOB.search(before):
            return True
        if RANGE_BEFORE.search(before) or RANGE_AFTER.match(after):
            return False
        sentence = _sentence(text, start, end)
        if not ONE_PERSON.search(sentence):
            return False
        return bool(EVENT_ON.search(before)) or not STUDY_WORDS.search(sentence)
    if entity == "LOCATION":
        value = text[start:end]
        if any(c.isdigit() for c in value):  # a street line or a postal code
            return not REGISTRY_BEFORE.search(before)
        return _about_one_person(text, start, end)
    if entity == "AGE":
        return _about_one_person(text, start, end) or bool(re.match(r"[- ](?:years?|yrs?)[- ]old", after))
    return _about_one_person(text, start, end)


# "Mr. K.", "Mrs. A.B.": a patient named by initials after a patient title.
PATIENT_INITIALS = re.compile(r"\b(?:Mr|Mrs|Ms|Miss|Mister)\.?\s+(?P<v>[A-Z]\.(?:\s?[A-Z]\.){0,2})")


def literature_results(text: str, results: list) -> list:
    """The results the literature profile removes, plus patients named by their initials."""
    from presidio_analyzer import RecognizerResult

    kept = [r for r in results if removes(text, r.entity_type, r.start, r.end)]
    for m in PATIENT_INITIALS.finditer(text):
        if not any(r.start <= m.start("v") < r.end for r in kept):
            kept.append(RecognizerResult("PERSON", m.start("v"), m.end("v"), 0.85))
    return kept
