"""Known identifiers: a hospital's registry of its patients (`phi.known_phi`), looked up in their
notes in the forms values take there. A detector has to guess; the registry knows.

The registry is a CSV with a `patient_id` column and any of `name`, `mrn`, `dob`, `address`,
`phone`, `email` (several rows per patient allowed, an empty cell skipped). In a document of that
patient every listed value is found:
- a name in any case, the full name with or without a middle name or initial, `Last, First`,
  the first initial with the surname (`J. Smith`, `J Smith`), and the surname or the given name
  alone (in any case; one that is also an English word, `Rose`, `Bell`, only capitalized);
- a date of birth in the date formats of notes (`3/7/1961`, `03-07-61`, `1961-03-07`,
  `7 Mar 1961`, `March 7, 1961`, `19610307`, ...);
- an MRN or a phone number with or without separators (`123-45-67`, `1234567`, `(617) 555 0142`),
  an e-mail in any case, the address's street line and its other parts.
In every other document, the listed full names (any case, `Last, First`) and MRNs are found too:
a registered patient named in another patient's note.

Values never leave this module: errors name the file, line and column, never the value."""
from __future__ import annotations

import csv
import re
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path

COLUMNS = ("name", "mrn", "dob", "address", "phone", "email")
ENTITY = {"name": "PERSON", "dob": "DATE_TIME", "mrn": "MEDICAL_RECORD", "phone": "PHONE_NUMBER",
          "email": "EMAIL_ADDRESS", "address": "LOCATION"}
MONTHS = ("january", "february", "march", "april", "may", "june", "july", "august", "september", "october",
          "november", "december")
_WORD = re.compile(r"[^\W\d_]+(?:['’-][^\W\d_]+)*")
_DIGITS = re.compile(r"(?<![A-Za-z0-9])[A-Za-z]{0,4}[ -]?\d(?:[ \-./]?\d){3,}(?![A-Za-z0-9])")


class RegistryError(ValueError):
    """A registry that cannot be used: the file, line and column, never a value."""


@dataclass
class Patient:
    names: list[tuple[str, ...]] = field(default_factory=list)    # words of each name, first .. last
    dobs: list[date] = field(default_factory=list)
    mrns: list[str] = field(default_factory=list)
    phones: list[str] = field(default_factory=list)                # digits only
    emails: list[str] = field(default_factory=list)
    addresses: list[list[str]] = field(default_factory=list)       # comma-separated parts


def _name_words(value: str) -> tuple[str, ...]:
    """A name's words, given name first (`Last, First` turned round)."""
    if "," in value:
        last, _, first = value.partition(",")
        value = f"{first} {last}"
    return tuple(_WORD.findall(value))


def _parse_date(value: str) -> date | None:
    value = value.strip()
    m = re.fullmatch(r"(\d{4})-(\d{1,2})-(\d{1,2})", value)
    if m:
        y, mo, d = map(int, m.groups())
    else:
        m = re.fullmatch(r"(\d{1,2})/(\d{1,2})/(\d{4})", value)
        if not m:
            return None
        mo, d, y = map(int, m.groups())
    try:
        return date(y, mo, d)
    except ValueError:
        return None


def read_registry(path: str | Path) -> dict[str, Patient]:
    """{patient_id: Patient} from the CSV; RegistryError names what is wrong without a value."""
    path = Path(path)
    try:
        handle = open(path, encoding="utf-8", newline="")
    except OSError as exc:
        raise RegistryError(f"phi.known_phi: cannot read {path} ({exc.strerror})") from None
    patients: dict[str, Patient] = {}
    with handle:
        reader = csv.DictReader(handle)
        header = [h.strip() for h in (reader.fieldnames or [])]
        if "patient_id" not in header:
            raise RegistryError(f"phi.known_phi: {path} line 1: no patient_id column (the header names the columns: "
                                f"patient_id and any of {', '.join(COLUMNS)})")
        unknown = [h for h in header if h not in COLUMNS and h != "patient_id"]
        if unknown:
            raise RegistryError(f"phi.known_phi: {path} line 1: unknown column {unknown[0]!r} (known: patient_id, "
                                f"{', '.join(COLUMNS)})")
        if not set(header) & set(COLUMNS):
            raise RegistryError(f"phi.known_phi: {path} line 1: no identifier column (any of {', '.join(COLUMNS)})")
        reader.fieldnames = header
        for row in reader:
            line = reader.line_num
            pid = (row.get("patient_id") or "").strip()
            if not pid:
                raise RegistryError(f"phi.known_phi: {path} line {line}: patient_id is empty")
            p = patients.setdefault(pid, Patient())
            for col in COLUMNS:
                value = (row.get(col) or "").strip()
                if not value:
                    continue
                if col == "name":
                    words = _name_words(value)
                    if not words:
                        raise RegistryError(f"phi.known_phi: {path} line {line}: name has no letters")
                    p.names.append(words)
                elif col == "dob":
                    dob = _parse_date(value)
                    if dob is None:
                        raise RegistryError(f"phi.known_phi: {path} line {line}: dob is not a date "
                                            "(YYYY-MM-DD or M/D/YYYY)")
                    p.dobs.append(dob)
                elif col == "mrn":
                    key = re.sub(r"[^A-Za-z0-9]", "", value).upper()
                    if len(key) < 4:
                        raise RegistryError(f"phi.known_phi: {path} line {line}: mrn has fewer than 4 letters "
                                            "and digits")
                    p.mrns.append(key)
                elif col == "phone":
                    digits = re.sub(r"\D", "", value)
                    if len(digits) == 11 and digits.startswith("1"):
                        digits = digits[1:]
                    if len(digits) < 7:
                        raise RegistryError(f"phi.known_phi: {path} line {line}: phone has fewer than 7 digits")
                    p.phones.append(digits)
                elif col == "email":
                    p.emails.append(value)
                else:
                    p.addresses.append([part.strip() for part in value.split(",") if part.strip()])
    if not patients:
        raise RegistryError(f"phi.known_phi: {path} has no patient rows")
    return patients


def _spaced(words) -> str:
    return r"\s+".join(re.escape(w) for w in words)


def _date_forms(d: date) -> list[str]:
    """Regexes of one date as notes write it."""
    y, yy, m, dd = str(d.year), f"{d.year % 100:02d}", d.month, d.day
    month = MONTHS[m - 1]
    mon = month[:3] + r"\.?" if len(month) > 3 else month
    num_m, num_d = rf"0?{m}", rf"0?{dd}"
    sep = r"[/\-.]"
    names = rf"(?:{month}|{mon})"
    return [rf"{num_m}{sep}{num_d}{sep}(?:{y}|{yy})", rf"{num_d}{sep}{num_m}{sep}(?:{y}|{yy})",
            rf"{y}{sep}{num_m}{sep}{num_d}", rf"{y}{m:02d}{dd:02d}",
            rf"{num_d}(?:st|nd|rd|th)?(?:\s+|-)?{names},?(?:\s+|-)(?:{y}|'?{yy})",
            rf"{names}\s+{num_d}(?:st|nd|rd|th)?,?\s+(?:{y}|'?{yy})"]


def _chars(key: str, sep: str) -> str:
    return sep.join(re.escape(c) for c in key)


class KnownIdentifiers:
    """The registry as lookups: `spans(text, patient)` gives (start, end, entity type) of every
    listed value in the text (the patient's own in any of their forms, every patient's full
    names and MRNs), for a document of `patient` (None: no patient's own values)."""

    def __init__(self, patients: dict[str, Patient], common_words: frozenset[str] = frozenset()):
        self.patients = patients
        self.common = common_words
        self._own: dict[str, re.Pattern | None] = {}
        # Every patient's full names, as word tuples in lower case; and MRNs, normalized.
        self.full_names = {tuple(w.lower() for w in n) for p in patients.values() for n in p.names if len(n) >= 2}
        self.first_last = {(n[0], n[-1]) for n in self.full_names}
        self.last_first = {(n[-1], n[0]) for n in self.full_names}
        # The words a full name can begin with: a text with none of them is passed over whole.
        self.name_starts = frozenset(a for a, _ in self.first_last | self.last_first)
        self.mrns = {m for p in patients.values() for m in p.mrns}

    def _own_pattern(self, patient: str) -> re.Pattern | None:
        if patient not in self._own:
            p = self.patients.get(patient)
            self._own[patient] = None if p is None else self._compile(p)
            if len(self._own) > 4096:                      # a bounded cache over many patients
                self._own.pop(next(iter(self._own)))
        return self._own[patient]

    def _compile(self, p: Patient) -> re.Pattern | None:
        parts: list[tuple[str, str, bool]] = []            # (kind, regex, case-insensitive)
        singles = []
        for words in p.names:
            first, last = words[0], words[-1]
            if len(words) >= 2:
                # A middle initial, or the registry's middle names (not any word: `Leo and Hu`).
                middles = "|".join(re.escape(w) for w in words[1:-1])
                middle = rf"(?:\s+(?:{middles + '|' if middles else ''}[^\W\d_])\.?)*"
                parts.append(("name", rf"{re.escape(first)}{middle}\s+{re.escape(last)}", True))
                parts.append(("name", rf"{re.escape(last)}\s*,\s*{re.escape(first)}(?:\s+[^\W\d_]\.?)?", True))
                parts.append(("name", rf"{re.escape(first[0])}\.?\s*{re.escape(last)}", True))
            for w in {first, last}:
                if len(w) < 2:
                    continue
                common = w.lower() in self.common
                singles.append(("name", re.escape(w.capitalize()) if common else re.escape(w), not common))
                if common:
                    singles.append(("name", re.escape(w.upper()), False))
        for d in p.dobs:
            parts += [("dob", form, True) for form in _date_forms(d)]
        for m in p.mrns:
            parts.append(("mrn", _chars(m, r"[\s\-./]?"), True))
        for digits in p.phones:
            parts.append(("phone", r"(?:\+?1[\s\-.]?)?\(?" + _chars(digits, r"[\s\-.()]{0,2}"), False))
        for e in p.emails:
            parts.append(("email", re.escape(e), True))
        for address in p.addresses:
            for part in address:
                if len(part) > 2:
                    parts.append(("address", _spaced(part.split()) + r"\.?", True))
        parts += singles
        if not parts:
            return None
        # Longer forms first: at one position the alternation takes the first that matches
        # (an e-mail before the given name it starts with, a full name before its surname).
        order = {"email": 0, "address": 1, "phone": 2, "mrn": 3, "dob": 4, "name": 5}
        parts.sort(key=lambda part: order[part[0]])
        alts = [f"(?P<{kind}{i}>{'(?i:' + rx + ')' if insensitive else rx})"
                for i, (kind, rx, insensitive) in enumerate(parts)]
        return re.compile(r"(?<![\w])(?:" + "|".join(alts) + r")(?![\w])")

    def spans(self, text: str, patient: str | None) -> list[tuple[int, int, str]]:
        out = []
        pattern = self._own_pattern(patient) if patient is not None else None
        if pattern is not None:
            pos = 0
            while True:
                m = pattern.search(text, pos)
                if m is None:
                    break
                if m.end() > m.start():
                    kind = re.sub(r"\d+$", "", m.lastgroup or "")
                    out.append((m.start(), m.end(), ENTITY[kind]))
                pos = max(m.end(), m.start() + 1)
        out += self._anyone(text)
        return sorted(set(out))

    def _anyone(self, text: str) -> list[tuple[int, int, str]]:
        """Every patient's full names and MRNs."""
        out = []
        if self.full_names and not self.name_starts.isdisjoint(_WORD.findall(text.lower())):
            words = [(m.start(), m.end(), m.group().lower()) for m in _WORD.finditer(text)]
            for i in range(len(words) - 1):
                s, _, a = words[i]
                if a not in self.name_starts:
                    continue
                for j in (i + 1, i + 2):                    # First Last, First M. Last
                    if j >= len(words):
                        break
                    _, e, b = words[j]
                    gap = text[words[i][1]:words[j][0]]
                    if j == i + 2 and len(words[i + 1][2]) != 1:
                        continue
                    if (a, b) in self.first_last and "\n" not in gap and "," not in gap:
                        out.append((s, e, "PERSON"))
                    elif j == i + 1 and (a, b) in self.last_first and gap.strip() == ",":
                        out.append((s, e, "PERSON"))
        if self.mrns:
            for m in _DIGITS.finditer(text):
                key = re.sub(r"[^A-Za-z0-9]", "", m.group()).upper()
                digits = key.lstrip("ABCDEFGHIJKLMNOPQRSTUVWXYZ")
                if key in self.mrns:
                    out.append((m.start(), m.end(), "MEDICAL_RECORD"))
                elif digits in self.mrns:
                    start = m.end() - len(m.group().lstrip("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz -"))
                    out.append((start, m.end(), "MEDICAL_RECORD"))
        return out


def load_known(path: str | Path) -> KnownIdentifiers:
    """The registry at `path`, with the English words of the name rules' lexicon (a listed
    name that is also a word is found only capitalized)."""
    from pipeline.phi.lexicon import lexicon
    return KnownIdentifiers(read_registry(path), lexicon().common)
