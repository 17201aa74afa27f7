"""Consistent surrogates, keyed by (secret key, type, normalized value).

The same value gets the same surrogate everywhere in the corpus, so identical notes stay
identical (and dedup still removes them) and "Mr. Johnson" and "James Johnson" keep one
surname: names are replaced word by word. Every date of a patient (the config's `group_field`;
without one, the whole corpus) shifts by one offset, so intervals are kept. A value that cannot
be given a surrogate of its kind (an impossible date such as 2/30/19) becomes its placeholder:
surrogate mode never crashes and never lets the value through."""
from __future__ import annotations

import calendar
import hashlib
import random
import re
from datetime import date, timedelta

from pipeline.phi.ascii_fold import ASCII_FOLD
from pipeline.phi.placeholders import DEFAULT_PLACEHOLDER, PLACEHOLDERS

_MONTHS = {m.lower(): i for i, m in enumerate(calendar.month_abbr) if m}
_MONTHS.update({m.lower(): i for i, m in enumerate(calendar.month_name) if m})
_MONTHS["sept"] = 9
_TITLES = {"dr", "drs", "doctor", "mr", "mrs", "ms", "miss", "mister", "mx", "prof", "professor", "sir", "dame"}
CACHE_SIZE = 100_000
_NAME_PART = re.compile(r"[^\W\d_]+(?:['’][^\W\d_]+)?")


def _normalize(value: str) -> str:
    # One surrogate for one value however its separators and digits are written.
    return " ".join(value.translate(ASCII_FOLD).casefold().split()).strip(" .,;:")


def _shape_preserving(value: str, rng: random.Random, letters: bool = True) -> str:
    """Same layout, new characters: digits stay digits, letters (if asked) stay letters of the
    same case; everything else (separators, "x" of an extension) is kept."""
    out = []
    for ch in value:
        if ch.isdigit():
            out.append(str(rng.randrange(10)))
        elif letters and ch.isalpha():
            letter = chr(rng.randrange(26) + 65)
            out.append(letter if ch.isupper() else letter.lower())
        else:
            out.append(ch)
    return "".join(out)


def _same_case(template: str, word: str) -> str:
    if template.isupper() and len(template) > 1:
        return word.upper()
    if template.islower():
        return word.lower()
    return word


def _year(text: str | None, default: int) -> int:
    if not text:
        return default
    y = int(text)
    if len(text) == 2:
        return 2000 + y if y < 50 else 1900 + y
    return y


def parse_date(value: str):
    """(date, style) for the date forms the recognizers find, or None. Month-first is tried
    before day-first; impossible dates (2/30/19, 16/5/40) give None."""
    v = value.strip().rstrip(".")
    try:
        m = re.fullmatch(r"((?:19|20)\d\d)-(\d\d)-(\d\d)", v)
        if m:
            return date(int(m[1]), int(m[2]), int(m[3])), ("iso",)
        m = re.fullmatch(r"(\d{1,2})([/.-])(\d{1,2})(?:\2(\d{2}|\d{4}))?", v)
        if m:
            a, b, year = int(m[1]), int(m[3]), _year(m[4], 2000)
            width = len(m[4]) if m[4] else 0
            for month, day, order in ((a, b, "md"), (b, a, "dm")):
                if 1 <= month <= 12 and 1 <= day <= calendar.monthrange(year, month)[1]:
                    return date(year, month, day), ("num", m[2], width, order)
            return None
        m = re.fullmatch(r"(\d{1,2})/(\d{2})", v)          # month/2-digit year ("8/87")
        if m and 1 <= int(m[1]) <= 12:
            return date(_year(m[2], 2000), int(m[1]), 1), ("my", "/")
        m = re.fullmatch(r"([A-Za-z]{3,9})\.?\s+(\d{1,2})(?:st|nd|rd|th)?(?:,?\s+((?:19|20)\d\d))?", v)
        if m and m[1].lower() in _MONTHS:
            return date(_year(m[3], 2000), _MONTHS[m[1].lower()], int(m[2])), ("mdy", bool(m[3]))
        m = re.fullmatch(r"(\d{1,2})(?:st|nd|rd|th)?[\s-]([A-Za-z]{3,9})\.?(?:[\s,-]+((?:19|20)\d\d))?", v)
        if m and m[2].lower() in _MONTHS:
            return date(_year(m[3], 2000), _MONTHS[m[2].lower()], int(m[1])), ("dmy", bool(m[3]))
    except ValueError:                  # day out of range for the month
        return None
    return None


def format_date(d: date, style) -> str:
    if style[0] == "iso":
        return d.isoformat()
    if style[0] == "num":
        sep, width, order = style[1], style[2], style[3]
        base = f"{d.month}{sep}{d.day}" if order == "md" else f"{d.day}{sep}{d.month}"
        return base if not width else f"{base}{sep}{d.year % 100:02d}" if width == 2 else f"{base}{sep}{d.year}"
    if style[0] == "my":
        return f"{d.month}/{d.year % 100:02d}"
    month = calendar.month_name[d.month]
    if style[0] == "mdy":
        return f"{month} {d.day}, {d.year}" if style[1] else f"{month} {d.day}"
    return f"{d.day} {month} {d.year}" if style[1] else f"{d.day} {month}"


class Surrogates:
    """One per worker: the key, a seeded Faker, and a cache of the surrogates made so far."""

    def __init__(self, key: bytes, faker, given_names=frozenset()):
        self.key = key
        self.faker = faker
        self.given = given_names
        # Surrogates are a pure function of (key, type, value): the cache only saves time, so it
        # is bounded (cleared when full) rather than growing with every value of the corpus.
        self.cache: dict[tuple[str, str], str] = {}

    def _rng(self, *parts: str) -> random.Random:
        digest = hashlib.blake2b("\x00".join(parts).encode(), key=self.key[:64], digest_size=8).digest()
        return random.Random(int.from_bytes(digest, "big"))

    def date_offset(self, group: str | None) -> timedelta:
        # A year and 32-58 days, either way: the year, the month and the day of every date all
        # change (so no piece of a real date stays), and intervals are kept.
        rng = self._rng("date-offset", group or "")
        return timedelta(days=rng.choice([-1, 1]) * (365 + rng.randint(32, 58)))

    def for_document(self, group: str | None = None) -> "DocumentSurrogates":
        return DocumentSurrogates(self, self.date_offset(group))

    def value(self, entity: str, value: str, offset: timedelta) -> str:
        norm = _normalize(value)
        if entity == "DATE_TIME":
            key = (entity, f"{norm}\x00{offset.days}\x00{value}")
        else:
            key = (entity, value if entity == "PERSON" else norm)
        if key not in self.cache:
            if len(self.cache) >= CACHE_SIZE:
                self.cache.clear()
            try:
                self.cache[key] = self._make(entity, value, norm, offset)
            except Exception:           # a value of a form no surrogate fits: its placeholder
                self.cache[key] = PLACEHOLDERS.get(entity, DEFAULT_PLACEHOLDER)
        return self.cache[key]

    def _name_word(self, word: str) -> str:
        low = word.casefold()
        if low in _TITLES:
            return word
        rng = self._rng("PERSON", low)
        if len(low) == 1:                       # an initial: another letter
            letters = [c for c in "ABCDEFGHIJKLMNOPQRSTUVWXYZ" if c != word.upper()]
            return _same_case(word, rng.choice(letters))
        self.faker.seed_instance(rng.randrange(1 << 62))
        fake = self.faker.first_name() if low in self.given else self.faker.last_name()
        return _same_case(word, fake)

    def _make(self, entity: str, value: str, norm: str, offset: timedelta) -> str:
        rng = self._rng(entity, norm)
        fake = self.faker
        if entity == "PERSON":
            # Word by word, so a surname alone gets the same surrogate as in the full name.
            return _NAME_PART.sub(lambda m: self._name_word(m.group()), value)
        if entity == "DATE_TIME":
            parsed = parse_date(value)
            if parsed is None:
                return PLACEHOLDERS["DATE_TIME"]
            return format_date(parsed[0] + offset, parsed[1])
        fake.seed_instance(rng.randrange(1 << 62))
        if entity == "AGE":
            return "90"                 # Safe Harbor: ages over 89 are aggregated as 90 or older
        if entity == "LOCATION":
            return fake.street_address() if re.match(r"\d", value) else _same_case(value, fake.city())
        if entity == "EMAIL_ADDRESS":
            return fake.email()
        if entity == "URL":
            return fake.url()
        if entity == "IP_ADDRESS":
            return fake.ipv4() if "." in value else fake.ipv6()
        return _shape_preserving(value, rng, letters=entity not in ("PHONE_NUMBER", "US_SSN"))


class DocumentSurrogates:
    """The surrogates of one document: the shared ones, with its patient's date offset."""

    def __init__(self, surrogates: Surrogates, offset: timedelta):
        self.surrogates = surrogates
        self.offset = offset

    def for_entity(self, entity: str):
        return lambda value: self.surrogates.value(entity, value, self.offset)
