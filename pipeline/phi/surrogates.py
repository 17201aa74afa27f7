"""Consistent surrogates: within a document the same value always maps to the same fake value
(seeded from the run seed, the document id and the value), and every date shifts by one
per-document offset so intervals between dates are preserved."""
from __future__ import annotations

import calendar
import random
import re
from datetime import date, timedelta

import xxhash

_MONTHS = {m.lower(): i for i, m in enumerate(calendar.month_abbr) if m}


def _shape_preserving(value: str, rng: random.Random, letters: bool = True) -> str:
    """Same layout, new characters: digits stay digits, letters (if asked) stay letters of the
    same case; everything else (separators, "x" of an extension) is kept."""
    out = []
    for ch in value:
        if ch.isdigit():
            out.append(str(rng.randrange(10)))
        elif letters and ch.isalpha() and ch.isascii():
            letter = chr(rng.randrange(26) + 65)
            out.append(letter if ch.isupper() else letter.lower())
        else:
            out.append(ch)
    return "".join(out)


def _parse_date(value: str):
    """(date, style) for the date forms our recognizers find, or None."""
    v = value.strip().rstrip(".")
    m = re.fullmatch(r"((?:19|20)\d\d)-(\d\d)-(\d\d)", v)
    if m:
        return date(int(m[1]), int(m[2]), int(m[3])), ("iso",)
    m = re.fullmatch(r"(\d{1,2})([/.-])(\d{1,2})(?:\2(\d{2}|\d{4}))?", v)
    if m:
        year = int(m[4]) if m[4] else 2000
        year = year + 2000 if m[4] and len(m[4]) == 2 and year < 50 else (year + 1900 if m[4] and len(m[4]) == 2 else year)
        return date(year, int(m[1]), int(m[3])), ("num", m[2], len(m[4]) if m[4] else 0)
    m = re.fullmatch(r"([A-Za-z]{3})[a-z]*\.?\s+(\d{1,2})(?:st|nd|rd|th)?(?:,?\s+((?:19|20)\d\d))?", v)
    if m and m[1].lower() in _MONTHS:
        return date(int(m[3] or 2000), _MONTHS[m[1].lower()], int(m[2])), ("mdy", bool(m[3]))
    m = re.fullmatch(r"(\d{1,2})(?:st|nd|rd|th)?[\s-]([A-Za-z]{3})[a-z]*\.?(?:[\s,-]+((?:19|20)\d\d))?", v)
    if m and m[2].lower() in _MONTHS:
        return date(int(m[3] or 2000), _MONTHS[m[2].lower()], int(m[1])), ("dmy", bool(m[3]))
    return None


def _format_date(d: date, style) -> str:
    if style[0] == "iso":
        return d.isoformat()
    if style[0] == "num":
        sep, ywidth = style[1], style[2]
        base = f"{d.month}{sep}{d.day}"
        return base if not ywidth else f"{base}{sep}{d.year % 100:02d}" if ywidth == 2 else f"{base}{sep}{d.year}"
    month = calendar.month_name[d.month]
    if style[0] == "mdy":
        return f"{month} {d.day}, {d.year}" if style[1] else f"{month} {d.day}"
    return f"{d.day} {month} {d.year}" if style[1] else f"{d.day} {month}"


class DocumentSurrogates:
    def __init__(self, seed: int, doc_id: str, faker):
        self.seed = seed
        self.doc_id = doc_id
        self.faker = faker
        self.mapping: dict[tuple[str, str], str] = {}
        rng = random.Random(xxhash.xxh64_intdigest(f"{seed}\x00{doc_id}".encode()))
        self.offset = timedelta(days=rng.choice([d for d in range(-365, 366) if d]))

    def _rng(self, entity: str, value: str) -> random.Random:
        return random.Random(xxhash.xxh64_intdigest(f"{self.seed}\x00{self.doc_id}\x00{entity}\x00{value}".encode()))

    def value(self, entity: str, value: str) -> str:
        key = (entity, value)
        if key not in self.mapping:
            self.mapping[key] = self._make(entity, value)
        return self.mapping[key]

    def for_entity(self, entity: str):
        return lambda value: self.value(entity, value)

    def _make(self, entity: str, value: str) -> str:
        rng = self._rng(entity, value)
        fake = self.faker
        fake.seed_instance(rng.randrange(1 << 62))
        if entity == "PERSON":
            n = len(value.split())
            return fake.last_name() if n == 1 else fake.name() if n == 2 else fake.name()
        if entity == "DATE_TIME":
            parsed = _parse_date(value)
            if parsed:
                try:
                    return _format_date(parsed[0] + self.offset, parsed[1])
                except ValueError:
                    pass
            return _shape_preserving(value, rng, letters=entity not in ("PHONE_NUMBER", "US_SSN"))
        if entity == "AGE":
            return "90"                 # Safe Harbor: ages over 89 are aggregated as 90 or older
        if entity == "LOCATION":
            return fake.street_address() if re.match(r"\d", value) else fake.city()
        if entity == "EMAIL_ADDRESS":
            return fake.email()
        if entity == "URL":
            return fake.url()
        if entity == "IP_ADDRESS":
            return fake.ipv4() if "." in value else fake.ipv6()
        return _shape_preserving(value, rng, letters=entity not in ("PHONE_NUMBER", "US_SSN"))
