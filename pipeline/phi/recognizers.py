"""Our recognizers for what Presidio's defaults lack or miss on clinical text.

Each rule is a regex whose named group `v` (or the whole match) is the identifier; the words
around it (labels such as "MRN:", titles such as "Dr.") are context and stay in the text."""
from __future__ import annotations

import re
from functools import lru_cache

from presidio_analyzer import EntityRecognizer, RecognizerResult

from pipeline.phi.eponyms import EPONYM_HEADS, EPONYMS, NAME_STOP_WORDS, NON_NAME_WORDS, TITLES

_MONTH = (r"(?:Jan(?:uary)?|Feb(?:ruary)?|Mar(?:ch)?|Apr(?:il)?|May|June?|July?|Aug(?:ust)?|"
          r"Sep(?:t(?:ember)?)?|Oct(?:ober)?|Nov(?:ember)?|Dec(?:ember)?)\.?")
_DAY = r"(?:0?[1-9]|[12]\d|3[01])(?i:st|nd|rd|th)?"
# Any case. Abbreviations that are also words or acronyms ("may", "MAR" the medication record,
# "DEC" decreased) are dates only with a year after them ("28 may 1948", "14MAR2019").
_YEAR_AFTER = r"(?=[\s,.-]*(?:\d{1,2}(?i:st|nd|rd|th)?[\s,.-]+)?(?:(?:19|20)\d\d|['’]\d\d))"
_MONTH_ANY = (r"(?:(?i:january|february|march|april|june|july|august|september|october|november|december)|"
              r"[Jj]an|[Ff]eb|[Mm]ar|[Aa]pr|[Jj]un|[Jj]ul|[Aa]ug|[Ss]ept?|[Oo]ct|[Nn]ov|[Dd]ec|May|"
              rf"(?:may|MAY|JAN|FEB|MAR|APR|JUN|JUL|AUG|SEPT?|OCT|NOV|DEC){_YEAR_AFTER}|"
              # In capitals beside a day ("SEPT 9", "FEB 12TH", "9 SEPT"); not MAR, DEC, OCT (record,
              # decreased, a scan).
              rf"(?:JAN|FEB|APR|JUN|JUL|AUG|SEPT?|NOV)(?=\.?[ \t-]*(?:0?[1-9]|[12]\d|3[01])(?i:st|nd|rd|th)?\b)|"
              r"(?:(?<=\d)|(?<=\d[ \t.-]))(?:JAN|FEB|APR|JUN|JUL|AUG|SEPT?|NOV))"
              r"(?![a-z])\.?")
_YEAR = r"(?:19|20)\d\d"
_ORDINAL_WORD = (r"(?i:(?:twenty|thirty)[- ]?(?:first|second|third|fourth|fifth|sixth|seventh|eighth|ninth)|"
                 r"first|second|third|fourth|fifth|sixth|seventh|eighth|ninth|tenth|eleventh|twelfth|thirteenth|"
                 r"fourteenth|fifteenth|sixteenth|seventeenth|eighteenth|nineteenth|twentieth|thirtieth)")
# USPS codes: states, DC, territories, freely associated states and military "states".
_STATES = ("AL|AK|AZ|AR|CA|CO|CT|DE|FL|GA|HI|ID|IL|IN|IA|KS|KY|LA|ME|MD|MA|MI|MN|MS|MO|MT|NE|NV|NH|NJ|NM|"
           "NY|NC|ND|OH|OK|OR|PA|RI|SC|SD|TN|TX|UT|VT|VA|WA|WV|WI|WY|DC|PR|GU|VI|AS|MP|FM|MH|PW|AA|AE|AP")
_UP, _LOW = "A-ZÀ-ÖØ-Þ\u0100-\u017f", "a-zß-öø-ÿ\u0100-\u017f"
_NAME_WORD = rf"(?:O['’])?[{_UP}][{_LOW}]+(?:[{_UP}][{_LOW}]+)?(?:['’][{_UP}][{_LOW}]+|-[{_UP}{_LOW}][{_LOW}]+)?"  # noqa: E501  McCrudden, O'Brien, Smith-Jones; not "Smith's"
_PARTICLE = r"(?:(?:de|van|von|der|den|di|da|del|della|le|la|du|dos|das|te|ten|ter|bin|al|mac|ó)[ \t]+)"
_NAME = rf"{_NAME_WORD}(?:[ \t]+(?:[A-Z]\.[ \t]*)?{_PARTICLE}*{_NAME_WORD}){{0,2}}"
_NAME_OR_INITIALS = rf"(?:[A-Z]\.[ \t]*)?{_NAME}"
# Nouns that label a person; capitalized, they also open titles ("Patient Satisfaction ...").
_NOUN_CUES = (
    "patient|name|patient name|attending|physician|provider|surgeon|nurse|pcp|referring physician|cc|"
    "contact|emergency contact|next of kin|mother|father|husband|wife|son|daughter|spouse|guardian|"
    "partner|sister|brother"
)
# Verbs and abbreviations that precede a name in notes, in any case ("Pt X reports", "Spoke with X").
_VERB_CUES = (
    "pt|signed by|electronically signed by|dictated by|transcribed by|reviewed by|seen by|referred by|"
    "spoke with|spoke to|talked with|talked to|discussed with|accompanied by|care of|c/o"
)
# After an identifier's keyword: "#", "no.", "number", "ID" and/or a colon ("DL: ...", "VIN #...").
_LABEL = r"(?:(?:id|#|no\.?|num(?:ber)?\.?)\s*(?:is|was)?\s*[:#=]?|(?:is|was)?\s*[:#=])"
# Study registrations are public, not PHI.
REGISTRY_ID = re.compile(
    r"(?i)^(?:NCT\d{8}|ISRCTN\d+|ChiCTR|ACTRN\d+|DRKS\d+|CRD\d+|EudraCT|UMIN\d+|JPRN|"
    r"CTRI|IRCT\d+|KCT\d+|TCTR\d+|PACTR\d+|NTR\d+|NL\d{4,})"
)


# --- identifiers after a cue: one grammar (cue, label, value) for every kind of record number.
# A number after an identifier cue is PHI whether or not it passes a checksum.
# Strong cues name an identifier by themselves ("MRN 4041", "HICN 123456789A", "Az. 1 K 366/00");
# weak cues are also ordinary words and need a label after them ("case no.", "plan ID:", "file #").
# Gates of rules built here (pattern -> RE2 gate), consulted before GATES.
RULE_GATES: dict[str, str] = {}


def _gated(pattern: str, gate: str) -> str:
    RULE_GATES[pattern] = gate
    return pattern


ID_CUES = {
    "MEDICAL_RECORD": (
        r"mrn|m\.r\.n\.?|mr\s?#|med(?:ical)?\.?\s*rec(?:ord)?s?\.?(?:\s+(?:number|no\.?|num\.?|#))?|unit\s+(?:number|no\.?)",
        r"record|rec\.|chart|patient|pt\.?|hospital|encounter|accession|specimen",
    ),
    "ACCOUNT_NUMBER": (
        r"acc(?:oun)?t|subscriber|policy|policyholder|hicn?|mbi|medicare|medicaid|beneficiary|iban",
        r"billing|member(?:ship)?|plan|health\s*plan|insurance|insurer|insured|group|claim|routing|invoice|"
        r"card|receipt|sort\s+code",
    ),
    "LICENSE_NUMBER": (r"driver'?s?\s*licen[cs]e|licen[cs]e|DEA|NPI", r"DL|lic\.?|certificate|cert\.?|permit|badge"),
    "ID": (
        r"docket|az\.|aktenzeichen|passport|dossier|(?:our|your)\s+ref\.?|ref\.",
        r"id|identifier|identification|case|index|applications?|appl\.|file|reference|ref\.?|registration|reg\.|"
        r"register|matter|petition|complaint|judgm?ent|decision|order|ticket|claimant|customer|client|employee|"
        r"staff|student|voter|tax|social|personal|national|identity|booking|confirmation|tracking|serial|"
        r"inmate|prisoner|offender|court|appeal|proceedings?|(?:registered|filed|lodged|recorded|listed)(?:\s+under)?",
    ),
}
# The label between cue and value: "no.", "nos.", "number", "#", "ID", "n°", "nr.", a colon, "is".
ID_LABEL_WORD = (
    r"\s*\(?(?:\s*(?:numbers?|nos?\.|nos?\b|nr\.?|n[°º]\.?|num\.?|#|id\b|code\b|ref\.?)){1,2}"
    r"(?:\s*(?:is|was|:|=))?"
)
ID_LABEL_COLON = r"\s*(?:is|was)?\s*[:=]"
# The value: groups of letters and digits joined by - / . : (and by single spaces where the next
# group starts with a digit, or is a short capital group before one: "II ZR 780/14", "XDH 413 847"),
# with at least one digit; a list of them ("nos. 1234/05 and 5678/06"). Checked by `_id_value`.
_ID_GROUP = r"[A-Za-z0-9]+(?:[-/.:][A-Za-z0-9]+)*"
_ID_MORE = r"(?:[ ](?:\d[A-Za-z0-9]*(?:[-/.:][A-Za-z0-9]+)*|(?-i:[A-Z]{1,3})(?=[ ]\d)))"
_ID_LIST = (
    rf"(?:\s*(?:,|and|&|or|/)\s*#?(?=[A-Za-z0-9-]*\d|(?-i:[A-Z]{{1,4}} ){{1,2}}\d+/\d)"
    rf"{_ID_GROUP}{_ID_MORE}{{0,3}}){{0,6}}"
)
ID_VALUE = rf"#?\s?(?=[A-Za-z0-9-]*\d|(?-i:[A-Z]{{1,4}} ){{1,2}}\d){_ID_GROUP}{_ID_MORE}{{0,3}}{_ID_LIST}"
# After a weak cue and a colon the value's first group holds a digit ("ID: 0099-1234", not the
# "ID: TM 100.2" of an infectious-disease line), or it is a court file number ("Reference: II ZR 396/20").
ID_VALUE_DIGIT_FIRST = (
    rf"#?\s?(?=[A-Za-z0-9-]*\d|(?-i:[A-Z]{{1,4}} ){{1,2}}\d+/\d)"
    rf"{_ID_GROUP}{_ID_MORE}{{0,3}}{_ID_LIST}"
)
# Not an identifier: a number followed by a unit or a count noun ("plan: 1000 mL", "group 2 patients").
NOT_A_QUANTITY = (
    r"(?!\s*(?i:%|mg|mcg|ml|mL|cc|units?|tabs?|g\b|kg|lbs?\b|oz\b|kcal|mm|cm|L\b|hrs?|hours?|min|days?|weeks?|"
    r"months?|years?|h\b|x\b|patients|subjects|participants|times|doses?|cases|mmHg|bpm))"
)


# --- the person a case report or letter is about ---------------------------------------------
_FULL_NAME = rf"{_NAME_WORD}(?:[ \t]+{_PARTICLE}*{_NAME_WORD}){{1,3}}"
_REPORT_CUES = (
    r"case\s+report|correspondence(?:\s+to)?|we\s+(?:describe|report|present)|"
    r"index\s+case|the\s+(?:patient|proband|subject|index\s+case)|named|called|contact"
)
_PERSON_NOUNS = (
    r"woman|man|boy|girl|infant|child|patient|proband|mother|father|son|daughter|husband|wife|brother|"
    r"sister|parent|neighbou?r|friend|partner|case|spouse|grandmother|grandfather|uncle|aunt"
)
ABOUT_AFTER = (
    r",?\s*(?:,\s*(?:an?\s+)?\d{1,3}[- ](?:years?|yrs?|months?)[- ]old|\((?:MRN|born|aged?\b|b\.)|"
    r"\(\d{1,3}\s*(?:years?|y)\b|,\s+born\b|\s+\(born|,?\s+(?:was|is)\s+(?:referred|admitted|found|"
    r"seen|treated|hospitali[sz]ed|transferred|brought|diagnosed|examined|discharged)\b|\s+presented\s+with)"
)
_ABOUT_GATE = (
    r"(?i)\d[- ](?:years?|yrs?|months?)[- ]old|\((?:MRN|born|aged?|b\.)|\(\d{1,3}\s*(?:years?|y)\b|, born\b|"
    r"\(born|(?:was|is)\s+(?:referred|admitted|found|seen|treated|hospitali[sz]ed|transferred|brought|"
    r"diagnosed|examined|discharged)|presented\s+with"
)
_OF_PERSON = (
    r"treatment|care|case|death|history|family|records?|consent|examination|surgery|transfer|admission|"
    r"discharge|parents|wife|husband|mother|father|son|daughter"
)
_EPONYM_HEADS = "|".join(sorted(EPONYM_HEADS, key=len, reverse=True))


def _person_name(value: str) -> bool:
    """A full name: no word of it is a section word, eponym head or title word ("Kaplan Meier"
    and "Hodgkin Lymphoma" are not people)."""
    words = re.findall(r"[^\W\d_]+", value)
    if any(w.lower() in NON_NAME_WORDS for w in words):
        return False
    return not (len(words) >= 2 and all(w in EPONYMS for w in words[:2]))


def identifier_rules() -> list[tuple[str, str, tuple]]:
    """One rule per type and cue strength: cue, label, value. Case-insensitive cue."""
    out = []
    for entity, (strong, weak) in ID_CUES.items():
        for cues, label, value in (
            (strong, rf"(?:{ID_LABEL_WORD}|{ID_LABEL_COLON})?\s*", ID_VALUE),
            (weak, rf"{ID_LABEL_WORD}\s*", ID_VALUE),
            (weak, rf"{ID_LABEL_COLON}\s*", ID_VALUE_DIGIT_FIRST),
        ):
            pattern = rf"(?i)\b(?:{cues})(?![A-Za-z])\.?{label}(?P<v>{value})\b{NOT_A_QUANTITY}"
            if all(pattern != p for _, p, _ in out):  # a type's strong and weak label may coincide
                RULE_GATES[pattern] = rf"(?i)\b(?:{cues})[^\n]{{0,24}}\d"
                out.append((entity, pattern, ("id_value", 0.85)))
    # "(no. 36244/06)", "nos. 1234/05 and 5678/06": a number after "no." alone, in the shapes of
    # case and file numbers (a slash, or five digits and more).
    RULE_GATES[_NO_VALUE] = r"(?i)(?:nos?\.|nr\.|n[°º])\s*[A-Z]{0,4}[- ]?\d"
    out.append(("ID", _NO_VALUE, ("id_value", 0.8)))
    return out


_NO_VALUE = (
    r"(?i)(?<![\w.])(?:nos?\.|nr\.|n[°º]\.?)\s*(?P<v>(?:[A-Z]{1,4}[- ]?)?\d{1,7}(?:/\d{2,4}|\d{4,})"
    r"(?:[-/.][A-Za-z0-9]+)*(?:\s*(?:,|and|&)\s*(?:[A-Z]{1,4}[- ]?)?\d{1,7}/\d{2,4})*)\b"
)


def _id_value(value: str) -> bool:
    """An identifier has three digits or more (two, with letters and four characters: "#kb24"), is not a
    year alone, a public registration (NCT...), or a decimal number ("ID=95.8-97.2" is a temperature)."""
    digits = sum(c.isdigit() for c in value)
    alnum = sum(c.isalnum() for c in value)
    if digits < 3 and not (digits == 2 and alnum >= 4 and alnum > digits):
        return False
    core = value.lstrip("# ")
    # Digits grouped by full stops in threes are a number written as forms write it ("27.392.870").
    grouped = re.fullmatch(r"\d{1,3}(?:\.\d{3}){2,}(?:[-/]\w+)?", core)
    if (
        re.fullmatch(r"(?:19|20)\d\d|\d+\.\d+", core)
        or re.match(r"\d{1,3}\.\d", core)
        and not grouped
        or REGISTRY_ID.match(core)
    ):
        return False
    return True


def _street_suffixes() -> str:
    # USPS street suffixes (the list Faker's en_US address provider carries), plus abbreviations.
    from faker.providers.address.en_US import Provider

    words = set(Provider.street_suffixes) | {
        "St",
        "Ave",
        "Rd",
        "Blvd",
        "Ln",
        "Dr",
        "Ct",
        "Pl",
        "Pkwy",
        "Hwy",
        "Sq",
        "Ter",
        "Cir",
        "Trl",
        "Way",
        "Plz",
        "Crk",
        "Hts",
    }
    return "|".join(sorted((re.escape(w) for w in words), key=len, reverse=True))


def rules() -> list[tuple[str, str, float]]:
    """(entity, regex, score). Case-sensitive unless the regex says (?i)."""
    city_state_zip = rf"(?:[A-Z][a-z]+(?:\s+[A-Z][a-z]+){{0,2}}),?\s+(?:{_STATES})\s+\d{{5}}(?:-\d{{4}})?\b"
    return [
        # --- contact -------------------------------------------------------------------
        ("EMAIL_ADDRESS", r"\b[A-Za-z0-9._%+-]+@[A-Za-z0-9.-]+\.[A-Za-z]{2,}\b", 0.95),
        ("URL", r"(?i)\b(?:https?://|www\.)[^\s<>\"')\]]+[^\s<>\"').,;:\]]", 0.9),
        ("IP_ADDRESS", r"\b(?:(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)\.){3}(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)\b", 0.9),
        (
            "IP_ADDRESS",
            r"\b(?:[0-9a-fA-F]{1,4}:){7}[0-9a-fA-F]{1,4}\b|\b(?:[0-9a-fA-F]{1,4}:){1,6}:(?:[0-9a-fA-F]{1,4}:?){1,6}\b",
            0.85,
        ),
        # Phones: NANP with optional +1/001, separators, extensions; international with +.
        (
            "PHONE_NUMBER",
            r"(?<![\w/.-])(?:(?:\+|00)?1[\s.-]?)?(?:\(\d{3}\)\s?|\d{3}[\s.-])\d{3}[\s.-]\d{4}"
            r"(?:\s*(?:x|ext\.?|extension|#)\s*\d{1,6})?(?![\w/-])",
            0.8,
        ),
        (
            "PHONE_NUMBER",
            r"(?<![\w/.-])\+(?=(?:[\s.()-]*\d){8,15}(?![\d.]))\d{1,3}(?:[\s.-]?\(?\d{1,4}\)?){2,5}"
            r"(?:\s*(?:x|ext\.?)\s*\d{1,6})?(?![\w/-])",
            0.7,
        ),
        (
            "PHONE_NUMBER",
            _gated(
                r"(?i)\b(?:phone|tel|telephone|fax|cell|mobile|pager|beeper|call(?:ed)?|contact|ph)\b\.?\s*(?:no\.?|number|#)?"
                r"\s*[:#]?\s*(?P<v>\(?\d{3}\)?[\s.-]?\d{3}[\s.-]?\d{4}(?:\s*(?:x|ext\.?|extension)\s*\d{1,6})?"
                r"|\d{3}[\s.-]\d{4}(?:\s*(?:x|ext\.?)\s*\d{1,6})?)",
                r"\p{Nd}{3}\P{Nd}?\p{Nd}{4}",
            ),
            0.85,
        ),
        (
            "PHONE_NUMBER",
            _gated(
                r"(?i:phone|tel|telephone|call|contact|reach|reached|fax|cell|mobile|pager)[^\n\d]{0,80}?"
                r"(?<!\d)(?P<v>[2-9]\d{2}[2-9]\d{6})(?!\d)",
                r"[2-9]\p{Nd}{2}[2-9]\p{Nd}{6}",
            ),
            0.8,
        ),
        # --- government and record numbers ------------------------------------------------
        *identifier_rules(),
        ("US_SSN", r"(?<![\w-])(?!000|666|9\d\d)\d{3}-(?!00)\d{2}-(?!0000)\d{4}(?![\w-])", 0.85),
        (
            "US_SSN",
            r"(?i)\b(?:SSN|social security(?: number| no\.?| #)?|SS#)\s*[:#]?\s*(?P<v>\d{3}[\s.-]?\d{2}[\s.-]?\d{4})\b",
            0.95,
        ),
        ("ACCOUNT_NUMBER", r"(?<![\d-])\d(?:[ -]?\d){12,18}(?![\d-])", ("luhn", 0.85)),
        (
            "ACCOUNT_NUMBER",
            _gated(
                r"(?i:card|visa|mastercard|amex|maestro|discover)(?:[ \t]*(?i:number|no\.?|#))?[ \t]*[:#]?[ \t]*"
                r"(?P<v>\d(?:[ -]?\d){11,18})(?![\d-])",
                r"\p{Nd}(?:[ -]?\p{Nd}){11}",
            ),
            0.85,
        ),
        (
            "ACCOUNT_NUMBER",
            r"\b(?:\d{4}[\s-]){3}\d{4}\b|\b\d{4}[\s-]\d{6}[\s-]\d{5}\b|\b(?:\d{4}[\s-]){3}\d{1,4}\b",
            0.7,
        ),
        ("ACCOUNT_NUMBER", r"\b[A-Z]{2}\d{2}(?:\s?[A-Z0-9]{4}){2,7}(?:\s?[A-Z0-9]{1,4})?\b", 0.75),
        (
            "DEVICE_OR_VEHICLE_ID",
            r"(?i)\b(?:VIN|serial|S/N|SN|device|pacemaker|implant|IMEI|UDI|plate|"
            rf"licen[cs]e\s*plate|tag)\s*{_LABEL}\s*"
            r"(?P<v>(?=[A-Z0-9-]*\d)[A-Z0-9][A-Z0-9-]{3,24})\b",
            0.9,
        ),
        (
            "DEVICE_OR_VEHICLE_ID",
            r"(?i:\blicen[cs]e[ \t]*plate|\bplate|\btag)(?:[ \t]*(?i:number|no\.?|#))?[ \t]*[:#]?[ \t]*"
            r"(?P<v>(?=[A-Z0-9 -]*\d)[A-Z0-9]{1,4}[ -]?[A-Z0-9]{1,6})\b",
            0.85,
        ),
        ("DEVICE_OR_VEHICLE_ID", r"\b(?=[A-HJ-NPR-Z0-9]*\d)(?=[A-HJ-NPR-Z0-9]*[A-HJ-NPR-Z])[A-HJ-NPR-Z0-9]{17}\b", 0.7),
        # National and insurance identifiers after their label, in the layouts of many countries
        # ("National ID 756.2058.4319.68", "ZZ 398191 T", "245.843.253-08", "ZCCSRS01L46H495H").
        (
            "ID",
            r"(?i)\b(?:national\s+(?:id|identity|insurance|health)(?:\s+(?:number|no\.?|card))?|id\s+(?:number|no\.?|card)|"
            r"identity\s+(?:card|number|no\.?)|personal\s+(?:id|number|identity\s+number)|social\s+(?:security|insurance)"
            r"(?:\s+(?:number|no\.?))?|insurance\s+(?:number|no\.?|id)|tax\s+(?:id|number|code)|nhs(?:\s+(?:number|no\.?))?|"
            r"nino|sin|codice\s+fiscale|cpf|pesel|bsn|ahv|avs|aadhaar|personnummer|nir|dni|nie|rut|curp|cedula|"
            r"passport(?:\s+(?:number|no\.?))?)\s*(?:number|no\.?|#)?\s*(?:is\s+)?[:#=]?\s*"
            r"(?P<v>(?-i:(?=(?:[A-Z .\-/]*\d){3})[A-Z0-9](?:[A-Z0-9.\-/]|[ ](?=[A-Z0-9]{1,8}\b)){4,24}[A-Z0-9]))",
            0.85,
        ),
        # --- dates (any element but the year) and ages over 89 ------------------------------
        # Numeric dates: one separator used twice, no decimal number around (not "1.18-2.50"); glued to
        # a word by a full stop is still a date ("home.7/14/19").
        (
            "DATE_TIME",
            rf"(?<![\d,/-])(?<!\d\.)(?:0?[1-9]|1[0-2])(?P<s>[/.-])(?:0?[1-9]|[12]\d|3[01])(?P=s)(?:{_YEAR}|\d\d)(?!\d|[.,/-]\d|\s*%)",
            0.8,
        ),
        (
            "DATE_TIME",
            rf"(?<![\d,/-])(?<!\d\.)(?:0?[1-9]|[12]\d|3[01])(?P<s>[/.-])(?:0?[1-9]|1[0-2])(?P=s)(?:{_YEAR}|\d\d)(?!\d|[.,/-]\d|\s*%)",
            0.6,
        ),
        ("DATE_TIME", rf"\b{_YEAR}(?P<s>[-/.])(?:0?[1-9]|1[0-2])(?P=s)(?:0?[1-9]|[12]\d|3[01])\b(?![.,/-]\d)", 0.85),
        # Month names in any case ("14-Mar-2019", "3rd of june '98", "14MAR2019", "feb 10 1983").
        (
            "DATE_TIME",
            rf"\b{_DAY}(?i:\s+of)?[\s./-]*{_MONTH_ANY}(?:[\s,./-]*(?:{_YEAR}|['’]\d\d)\b|[\s./-]\d\d\b)?",
            0.8,
        ),
        (
            "DATE_TIME",
            _gated(
                rf"\b{_MONTH_ANY}[\s.-]*{_DAY}\b(?:,?[\s./-]*(?:{_YEAR}|['’]\d\d)\b)?"
                r"(?!\s*(?:%|mg|mcg|ml|mm|cm|kg|units?|tabs?|doses?|times|patients|cases|subjects|participants|years|"
                r"days|weeks|months|hours))",
                # a month's letters, marks, then the day's first digit (never a letter or digit between)
                r"(?i)" + _MONTH_RE2 + r"\pL*[^\pL\pN]*[0-9]",
            ),
            0.8,
        ),
        # Days spelled out ("August twelfth", "the twenty-first of May").
        (
            "DATE_TIME",
            _gated(
                rf"\b{_MONTH_ANY}\s+(?:the\s+)?{_ORDINAL_WORD}\b"
                rf"|\b(?:the\s+)?{_ORDINAL_WORD}\s+of\s+{_MONTH_ANY}",
                r"(?i)(?:first|second|third|fourth|fifth|sixth|seventh|eighth|ninth|tenth|eleventh|"
                r"twelfth|teenth|tieth)",
            ),
            0.8,
        ),
        # A month and year of an event in a person's life ("admitted on May 1975", "born December
        # 1964"); study periods say "in", "from", "between" and stay.
        (
            "DATE_TIME",
            _gated(
                rf"(?i:\bon|\bborn(?:\s+in)?|\bdied(?:\s+in)?|\bdob:?)\s+(?P<v>{_MONTH_ANY},?\s+{_YEAR})\b",
                r"(?i)(?:on|born|died|dob:?)\s+" + _MONTH_RE2,
            ),
            0.8,
        ),
        (
            "DATE_TIME",
            r"(?i)\b(?:on|since|from|until|till|by|dated?|admitted|discharged|seen|DOB|born|visit|"
            r"surgery|procedure)\b\s*:?\s*(?P<v>(?:0?[1-9]|1[0-2])/(?:0?[1-9]|[12]\d|3[01]))\b(?!/)",
            0.7,
        ),
        (
            "DATE_TIME",
            _gated(
                r"(?i)\b(?:DOB\b|D\.O\.B\.|date of birth|birth ?date)\s*[:#]?\s*(?P<v>[0-9A-Za-z/ ,.-]{6,20}?\d)\b",
                r"(?i)dob|d\.o\.b|birth",
            ),
            0.9,
        ),
        (
            "AGE",
            r"(?i)\b(?P<v>(?:9\d|1[01]\d))[\s-]*(?:years?|yrs?|y)[\s-]*(?:old|of age)\b|"
            r"\b(?P<v2>(?:9\d|1[01]\d))[\s-]?(?:yo\b|y/o\b|y\.o\.)",
            0.9,
        ),
        ("AGE", r"(?i)\b(?:aged?|age:)\s*(?P<v>(?:9\d|1[01]\d))\b(?!\s*(?:%|-\d|–\d|to\s+\d))", 0.85),
        (
            "AGE",
            r"(?i)\b(?P<v>(?:ninety|one hundred)(?:[\s-](?:one|two|three|four|five|six|seven|eight|nine))?)[\s-]years?[\s-]old\b",  # noqa: E501
            0.85,
        ),
        (
            "AGE",
            _gated(
                r"(?i)\b(?:aged?|age:?)\s+(?P<v>(?:ninety|one hundred)(?:[\s-](?:one|two|three|four|five|six|seven|"
                r"eight|nine))?)\b",
                r"(?i)age[d:]?\s+(?:ninety|one hundred)",
            ),
            0.85,
        ),
        # A weekday and its day ("Tuesday the 12th"); a holiday of a given year ("Thanksgiving 2018");
        # a part of a month ("mid-August"); a day before a month with a cue ("seen 14/3", "on 14.03.").
        (
            "DATE_TIME",
            _gated(
                r"(?i)\b(?:mon|tues?|wed(?:nes)?|thu(?:rs?)?|fri|sat(?:ur)?|sun)(?:day)?\.?,?\s+(?:the\s+)?"
                r"(?P<v>(?:0?[1-9]|[12]\d|3[01])(?:st|nd|rd|th))\b",
                r"(?i)(?:mon|tue|wed|thu|fri|sat|sun)\w*\.?,?\s+(?:the\s+)?\d{1,2}(?:st|nd|rd|th)",
            ),
            0.75,
        ),
        (
            "DATE_TIME",
            _gated(
                r"\b(?:Christmas(?:\s+(?:Day|Eve))?|Thanksgiving(?:\s+Day)?|Easter(?:\s+(?:Sunday|Monday))?|"
                r"New\s+Year['’]?s(?:\s+(?:Day|Eve))?|Independence\s+Day|Labou?r\s+Day|Memorial\s+Day|"
                r"Halloween|Valentine['’]?s\s+Day|Boxing\s+Day|Veterans\s+Day)(?:,?\s+of)?,?\s+(?:19|20)\d\d\b",
                r"(?:Christmas|Thanksgiving|Easter|Year|Independence|Labou?r|Memorial|Halloween|Valentine|"
                r"Boxing|Veterans)(?s:.)*(?:19|20)\d\d",
            ),
            0.8,
        ),
        (
            "DATE_TIME",
            _gated(rf"(?i)\b(?:early|mid|late)[\s-]?{_MONTH_ANY}", r"(?i)(?:early|mid|late)[\s-]?" + _MONTH_RE2),
            0.75,
        ),
        (
            "DATE_TIME",
            _gated(
                r"(?i)\b(?:on|since|from|until|till|dated?|admitted|discharged|seen|visit|surgery|procedure|"
                r"am|vom|seit|le|du|el|del)\s*:?\s*(?P<v>(?:1[3-9]|2\d|3[01])/(?:0?[1-9]|1[0-2])"
                r"|(?:0?[1-9]|[12]\d|3[01])\.(?:0?[1-9]|1[0-2])\.)(?![\d/])",
                r"(?i)(?:on|since|from|until|till|date|admitted|discharged|seen|visit|surgery|procedure|am|vom|"
                r"seit|le|du|el|del)\W*\d{1,2}[/.]\d{1,2}",
            ),
            0.7,
        ),
        # --- places smaller than a state ---------------------------------------------------
        ("LOCATION", rf"(?<=,\s)(?P<v>{city_state_zip})", 0.8),
        ("LOCATION", rf"\b(?:{_STATES})\s+(?P<v>\d{{5}}(?:-\d{{4}})?)\b", 0.75),
        (
            "LOCATION",
            r"\b(?:lives|living|resides|residing|resident|moved|relocated|home|hometown|born)"
            r"(?:\s+(?:alone|independently|together|with\s+(?:her|his|their)\s+\w+))?\s+(?:in|of|to|at)\s+"
            r"(?:the\s+)?(?:city\s+of\s+)?(?P<v>[A-Z][a-z]+(?:\s+[A-Z][a-z]+){0,2})\b",
            0.7,
        ),
        # --- names in context ------------------------------------------------------------
        # A user handle ("@dana_p", "@JacobW99"): a name in every profile; not an e-mail's domain,
        # "@home" or "@10am" (a common word or no letter: handle_name checks).
        (
            "PERSON",
            _gated(r"(?<![\w.@])@(?P<v>[A-Za-z_][A-Za-z0-9_]{1,29})(?![\w@]|\.[A-Za-z])", r"@[A-Za-z0-9_]{2}"),
            ("handle_name", 0.8),
        ),
        ("PERSON", rf"\b{TITLES}[ \t]+(?P<v>{_PARTICLE}*{_NAME_OR_INITIALS})", 0.9),
        # A cue and a name. A capitalized noun cue needs a colon or comma ("Patient: X"), so that
        # title-case titles ("Patient Satisfaction Following ...") and compounds
        # ("Nurse-Delivered") are not read as names; lowercase nouns and verb cues may run on.
        (
            "PERSON",
            rf"(?:\b(?i:{_NOUN_CUES}|{_VERB_CUES})[ \t]*[:,(][ \t]*|\b(?:{_NOUN_CUES})[ \t]+|"
            rf"\b(?i:{_VERB_CUES})[ \t]+)(?P<v>{_NAME_OR_INITIALS})",
            0.85,
        ),
        # A name opening a clinical sentence: "Jane Doe is a 93-year-old ...", "... was born on".
        (
            "PERSON",
            rf"(?m)(?:^|(?<=[.;]\s))(?P<v>{_NAME})(?=,?\s+(?:is|was)\s+(?:an?\s+(?:\d+|[a-z-]+)[- ](?:year|yr|month|week|day)|born|admitted|seen|referred|transferred)\b)",  # noqa: E501
            0.8,
        ),
        # The person a sentence is about, in case reports and letters (every profile): a full name
        # after a reporting cue ("We describe X Y", "Correspondence to X Y", "woman (X Y)") or
        # before an age, a record number or a clinical verb ("X Y, a 45-year-old man", "X Y (MRN").
        (
            "PERSON",
            _gated(
                rf"(?:\b(?i:{_REPORT_CUES})[ \t]*[:,(]?[ \t]*|\b(?i:{_PERSON_NOUNS})[ \t]*(?:\(|,[ \t]))"
                rf"(?P<v>{_FULL_NAME})(?!\s+(?i:{_EPONYM_HEADS})\b)",
                rf"(?i)\b(?:{_REPORT_CUES})|\b(?:{_PERSON_NOUNS})\s*(?:\(|, )",
            ),
            ("person_name", 0.85),
        ),
        ("PERSON", _gated(rf"(?<![\w-])(?P<v>{_FULL_NAME})(?={ABOUT_AFTER})", _ABOUT_GATE), ("person_name", 0.8)),
        # "the treatment of Liz Bertone", "the death of X Y": a full name that starts with a given name.
        (
            "PERSON",
            _gated(rf"\b(?i:{_OF_PERSON})\s+of\s+(?P<v>{_FULL_NAME})", rf"(?i)\b(?:{_OF_PERSON})\s+of\s+\p{{Lu}}"),
            ("given_full_name", 0.75),
        ),
        (
            "PERSON",
            rf"(?P<v>{_NAME_OR_INITIALS}),?\s+(?:M\.?D\.?|R\.?N\.?|D\.?O\.?|N\.?P\.?|PA-C|Ph\.?D\.?|MSW|LCSW|DDS|PharmD|FNP|CNM|APRN)\b",
            0.85,
        ),
    ]


_UNICODE_CLASSES = {"d": r"\p{Nd}", "s": r"\s\v\x{1c}-\x{1f}\x{85}\p{Z}", "w": r"\p{L}\p{N}_"}


@lru_cache(maxsize=None)
def unicode_gate(gate: str) -> str:
    """`gate` with RE2's ASCII \\d, \\s and \\w widened to the Unicode classes Python's `re` gives
    the rule (a digit of any script, a no-break space, a letter with a diacritic): a gate must pass
    wherever its rule can match. RE2's \\b stays ASCII; beside an ASCII letter of the gate, as in
    every gate here, it passes wherever Python's does."""
    out, i, in_class = [], 0, False
    while i < len(gate):
        c = gate[i]
        if c == "\\" and i + 1 < len(gate):
            wide = _UNICODE_CLASSES.get(gate[i + 1])
            if wide is None:
                out.append(gate[i : i + 2])
            else:
                out.append(wide if in_class or gate[i + 1] == "d" else f"[{wide}]")
            i += 2
            continue
        in_class = (c == "[") if not in_class else c != "]"
        out.append(c)
        i += 1
    return "".join(out)


class BatchGated:
    """RE2 gates over a batch: `gates` holds one RE2 pattern (or None: always run) per rule of the
    recognizer; PhiEngine calls set_batch(texts) once per batch and at_document(i) before each
    document, and the recognizer runs rule k only where passes(k)."""

    gates: list[str | None] = []
    _masks = None  # per gate: which documents of the batch pass it
    _doc = 0

    def set_batch(self, texts) -> None:
        """Evaluate this recognizer's gates over a batch (pa.Array), or clear them (None)."""
        import pyarrow.compute as pc

        self._masks = (
            None
            if texts is None
            else [
                None if g is None else pc.match_substring_regex(texts, unicode_gate(g)).to_numpy(zero_copy_only=False)
                for g in self.gates
            ]
        )

    def at_document(self, index: int) -> None:
        self._doc = index

    def passes(self, k: int) -> bool:
        return self._masks is None or self._masks[k] is None or bool(self._masks[k][self._doc])


class RegexRecognizer(BatchGated, EntityRecognizer):
    """Presidio recognizer for one entity type from our rules; reports the `v` group span."""

    def __init__(self, entity: str, patterns: list[tuple]):
        # (regex, score or (validator, score), literals): a rule runs only if one of its
        # lowercase literals is in the text; most rules need a keyword most texts lack.
        self.patterns = [(re.compile(p), s, PREFILTERS.get(p)) for p, s in patterns]
        self.gates = [gate_for(p) for p, _ in patterns]
        super().__init__(supported_entities=[entity], name=f"medprep_{entity.lower()}", supported_language="en")

    def load(self) -> None:
        pass

    def analyze(self, text, entities, nlp_artifacts=None):
        entity = self.supported_entities[0]
        out = []
        low = text.lower()
        for k, (regex, score, literals) in enumerate(self.patterns):
            if literals is not None and not any(lit in low for lit in literals):
                continue
            if not self.passes(k):
                continue
            check = None
            if isinstance(score, tuple):
                check, score = _VALIDATORS[score[0]], score[1]
            for m in regex.finditer(text):
                group = next((g for g in ("v", "v2") if g in regex.groupindex and m.group(g)), None)
                if check is not None and not check(m.group(group) if group else m.group()):
                    continue
                start, end = m.span(group) if group else m.span()
                if entity == "PERSON":
                    start, end = _trim_name(text, start, end)
                if end > start and not REGISTRY_ID.match(text[start:end]):
                    out.append(RecognizerResult(entity, start, end, score))
        return out


def _luhn(value: str) -> bool:
    digits = [int(c) for c in value if c.isdigit()]
    total = sum(d if i % 2 == 0 else (d * 2 - 9 if d > 4 else d * 2) for i, d in enumerate(reversed(digits)))
    return total % 10 == 0


def given_full_name(value: str) -> bool:
    """A full name whose first word is a given name of some locale's list and not a common word,
    or of two words or more none of which is a common word but a first one on the lists ("Willy
    Kruschwitz": "willy" is a word; names of locales the lists hold only in part or not at all)."""
    from pipeline.phi.lexicon import lexicon

    lex = lexicon()
    words = [w.lower() for w in re.findall(r"[^\W\d_]+", value)]
    if not words or not _person_name(value):
        return False
    if words[0] in lex.given and not lex.is_common(words[0]):
        return True
    return (
        len(words) >= 2
        and not any(lex.is_common(w) for w in words[1:])
        and (words[0] in lex.given or not lex.is_common(words[0]))
    )


def handle_name(value: str) -> bool:
    """A social-media handle: has a letter, and is not a common word ("@home", "@bedside")."""
    from pipeline.phi.lexicon import lexicon

    return any(c.isalpha() for c in value) and not lexicon().is_common(value.lower())


_VALIDATORS = {
    "handle_name": handle_name,
    "luhn": _luhn,
    "id_value": _id_value,
    "person_name": _person_name,
    "given_full_name": given_full_name,
}


def _trim_name(text: str, start: int, end: int) -> tuple[int, int]:
    """Cut a name match before its first word that is not a name ("Smith The" -> "Smith")."""
    for m in re.finditer(r"[^\W\d_]+", text[start:end]):  # Unicode words: "Inés", not "In" + "s"
        if m.group().lower() in NAME_STOP_WORDS:
            return start, start + len(text[start : start + m.start()].rstrip(" .,-"))
    return start, end


# RE2 "gates" for rules without a keyword: a text can match the rule only if it matches its gate
# (the gate is a necessary part of every match). PhiEngine evaluates all gates over a whole
# batch with pyarrow (C++ RE2, one pass per gate), so Python's `re` runs a rule only on the
# documents that can match it. Keyed by the rule pattern's first characters.
_MONTH_RE2 = "(?:jan|feb|mar|apr|may|jun|jul|aug|sep|oct|nov|dec)"
GATES = {
    r"\b[A-Za-z0-9._%+-]+@": "@",
    r"(?i)\b(?:https?://|www\.)": r"(?i)https?://|www\.",
    r"\b(?:(?:25[0-5]|2[0-4]\d|1\d\d": r"\d{1,3}\.\d{1,3}\.\d{1,3}\.\d{1,3}",
    r"\b(?:[0-9a-fA-F]{1,4}:){7}": r"[0-9a-fA-F]{0,4}:[0-9a-fA-F]{0,4}:",
    r"(?<![\w/.-])(?:(?:\+|00)?1": r"\d{3}[\s.-]\d{4}",
    r"(?<![\w/.-])\+(?=": r"\+\d",
    r"(?<![\w-])(?!000|666|9\d\d)\d{3}-": r"\d{3}-\d{2}-\d{4}",
    r"(?<![\d-])\d(?:[ -]?\d){12,18}": r"\d(?:[ -]?\d){12}",
    r"\b(?:\d{4}[\s-]){3}\d{4}\b": r"\d{4}[\s-]\d{4}|\d{4}[\s-]\d{6}",
    r"\b[A-Z]{2}\d{2}(?:\s?[A-Z0-9]{4})": r"[A-Z]{2}\d{2}\s?[A-Z0-9]{4}",
    r"\b(?=[A-HJ-NPR-Z0-9]*\d)(?=[A-HJ-NPR-Z0-9]*[A-HJ-NPR-Z])": r"[A-HJ-NPR-Z0-9]{17}",
    r"(?<![\d,/-])(?<!\d\.)(?:0?[1-9]|1[0-2])(?P<s>": r"\d{1,2}[/.-]\d{1,2}[/.-]\d{2}",
    r"(?<![\d,/-])(?<!\d\.)(?:0?[1-9]|[12]\d|3[01])(?P<s>": r"\d{1,2}[/.-]\d{1,2}[/.-]\d{2}",
    r"\b(?:19|20)\d\d(?P<s>[-/.])": r"\d{4}[-/.]\d{1,2}[-/.]\d{1,2}",
    r"\b(?:0?[1-9]|[12]\d|3[01])(?i:st|nd|rd|th)?(?i:\s+of)?": r"(?i)\d(?:st|nd|rd|th)?(?:\s+of)?[\s./-]*" + _MONTH_RE2,
    r"(?i)\b(?:on|since|from|until": r"\d/\d",
    r"(?i)\b(?P<v>(?:9\d|1[01]\d))[\s-]*": r"(?i)(?:9\d|1[01]\d)[\s-]*y",
    r"(?i)\b(?:aged?|age:)": r"(?i)age",
    r"(?i)\b(?P<v>(?:ninety|one hundred)": r"(?i)ninety|hundred",
    r"(?<=,\s)(?P<v>": r"[A-Z]{2}\s+\d{5}",
    r"\b(?:AL|AK|AZ|AR": r"[A-Z]{2}\s+\d{5}",
    r"\b(?:lives|living|resides": r"lives|living|resid|moved|relocated|home|born",
    r"\b(?:Dr|Mr|Mrs|Ms|Miss|Mx|Prof": r"(?:Dr|Mr|Ms|Mx|Miss|Prof|Sr)[a-z]*\.?[ \t]+\S",
    r"(?m)(?:^|(?<=[.;]\s))(?P<v>": r"(?:is|was)\s+(?:an?\s|born|admitted|seen|referred|transferred)",
    r"(?P<v>(?:[A-Z]\.[ \t]*)?": r"\s(?:M\.?D|R\.?N|D\.?O|N\.?P|PA-C|Ph\.?D|MSW|LCSW|DDS|PharmD|FNP|CNM|APRN)\b",
}


def gate_for(pattern: str) -> str | None:
    if pattern in RULE_GATES:
        return RULE_GATES[pattern]
    return next((g for prefix, g in GATES.items() if pattern.startswith(prefix)), None)


# Keyword rules and the literals one of which must be in the (lowercased) text.
_KEYWORDS = {
    "PHONE_NUMBER": ("phone", "tel", "fax", "cell", "mobile", "pager", "beeper", "call", "contact", "reach", "ph"),
    "US_SSN": ("ssn", "social security", "ss#"),
    "MEDICAL_RECORD": (
        "mrn",
        "mr#",
        "med",
        "record",
        "rec.",
        "chart",
        "patient",
        "hospital",
        "encounter",
        "accession",
        "file",
        "case",
    ),
    "ACCOUNT_NUMBER": (
        "account",
        "acct",
        "a/c",
        "billing",
        "member",
        "subscriber",
        "policy",
        "plan",
        "insurance",
        "beneficiary",
        "medicare",
        "medicaid",
        "group",
        "claim",
        "routing",
        "iban",
        "card",
        "visa",
        "mastercard",
        "amex",
        "maestro",
        "discover",
    ),
    "LICENSE_NUMBER": ("licen", "dl", "lic", "cert", "dea", "npi", "passport", "registration", "badge"),
    "DEVICE_OR_VEHICLE_ID": (
        "vin",
        "serial",
        "s/n",
        "sn",
        "device",
        "pacemaker",
        "implant",
        "imei",
        "udi",
        "plate",
        "tag",
    ),
    "ID": (
        "id",
        "identifier",
        "case",
        "ref",
        "national",
        "identity",
        "personal",
        "social",
        "insurance",
        "tax",
        "nhs",
        "nino",
        "sin",
        "codice",
        "cpf",
        "pesel",
        "bsn",
        "ahv",
        "avs",
        "aadhaar",
        "personnummer",
        "nir",
        "dni",
        "nie",
        "rut",
        "curp",
        "cedula",
        "passport",
    ),
}
PREFILTERS: dict[str, tuple[str, ...]] = {}


def _register_prefilters() -> None:
    for entity, pattern, _ in rules():
        # Only rules that start with a keyword group can be skipped on its absence.
        if (
            entity in _KEYWORDS
            and pattern not in RULE_GATES
            and pattern.startswith(("(?i)\\b(?:", "(?i:", "(?i)\\b(?P"))
        ):
            PREFILTERS[pattern] = _KEYWORDS[entity]


def build_recognizers() -> list[RegexRecognizer]:
    if not PREFILTERS:
        _register_prefilters()
    by_entity: dict[str, list[tuple[str, float]]] = {}
    for entity, pattern, score in rules():
        by_entity.setdefault(entity, []).append((pattern, score))
    return [RegexRecognizer(e, p) for e, p in by_entity.items()]
