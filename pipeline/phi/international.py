"""Recognizers for PHI written the way other countries write it (clinical profile): phone numbers
of every layout (libphonenumber), addresses after an address cue whatever their order
("avenue José Candaux 12, 4124 Joly-Dessous", "H.No. 64, Dua Street, 141852 Gandhinagar"),
postal codes, and towns after a preposition."""
from __future__ import annotations

import re

from presidio_analyzer import EntityRecognizer, RecognizerResult

from pipeline.phi.lexicon import lexicon
from pipeline.phi.notes import RuleRecognizer, case_mode
from pipeline.phi.recognizers import NOT_A_QUANTITY, BatchGated, _street_suffixes

# Regions whose layouts libphonenumber tries; "ZZ" needs a leading +.
PHONE_REGIONS = ("US", "GB", "DE", "FR", "IT", "ES", "CH", "NL", "BE", "AT", "IE", "IN", "AU", "NZ", "CA", "BR",
                 "MX", "AR", "PT", "PL", "SE", "NO", "DK", "FI", "IL", "ZA", "SG", "JP", "CN", "KR", "NG", "PH")
PHONE_CANDIDATE = re.compile(r"(?<![\w.,/:-])(?:\+|00)?\(?\d[\d ().\-/]{5,24}\d(?![\w.]\d|\d|%|/|:)")
# A phone word before the number ("Fax:", "office", "reached on", "T."), or after it ("... as her
# daytime number", "(mobile)"); an e-mail address beside it, as in a contact line.
PHONE_CUE = re.compile(r"(?i)(?:phone|tel|telephone|call|ring|contact|mobile|cell|fax|faxed|number|reach|reached|"
                       r"pager|beeper|whatsapp|landline|hotline|extension|ext|n[°º]|nr|tél|telefon|handy|"
                       r"telefone|celular|móvil|cellulare|office|work|home|direct|switchboard|daytime|evenings?|"
                       r"tlf|tfn|puh|gsm|mob|ph|sms|text)\w{0,4}(?:\W+\w{1,7}){0,3}\W*$|(?:^|[\s(])[TFMOHWP][.:]\s*$"
                       r"|@[\w.-]+\.[A-Za-z]{2,}\s*(?:,|;|/|or)\s*$")
PHONE_CUE_AFTER = re.compile(r"(?i)^\s*(?:\(?(?:mobile|cell|home|work|office|fax|tel|phone|landline|daytime|"
                             r"evenings?|direct|mob)\b|\([mhwoc]\)|(?:is|as)\s+(?:\w+\s+){0,3}(?:number|phone|mobile|"
                             r"cell|fax|contact|landline)|\s*(?:,|;|/|or)\s*[\w.+-]+@[\w-]+\.)")
# Shapes a number has without a phone word: a country code, a bracketed area code, 3-3-4 (any
# separators, "410- 555- 0199", "410/555/0199"), a trunk 0 and eight digits or more, 4-4 ("2345 6789",
# not a year range), 10-12 digits in one block, three groups or more with a dash ("63-6532-5973"; two
# are a range, "1000-4000").
_SEPARATED = re.compile(r"\s*([-./])\s*")
PHONE_SHAPES = re.compile(r"(?:\+|00)[1-9]\d{0,2}[ .-]?(?:\(0\)[ .-]?)?\(?\d[\d ().-]{5,}"
                          r"|\(0?\d{2,5}\)[ .-]?\d{2,}(?:[ .-]?\d{2,})+"
                          r"|\d{3}([ .\-/])\d{3}\1\d{4}|\d{3}[ .-]?\d{3}[ .-]\d{4}"
                          r"|0\d[\d .-]{7,}"
                          r"|\d{4} \d{4}|\d{10,12}"
                          r"|(?=[\d ]*-)\d{2,4}[ -]\d{2,4}[ -]\d{2,4}(?:[ -]\d{2,4})?")
# National layouts without a trunk 0 or a country code (ITU-T E.164 numbering plans as countries
# write them), each with the regions that write it: 3-3-3 (Czechia, Slovakia, Spain, Portugal,
# Poland), 3-2-2-2 and 2-3-2-2 (Spain, Slovakia, Croatia), 2-4-4 (Mexico). Groups of numbers are common
# in notes (vital signs, counts, doses), so these count only as a valid number of one of those regions
# (libphonenumber) whose groups are not all round ("250 300 350" is a dose schedule).
NATIONAL_SHAPES = [
    (re.compile(r"\d{3}([ .-])\d{3}\1\d{3}"), ("CZ", "SK", "ES", "PT", "PL")),
    (re.compile(r"\d{3}([ .-])\d{2}\1\d{2}\1\d{2}|\d{2}([ .-])\d{3}\2\d{2}\2\d{2}"), ("ES", "SK", "HR", "PT")),
    (re.compile(r"\d{2}([ .-])\d{4}\1\d{4}"), ("MX",)),
]
# An area code, a slash and the subscriber number, as Central Europe writes it ("06-1/734 7607",
# "(06)54/488-8068", "05423/26479592", "09/ 236 91 65"); with a trunk 0 or a phone word.
AREA_SLASH = re.compile(r"(?:\(?0\d{0,4}\)?(?:-?\d{1,3})?|\(?[1-9]\d{0,3}\)?)/\s?\d{2,4}(?:[ .-]?\d{2,4}){1,3}")
REGISTRY_BEFORE = re.compile(r"(?i)(?:ISRCTN|NCT|ChiCTR|ACTRN|DRKS|UMIN|CRD|PMID|PMCID|DOI|ISBN|ISSN)[\s:#-]*$")


class PhoneNumberRecognizer(RuleRecognizer):
    """Phone and fax numbers of every country's layout: a number of 7 to 15 digits that has a
    phone word before or after it (its layout then does not matter: fake-looking numbers are
    still somebody's), or has the shape of a phone number and is possible in one of
    PHONE_REGIONS (libphonenumber). Vital signs ("98 99 100"), dates, shifts and year ranges
    have neither."""

    entity = "PHONE_NUMBER"

    def __init__(self):
        super().__init__("medprep_phone_numbers")

    def load(self) -> None:
        import phonenumbers
        self.pn = phonenumbers

    def analyze(self, text, entities, nlp_artifacts=None):
        out = []
        for m in PHONE_CANDIDATE.finditer(text):
            raw = m.group()
            if raw.count("(") != raw.count(")"):            # "(0219) 3071" split by the match: trim
                raw = raw.lstrip("(") if raw.startswith("(") and ")" not in raw else raw
            digits = re.sub(r"\D", "", raw)
            if not 7 <= len(digits) <= 15:
                continue
            norm = _SEPARATED.sub(r"\1", raw)
            if re.fullmatch(r"\d{1,4}([/.-])\d{1,2}\1\d{2,4}", norm):       # a date
                continue
            if re.fullmatch(r"([01]\d|2[0-4])[0-5]\d-([01]\d|2[0-4])[0-5]\d", norm):   # a shift, 1900-0700
                continue
            groups = re.findall(r"\d+", raw)
            if len(groups) > 1 and all(YEAR_LIKE.fullmatch(g) for g in groups):
                continue                                    # years ("2010-2012", "2015 2016")
            if REGISTRY_BEFORE.search(text[max(0, m.start() - 12):m.start()]):
                continue
            cued = self._cued(text, m)
            # A decimal ("98.6"), unless a phone word says it is a number in two groups ("Contact: 4138.6446").
            if re.fullmatch(r"\d+\.\d+", norm) and not (cued and re.fullmatch(r"\d{3,5}\.\d{3,5}", norm)):
                continue
            slashed = "/" in norm and not re.fullmatch(r"\(?\d{3}\)?/\d{3}/\d{4}", norm)
            if slashed and not (AREA_SLASH.fullmatch(raw) and norm.count("/") == 1
                                and (cued or raw.lstrip("(").startswith("0") and len(digits) >= 9)):
                continue                                    # blood gases, ratios, doses
            start = m.start() + (len(m.group()) - len(raw))
            if cued:
                out.append(RecognizerResult("PHONE_NUMBER", start, m.end(), 0.8))
                continue
            if norm.startswith("+") and len(digits) >= 8 and PHONE_SHAPES.fullmatch(norm):
                out.append(RecognizerResult("PHONE_NUMBER", start, m.end(), 0.75))     # a country code
                continue
            if slashed:
                out.append(RecognizerResult("PHONE_NUMBER", start, m.end(), 0.7))
                continue
            regions = next((r for shape, r in NATIONAL_SHAPES if shape.fullmatch(raw)), ())
            if regions and not all(g.endswith("0") for g in groups) and self._valid(raw, regions):
                out.append(RecognizerResult("PHONE_NUMBER", start, m.end(), 0.7))
                continue
            if not PHONE_SHAPES.fullmatch(norm) or not self._possible(raw):
                continue
            out.append(RecognizerResult("PHONE_NUMBER", start, m.end(), 0.75))
        return out

    @staticmethod
    def _cued(text: str, m) -> bool:
        return bool(PHONE_CUE.search(text[max(0, m.start() - 30):m.start()])
                    or PHONE_CUE_AFTER.match(text[m.end():m.end() + 40]))

    def _valid(self, raw: str, regions) -> bool:
        """A valid number (its length and leading digits in the national plan) of one of `regions`."""
        pn = self.pn
        for region in regions:
            try:
                if pn.is_valid_number(pn.parse(raw, region)):
                    return True
            except pn.NumberParseException:
                continue
        return False

    def _possible(self, raw: str) -> bool:
        pn = self.pn
        raw = raw.replace("(0)", "")         # "+49(0)4844": the trunk 0 written beside the country code
        for region in (("ZZ",) if raw.startswith("+") else PHONE_REGIONS):
            try:
                number = pn.parse(raw, None if region == "ZZ" else region)
            except pn.NumberParseException:
                continue
            if pn.is_possible_number(number):
                return True
        return False


ADDRESS_CUE = re.compile(
    r"(?i)\b(?:(?:postal|home|mailing|street|permanent|current|billing|delivery)\s+address|"
    r"address(?:\s+on\s+file)?(?=\s*(?:is\b|[:\-–]))|addr\.|(?:liv|resid)(?:e|es|ed|ing)\s+at|"
    r"send\s+(?:it|this|them|the\s+\w+)\s+to|mail(?:ed)?\s+(?:it\s+)?to|ship(?:ped)?\s+(?:it\s+)?to|"
    r"deliver(?:ed)?\s+to|my\s+address\s+is|domicile|domicilio|adresse|anschrift|indirizzo)"
    r"\s*(?:is\s*)?[:\-–]?\s*")
# Words that start a new sentence or clause after an address: the address ends before them.
ADDRESS_END = re.compile(
    r"\n|;|\s+(?:on|during|between|from|since)\s+|\.\s+(?=[A-Z][a-z]+\s+[a-z])|(?<!\bSt)(?<!\bDr)(?<!\bRd)(?<!\bAv)(?<!\bAve)(?<!\bNo)"
    r"(?<!\bApt)(?<!\bSte)(?<!\bMt)(?<!\bul)(?<!\bal)(?<!\bu)(?<!\b[A-Z])\.\s+(?=[A-Z])|\s+(?:and|with|since|for|until|where|who|but)\s+[a-z]|"
    r"[.,]?\s+(?=(?:We|The|She|He|They|Pt|Patient|No|Seen|Vitals|Family|Please|Will)\b)"
)
# --- street addresses of many countries ------------------------------------------------------
# A street is a name with a street word before it ("Via Roma 12", "ul. Jagiełły 4", "488 Cours Du
# Tennis"), after it ("488 Wall Crossing", "Rímska ulica 488", "Damla Caddesi 488") or glued to it
# ("Salzachstraße 276", "Birkenweg 12", "488 Østervej"), and a house number before or after it.
# A capitalized word, any script with case; not a function word of an all-caps note ("FOLEY IN PLACE").
_CAP = (
    r"(?!(?:IN|ON|AT|TO|OF|AND|OR|THE|WITH|FOR|IS|WAS|ARE|BY|FROM|AS|PER|VIA|X|NO|NOT|CONT|CONTS|ON)\b)"
    r"[^\W\d_a-zß-ÿ](?:[^\W\d_]|['’][^\W\d_])[\w'’.-]*"
)
# A word in proper case ("Roma", not "FOLEY").
_PROPER = r"[^\W\d_a-zß-ÿ][a-zß-ÿ\u0100-\u017f'’][\w'’.-]*"
_PARTICLE = (
    r"(?:de|la|le|les|du|des|del|della|dei|di|da|do|dos|das|van|von|der|den|het|am|an|im|zum|zur|y|e|i|"
    r"sur|sous|en|al|el|lo|ter|ten|sankt|st\.|degli|dello|della|delle|dalla|dos|d['’]|l['’])"
)
_NAME = rf"{_CAP}(?:[ -](?:{_PARTICLE}[ -])*{_CAP}){{0,4}}"
_ORDINAL = r"\d{1,3}(?:st|nd|rd|th)"
_PROPER_NAME = rf"{_PROPER}(?:[ -](?:{_PARTICLE}[ -])*{_PROPER}){{0,4}}"
_HOUSE = r"\d{1,5}(?:[ ]?[A-Za-z](?![\w]))?(?:[-/]\d{1,5}[A-Za-z]?)?"
STREET_BEFORE = (
    r"rue|avenue|av\.|avda\.?|boulevard|bd\.?|blvd\.?|chemin|ch\.|place|allée|impasse|route|rte\.?|quai|"
    r"cours|via|viale|v\.le|piazza|p\.zza|piazzale|corso|largo|vicolo|strada|contrada|calle|c/|avenida|"
    r"avinguda|paseo|passeig|plaza|carrer|rambla|ronda|camino|carretera|travesía|rúa|rua|travessa|praça|"
    r"alameda|estrada|ulica|ul\.|aleja|al\.|os\.|osiedle|plac|pl\.|ulice|náměstí|nám\.|třída|avenija|"
    r"bulevar|bulevardul|calea|str\.|šetalište|trg|ulitsa|prospekt|cesta|sokak|caddesi|venelle|ruelle|"
    r"sentier|passage|clos|villa|hameau|lieu-dit|résidence|cité|montée|rampe|chaussée"
)
# Street words after the name: other countries' (also before a house number: "Rímska ulica 488") and
# English ones (only after a house number: "488 Wall Crossing", "12 MAIN ST").
_AFTER_FOREIGN = (
    r"utca|u\.|út|útja|tér|köz|caddesi|cad\.|cd\.|sokak|sokağı|sok\.|sk\.|bulvarı|ulica|ulice|gatan|"
    r"gata|vägen|väg|vej|gade|veien|vei|veg|vegen|straat|laan|weg|plein|katu|kuja|polku|tänav|põik|"
    r"maantee|puiestee|allee|alle|allé|straße|strasse|gasse|platz|damm|cesta|trg|steenweg|baan|dreef|"
    r"sección|colonia"
)
_AFTER_EN_WORDS = (
    r"park|close|crescent|terrace|mews|walk|row|gardens|grove|lane|road|street|st\.?|rd\.?|ave\.?|av\.?|"
    r"dr\.?|ln\.?|ct\.?|blvd\.?|hwy\.?|pl\.?|sq\.?|way|drive|court|place|square|avenue|parade|"
    r"circle|highway|parkway|trail|alley|bend|rise|chase|heights|view|boulevard|promenade|prom\.|"
    r"esplanade|embankment|quay|wharf|" + _street_suffixes().lower()
)
# In their written case: capitalized ("Walk", "St."), or in capitals only the unmistakable ones (an
# all-caps note's "TOLERATED WELL", "SINUS ST", "4 MG SQ" are no streets).
_AFTER_EN = "|".join(f"{w[0].upper()}{w[1:]}" for w in dict.fromkeys(_AFTER_EN_WORDS.split("|"))) + (
    "|STREET|ROAD|RD\\.?|AVENUE|AVE\\.?|LANE|DRIVE|COURT|BOULEVARD|BLVD\\.?|HIGHWAY|HWY|TERRACE|PARKWAY|CIRCLE"
)
_AFTER_LOCAL = rf"(?i:{_AFTER_FOREIGN})|{_AFTER_EN}"
# Street words before the name in their written case ("Via Roma 12", "via Roma 12", not "VIA FOLEY 50").
_BEFORE_CASED = "|".join(f"{w}|{w[0].upper()}{w[1:]}" for w in STREET_BEFORE.split("|"))
_GLUED = (
    r"(?:straße|strasse|str\.|gasse|weg|allee|platz|damm|ufer|chaussee|steig|pfad|gatan|vägen|väg|gränd|torget|"
    r"vej|gade|stræde|veien|vegen|gata|gaten|straat|laan|plein|gracht|kade|singel|dreef|katu|kuja|polku|tie|"
    r"tänav|utca|ulica|lei|baan|steenweg)"
)
_GLUED_WORD = rf"[^\W\d_a-zß-ÿ][\w'’-]*?{_GLUED}(?![\w])"
_NAME_GLUED = rf"(?:{_NAME}[ \t]+)?{_GLUED_WORD}"
_UNIT = (
    r"(?:,?[ \t]*(?i:apt|apartment|suite|ste|unit|flat|fl|floor|room|rm|bldg|building|box|piso|lok|whg|"
    r"wohnung|étage|app|appt|bus|bte|door|dept)\.?[ \t]*#?[ \t]*[A-Za-z0-9-]{1,6}\b|[ \t]*#[ \t]?\d{1,5}[A-Za-z]?\b)"
)
# Postal codes as countries write them ("DK-5366", "1536 QB", "94-569", "366 00", "19456-945",
# "DX4P 6XM", "J6Q 0A8") and the town or state beside them.
POSTAL_ANY = (
    r"(?:(?:[A-Z]{1,3}-)?(?:\d{5}-\d{3}|\d{4}-\d{3}|\d{2}-\d{3}|\d{3}[ ]\d{2}|\d{4}[ ]?[A-Z]{2}|\d{3,6})"
    r"|[A-Z]{1,2}\d[A-Z\d]?[ ]\d[A-Z]{2}|[A-Z]\d[A-Z][ ]?\d[A-Z]\d)(?![\w-])"
)
_TOWN = rf"{_CAP}(?:[ -](?:{_PARTICLE}[ -])*{_CAP}){{0,3}}"
_TAIL_SEGMENT = (
    rf"(?:[ \t]*(?:,|\n)[ \t]*(?:{POSTAL_ANY}[ \t]+{_TOWN}|{_TOWN},?[ \t]+{POSTAL_ANY}|{POSTAL_ANY}"
    rf"(?=[ \t]*(?:$|[,.;)\n]))|{_TOWN}(?=[ \t]*\n[ \t]*{POSTAL_ANY}[ \t]*(?:$|[,.;\n]))))"
)
_TAIL = rf"{_UNIT}?(?:{_TAIL_SEGMENT}){{0,3}}{_UNIT}?"
_NOT_A_QUANTITY = NOT_A_QUANTITY
# Three regexes, so that the two which start at a word run only where an RE2 gate over the batch
# finds their street word (AddressRecognizer.gates): the house number first; a street word first;
# the name with its street word, then the number.
STREET_NUMBER_FIRST = re.compile(
    rf"(?:\b{_HOUSE},?[ \t]+(?!via\b)(?:{_BEFORE_CASED})[ \t]+(?:{_PARTICLE}[ \t]+)*{_PROPER_NAME}"
    rf"|\b{_HOUSE}[ \t]+(?:[NSEW]\.?[ \t]+)?(?:(?:{_ORDINAL}[ \t]+)?{_NAME}[ \t]+(?:{_AFTER_LOCAL})(?![\w])"
    rf"|{_ORDINAL}[ \t]+(?:{_AFTER_LOCAL})(?![\w])|{_NAME_GLUED}))"
    rf"{_TAIL}",
    re.M,
)
STREET_WORD_FIRST = re.compile(
    rf"(?<![\w.])(?:{_BEFORE_CASED})[ \t]+(?:{_PARTICLE}[ \t]+)*{_PROPER_NAME},?[ \t]+{_HOUSE}\b{_NOT_A_QUANTITY}"
    rf"{_TAIL}",
    re.M,
)
STREET_NUMBER_AFTER = re.compile(
    rf"(?:\b{_NAME}(?:[ \t]+[\w'’-]+){{0,2}}[ \t]+(?i:{_AFTER_FOREIGN}),?[ \t]+{_HOUSE}\b{_NOT_A_QUANTITY}"
    rf"|\b(?:{_NAME}[ \t]+)?{_GLUED_WORD},?[ \t]+{_HOUSE}\b{_NOT_A_QUANTITY})"
    rf"{_TAIL}",
    re.M,
)
STREETS = [
    (STREET_NUMBER_FIRST, None),
    (STREET_WORD_FIRST, rf"(?:{_BEFORE_CASED})[ \t]+\S[^\n]{{0,160}}\d"),
    (STREET_NUMBER_AFTER, rf"(?i:{_AFTER_FOREIGN})\.?,?[ \t]+\d|(?i:{_GLUED})\.?,?[ \t]+\d"),
]
# A street line with no street word, known by the postal line after it: "Sint-Maarten 488\n1536 QB
# Amersfoort", "488 Mælifellsá, 536 Sauðárkrókur".
STREET_IN_BLOCK = re.compile(
    rf"(?m)(?:^|(?<=[,:]\s)|(?<=[,:]))[ \t]*(?P<v>(?:{_NAME},?[ \t]+{_HOUSE}|{_HOUSE}[ \t]+{_NAME})"
    rf"{_UNIT}?(?:{_TAIL_SEGMENT}){{1,3}})"
)
# A street line of any layout before the postal line that closes its address ("Ring I 217, 71414
# Porvoo", "23 Käokeele tee põik, 01554 Tallinn", "Rúa de ervedelo, 18, 26234 Logroño"): a clause of at
# most six words holding a house number, then a postal code and a town.
STREET_BEFORE_POSTAL = re.compile(
    rf"(?m)(?:^|(?<=[,:;(]\s)|(?<=[,:;(]))[ \t]*"
    rf"(?P<v>(?=[^\n,;:]*(?<![\w.])\d{{1,5}}[A-Za-z]?(?![\w.]))[^\W_][^\n,;:]{{1,48}}?"
    rf"(?:,[ \t]*\d{{1,5}}[A-Za-z]?)?)(?=[ \t]*(?:,|\n)[ \t]*(?P<code>{POSTAL_ANY})[ \t]+(?P<town>{_TOWN}))"
)
# Where a place named by one to three capitalized words can start: not inside a word, and not at
# an article or a preposition ("The Park", "On Main Street").
_NAMED_START = r"(?<![\w-])(?!(?:The|A|An|On|In|At|Of|To|By|Your|My|His|Her|Our|Their)\b)"
_PROPER_RUN = rf"{_PROPER}(?:[ ]{_PROPER}){{0,2}}"
# A street named without its house number ("found on Birch Lane", "your Larch Ave. location",
# "on Elm St. yesterday"). The abbreviations that are also titles or a saint ("St.", "Dr.") only
# where no capitalized word follows ("Monday Dr. Lee", "Mount St. Helens").
STREET_NAMED = re.compile(
    rf"{_NAMED_START}(?P<v>{_PROPER_RUN}[ ](?:Avenue|Ave\.?|Boulevard|Blvd\.?|Lane|"
    rf"Ln\.?|Road|Rd\.?|Street|Drive|Court|Terrace|Parkway|Pkwy\.?|Highway|Hwy\.?|"
    rf"(?:St|Dr|Ct|Pl)\.?(?![\w]|\.?[ \t]+[A-Z])))(?![\w])"
)
STREET_NAMED_GATE = (
    r" (?:Avenue|Ave|Boulevard|Blvd|Lane|Road|Street|Drive|Court|Terrace|Parkway|Pkwy|"
    r"Highway|Hwy|(?:Ln|Rd|St|Dr|Ct|Pl)\b)"
)
# A place named by its kind, smaller than a state: parks, rivers, lakes, mountains, districts,
# landmarks ("Central Park", "the Hudson River", "Lake Tahoe", "Mount Hood", "Beverly Hills").
# Clinical profile only: abstracts name such places as the science's sites. Title case only, so
# an ALL-CAPS note line is never read by it.
_PLACE_KIND_AFTER = (
    r"Park|River|Creek|Lake|Bay|Beach|Island|Islands|Valley|Canyon|Falls|Springs|Heights|Hills|"
    r"Forest|Square|Plaza|Mall|Airport|Bridge|Harbor|Harbour|Pier|Wharf|Marina|Village|Township|"
    r"Borough|Parish|Gardens|Stadium|Arena|Cemetery|Reservoir"
)
PLACE_NAMED = re.compile(
    rf"{_NAMED_START}(?P<v>{_PROPER_RUN}[ ](?:{_PLACE_KIND_AFTER})"
    rf"|(?:Lake|Mount|Mt\.|Fort|Ft\.|Cape|Port)[ ]{_PROPER}(?:[ ]{_PROPER})?)(?![\w])"
)
# The name after "Lake", "Mount", ... may start with any capital ("Mount Ślęża"): the gate takes the space.
PLACE_NAMED_GATE = rf" (?:{_PLACE_KIND_AFTER})\b|\b(?:Lake|Mount|Mt\.|Fort|Ft\.|Cape|Port) "
# What every STREET_BEFORE_POSTAL match holds: a comma or line break, then a postal code's start.
STREET_BEFORE_POSTAL_GATE = r"[,\n][ \t]*(?:[A-Z]{1,3}-)?(?:\p{Nd}|[A-Z]{1,2}\p{Nd})"
# A postal line alone: "53660 Altlandsberg" as a line of an address block, "DK-5366 Bækmarksbro".
POSTAL_LINE = re.compile(rf"(?m)^[ \t]*(?P<v>{POSTAL_ANY}[ \t]+{_TOWN})\b")
UK_POSTCODE = re.compile(r"\b[A-Z]{1,2}\d[A-Z\d]?[ ]\d[A-Z]{2}\b")
CA_POSTCODE = re.compile(r"\b[A-Z]\d[A-Z][ ]?\d[A-Z]\d\b")
AU_STATE_POSTCODE = re.compile(r"\b(?:NSW|VIC|QLD|SA|WA|TAS|ACT|NT)[ \t]+(?P<v>\d{4})\b")
POSTAL_CUE = re.compile(
    r"\b(?:(?i:zip(?:\s*code)?|postal\s*code|post\s*code|postcode|code\s+postal|código\s+postal|"
    r"kod\s+pocztowy|postnummer|postinumero|irányítószám|pin\s*code|pincode|c[oó]digo\s+postal|postleitzahl|post\s*nr\.?|postnr\.?|code\s+postal)|PLZ|CEP|NPA|PSČ)"
    r"(?:\s+(?:is|was|of))?(?:\s*[:#]\s*|\s+)"
    r"(?P<v>(?=[A-Z0-9 -]*\d)[A-Z0-9]{2,5}(?:[ -][A-Z0-9]{2,4})?)\b"
)
# "C.P.", "CP", "CAP" (Mexico, Spain, Italy) before five digits; "CP" alone is also chest pain ("CP 7/10").
CP_CODE = re.compile(r"\b(?:C\.[ ]?P\.|CP|CAP)[ \t]*:?[ \t]*(?P<v>\d{5})\b(?![/.,]\d)")
# A unit on its own ("Apt. 12", "Flat 3B"), and a postal code with its country letters ("DK-5366 Bækmarksbro").
UNIT_ALONE = re.compile(
    r"\b(?:Apt|Apartment|Suite|Ste|Flat|APT|apt)(?:\.[ \t]*|[ \t]+)#?[ \t]*\d{1,5}[A-Za-z]?\b(?![%.]\d|%)"
)
PREFIXED_POSTAL = re.compile(rf"\b[A-Z]{{1,2}}-\d{{4,5}}[ \t]+{_TOWN}")
PO_BOX = re.compile(
    r"(?i)\b(?:p\.?\s?o\.?\s*box|post\s+office\s+box|gpo\s+box|locked\s+bag|private\s+bag|psc|usns|usnv|uss|"
    r"postfach|apartado(?:\s+postal)?|casilla(?:\s+de\s+correo)?|caixa\s+postal|boîte\s+postale|"
    r"postboks|box)(?:\s+#?\s*|\s*#\s*)\d{1,6}(?:,?\s*box\s+\d+)?\b"
)
# ", 05142 North Henry", ", Suryapet 788191", "ValetteBourg 67402": a number beside a town name.
POSTAL = r"(?:\d{2}-\d{3}|\d{4}-\d{3}|\d{5}-\d{3}|\d{3}\s\d{2}|\d{4}\s?[A-Z]{2}|\d{4,6})"
# A town's initial in any cased script ("Świebodzice", "İlkimside"); in brackets after a town, a code may
# carry its country letters or be a Brazilian CEP without its dash ("(H-6000)", "(94599612)").
_TOWN_INITIAL = r"[^\W\d_a-zß-ÿ]"
CODE_TOWN = re.compile(
    rf"(?:(?<=,\s)|(?<=,))(?P<v>(?:{POSTAL}|\d{{3}})\s+{_TOWN_INITIAL}[\w'’-]+(?:[ -]{_TOWN_INITIAL}[\w'’-]+){{0,2}})\b"
    rf"|(?P<w>\b{_TOWN_INITIAL}[\w'’-]+(?:[ -]{_TOWN_INITIAL}[\w'’-]+){{0,2}},?\s+{POSTAL})(?=\s*(?:$|[.,;\n)]))"
    rf"|(?P<p>\b{_TOWN_INITIAL}[\w'’-]+(?:[ -][^\W\d_][\w'’-]+){{0,2}}(?:\s+\([A-Z]{{2}}\))?\s+"
    rf"\((?:[A-Z]{{1,2}}-\d{{4,5}}|\d{{8}}|{POSTAL})\))",
    re.M,
)
# A postal code and its town after a preposition ("from 20100 Turku", "lives in 8000 Aarhus"), and a
# state abbreviation with full stops before a code ("Monterrey, N.L. 64000").
CODE_TOWN_AFTER = re.compile(
    rf"\b(?:in|from|to|at|near)[ \t]+(?P<v>{POSTAL}[ \t]+{_TOWN_INITIAL}[\w'’-]+"
    rf"(?:[ -]{_TOWN_INITIAL}[\w'’-]+){{0,2}})"
)
DOTTED_STATE_CODE = re.compile(r"(?<=,[ \t])(?:[A-Z][a-z]?\.){1,3}[ \t]*(?P<v>\d{5})\b")
YEAR_LIKE = re.compile(r"1[5-9]\d\d|20\d\d")
# A town after a preposition: "from the clinic in Vernier", "a teacher from Jesus de Sampaio".
TOWN_AFTER = re.compile(
    r"\b(?:in|from|near|to|at|of)\s+(?:the\s+(?:city|town|village)\s+of\s+)?"
    r"(?P<v>[A-Z][a-zà-ÿ'’-]+(?:(?:\s+(?:de|da|do|di|del|la|le|les|los|las|sur|am|an|im|upon|on)"
    r")?\s+[A-Z][a-zà-ÿ'’-]+){0,3})"
)
# --- the place a person lives in or comes from (every profile) --------------------------------
# A town in any script with case ("Skellefteå", "Ústí nad Labem", "ToussaintBourg", "Schwäbisch Hall").
# A town's words: proper case, no full stop inside (the place ends with its sentence).
_PLACE_WORD = r"[^\W\d_a-zß-ÿ][a-zß-ÿ\u0100-\u017f'’][\w'’-]*"
PLACE = rf"{_PLACE_WORD}(?:[ -](?:{_PARTICLE}[ -])*{_PLACE_WORD}){{0,3}}"
# Where a person lives, was born or was found: "lives in X", "resides in X", "at his home in X",
# "native of X"; and a person noun (singular: a case, not a study population) with its name or age
# beside it, then "from"/"in" a place ("A 45-year-old woman (X Y) from Z", "a farmer from Z").
# The singular person nouns after which "from X" / "in X" is where that person is from.
_PERSON_NOUN = (
    "woman|man|boy|girl|infant|child|patient|proband|lady|gentleman|baby|toddler|adolescent|teenager|"
    "mother|father|son|daughter|husband|wife|widow|widower|farmer|worker|teacher|student|resident|native|"
    "citizen|tourist|traveller|traveler|migrant|immigrant|refugee|pensioner|retiree|case"
)
PLACE_OF_PERSON = re.compile(
    rf"\b(?:(?i:lives|lived|living|resides|resided|residing|resident|moved|relocated|hometown|born|native|"
    rf"domiciled|settled)(?:[ \t]+(?:alone|independently|together|with[ \t]+(?:her|his|their)[ \t]+\w+))?"
    rf"[ \t]+(?:in|of|to|at|near)|(?i:home|house|flat|apartment|farm|residence)[ \t]+(?:in|at|near)"
    rf"|(?i:{_PERSON_NOUN})"
    rf"(?:[ \t]*\([^()\n]{{1,60}}\))?,?[ \t]+(?:from|in|of))"
    rf"[ \t]+(?:the[ \t]+)?(?:(?i:city|town|village|municipality|commune|parish|district)[ \t]+of[ \t]+)?(?P<v>{PLACE})"
)
# Its RE2 gate, a superset: a word of it (a stem of the verbs, any of the nouns, with any ending:
# "lives", "resides"), then a preposition and a capital.
PLACE_OF_PERSON_GATE = (
    rf"(?i)(?:liv|resid|moved|relocated|hometown|born|native|domiciled|settled|home|house|flat|"
    rf"apartment|farm|{_PERSON_NOUN})\w*\W[^\n]{{0,70}}?\b(?:in|of|to|at|near|from)\s+(?:the\s+)?\p{{Lu}}"
)
# A nationality or a ward after "of"/"in" is no town ("a man of Asian descent", "in Intensive Care").
_NOT_A_TOWN_AFTER = re.compile(
    r"(?i)^\W*(?:descent|origin|ancestry|extraction|ethnicity|background|heritage|"
    r"nationality|parents?)\b"
)
# A street after "at" with no street word: a name in proper case and a house number ("examined at
# Požiarnická 8", "seen at 27 Mælifellsá"), ending its clause; an all-caps note's "AT 40 MCGS" is a dose.
STREET_AFTER_AT = re.compile(
    rf"(?<![\w-])(?:at|At)[ \t]+(?P<v>(?:{_PROPER_NAME},?[ \t]+{_HOUSE}|{_HOUSE},?[ \t]+{_PROPER_NAME}){_UNIT}?)"
    rf"(?=[ \t]*(?:[,.;:)\n]|$)|[ \t]+(?:on|in|and|or|at|from|for|with|where|when|by|to|after|before|during)\b)"
)
STREET_AFTER_AT_GATE = r"(?i)\bat\s+[^\n]{0,60}\d"
MONTHS_DAYS = {
    "january",
    "february",
    "march",
    "april",
    "may",
    "june",
    "july",
    "august",
    "september",
    "october",
    "november",
    "december",
    "monday",
    "tuesday",
    "wednesday",
    "thursday",
    "friday",
    "saturday",
    "sunday",
}


def _lower_words(value: str) -> list[str]:
    return [w.lower() for w in re.findall(r"[^\W\d_]+", value)]


class AddressRecognizer(BatchGated, RuleRecognizer):
    """LOCATION: street addresses of many countries with their unit and the postal lines after
    them, street lines known by the postal line that follows, the text after an address cue up to
    the end of its clause (when it holds a number or a capitalized name), postal codes (after a
    cue, beside a town, on a line of their own, UK/Canadian/Australian layouts), PO boxes, and
    (clinical profile) towns after a preposition in mixed-case text. In the literature profile a
    postal code that looks like a year needs a street or a cue ("2010 Vancouver" is a study)."""

    entity = "LOCATION"

    def __init__(self, profile: str = "clinical"):
        self.lex = lexicon()
        self.profile = profile
        self.gates = [gate for _, gate in STREETS] + [
            PLACE_OF_PERSON_GATE,
            STREET_AFTER_AT_GATE,
            STREET_NAMED_GATE,
            STREET_BEFORE_POSTAL_GATE,
            PLACE_NAMED_GATE,
        ]
        super().__init__("medprep_addresses")

    def _town_word(self, word: str, cities: bool = True) -> bool:
        """No common word, or (`cities`) a city's name that is no dictionary word."""
        return not self.lex.is_common(word) or cities and word in self.lex.place_words and word not in self.lex.english

    def _town_words(self, value: str) -> bool:
        """Some word of it is a town word ("53660 Altlandsberg", "Jalisco 44100", "Helsinki 00100";
        not "2019 Annual Report")."""
        return any(self._town_word(w) for w in _lower_words(value))

    def _town(self, value: str, cities: bool = True) -> bool:
        """A place's name: some word of it longer than two letters is a town word, and none is a
        month or a weekday ("Kraków", "Stockholm"; not "Intensive Care", "Asian", "January", "Time 2")."""
        words = _lower_words(value)
        if not words or any(w in MONTHS_DAYS for w in words):
            return False
        return any(len(w) > 2 and self._town_word(w, cities) for w in words)

    def _yearlike(self, value: str) -> bool:
        code = re.search(r"\d+", value)
        return self.profile == "literature" and code is not None and YEAR_LIKE.fullmatch(code.group()) is not None

    def analyze(self, text, entities, nlp_artifacts=None):
        out = []
        if self.passes(len(STREETS)):
            for m in PLACE_OF_PERSON.finditer(text):
                start, end = m.span("v")
                value = text[start:end].rstrip(".")
                if self._town(value) and not _NOT_A_TOWN_AFTER.match(text[end : end + 30]):
                    out.append(RecognizerResult("LOCATION", start, start + len(value), 0.7))
        if self.passes(len(STREETS) + 2):
            out += [RecognizerResult("LOCATION", *m.span("v"), 0.65) for m in STREET_NAMED.finditer(text)]
        if self.profile == "clinical" and self.passes(len(STREETS) + 4):
            out += [RecognizerResult("LOCATION", *m.span("v"), 0.65) for m in PLACE_NAMED.finditer(text)]
        if re.search(r"\d", text) is None:
            return out
        for k, (regex, _) in enumerate(STREETS):
            if self.passes(k):
                out += [RecognizerResult("LOCATION", *m.span(), 0.8) for m in regex.finditer(text)]
        for m in STREET_IN_BLOCK.finditer(text):
            if self._town_words(m.group("v")):
                out.append(RecognizerResult("LOCATION", *m.span("v"), 0.7))
        for m in STREET_BEFORE_POSTAL.finditer(text) if self.passes(len(STREETS) + 3) else ():
            value, town = m.group("v"), m.group("town")
            if (
                len(value.split()) <= 6
                and re.search(r"[^\W\d_]{2}", value)
                and self._town_words(town)
                and not (self._yearlike(m.group("code")) or any(w in MONTHS_DAYS for w in _lower_words(value)))
            ):
                out.append(RecognizerResult("LOCATION", *m.span("v"), 0.7))
        for m in ADDRESS_CUE.finditer(text):
            rest = text[m.end() : m.end() + 160]
            end = ADDRESS_END.search(rest)
            value = rest[: end.start() if end else len(rest)].rstrip(" .,")
            first = re.match(r"[^\W_]+", value)
            if not value or not first:
                continue
            # "lives at home with his wife" is no address; "lives at 19 Clover St." or "at Keeley House" is.
            if not re.search(r"\d", value[:50]) and not (
                first.group()[0].isupper() and not self.lex.is_common(first.group().lower())
            ):
                continue
            out.append(RecognizerResult("LOCATION", m.end(), m.end() + len(value), 0.75))
        # UK postcodes with their space ("SW1A 1AA"; glued, "C57BL" would be one).
        for regex in (UK_POSTCODE, CA_POSTCODE):
            out += [RecognizerResult("LOCATION", *m.span(), 0.7) for m in regex.finditer(text)]
        for regex in (AU_STATE_POSTCODE, POSTAL_CUE, CP_CODE):
            out += [RecognizerResult("LOCATION", *m.span("v"), 0.75) for m in regex.finditer(text)]
        for regex in (PO_BOX, UNIT_ALONE, PREFIXED_POSTAL):
            out += [RecognizerResult("LOCATION", *m.span(), 0.75) for m in regex.finditer(text)]
        for m in POSTAL_LINE.finditer(text):
            if self._town_words(m.group("v")) and not self._yearlike(m.group("v")):
                out.append(RecognizerResult("LOCATION", *m.span("v"), 0.7))
        for m in CODE_TOWN_AFTER.finditer(text):
            if self._town_words(m.group("v")) and not self._yearlike(m.group("v")):
                out.append(RecognizerResult("LOCATION", *m.span("v"), 0.7))
        out += [RecognizerResult("LOCATION", *m.span("v"), 0.7) for m in DOTTED_STATE_CODE.finditer(text)]
        for m in CODE_TOWN.finditer(text):
            group = "v" if m.group("v") else "w" if m.group("w") else "p"
            # "Gland (8216)": a postal code in brackets after a name makes it a town, word or not (in
            # notes; in abstracts "A Poem (1719)" is a year).
            if group == "p" and self.profile == "literature":
                continue
            if (group == "p" or self._town_words(m.group(group))) and not self._yearlike(m.group(group)):
                out.append(RecognizerResult("LOCATION", *m.span(group), 0.7))
        if self.passes(len(STREETS) + 1):
            for m in STREET_AFTER_AT.finditer(text):
                value = m.group("v")
                house = re.search(r"\d+", value).group()
                if (
                    self._town(value, cities=False)
                    and not (self.profile == "literature" and YEAR_LIKE.fullmatch(house))
                    and re.match(NOT_A_QUANTITY, text[m.end("v") :])
                ):
                    out.append(RecognizerResult("LOCATION", *m.span("v"), 0.7))
        if self.profile == "clinical" and case_mode(text) == "mixed":
            for m in TOWN_AFTER.finditer(text):
                words = re.findall(r"[^\W\d_]+", m.group("v"))
                lows = [w.lower() for w in words]
                if any(w in MONTHS_DAYS for w in lows):
                    continue
                near = re.match(r"(?:in|from|near)\b", m.group())
                if any(
                    w not in self.lex.english
                    and (w in self.lex.places or not self.lex.is_name(w) or len(words) > 1)
                    or near
                    and w in self.lex.places
                    for w in lows
                    if len(w) > 2
                ):
                    out.append(RecognizerResult("LOCATION", *m.span("v"), 0.6))
        return out


def international_recognizers(profile: str = "clinical") -> list[EntityRecognizer]:
    """Phones, addresses and postal codes: closed formats, found in every profile."""
    return [PhoneNumberRecognizer(), AddressRecognizer(profile)]
