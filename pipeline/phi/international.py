"""Recognizers for PHI written the way other countries write it (clinical profile): phone numbers
of every layout (libphonenumber), addresses after an address cue whatever their order
("avenue José Candaux 12, 4124 Joly-Dessous", "H.No. 64, Dua Street, 141852 Gandhinagar"),
postal codes, and towns after a preposition."""
from __future__ import annotations

import re

from presidio_analyzer import EntityRecognizer, RecognizerResult

from pipeline.phi.lexicon import lexicon
from pipeline.phi.notes import RuleRecognizer, case_mode

# Regions whose layouts libphonenumber tries; "ZZ" needs a leading +.
PHONE_REGIONS = ("US", "GB", "DE", "FR", "IT", "ES", "CH", "NL", "BE", "AT", "IE", "IN", "AU", "NZ", "CA", "BR",
                 "MX", "AR", "PT", "PL", "SE", "NO", "DK", "FI", "IL", "ZA", "SG", "JP", "CN", "KR", "NG", "PH")
PHONE_CANDIDATE = re.compile(r"(?<![\w.,/:])(?:\+|00)?\(?\d[\d ().\-]{5,20}\d(?![\w.]\d|\d|%|/|:)")
PHONE_CUE = re.compile(r"(?i)(?:phone|tel|telephone|call|ring|contact|mobile|cell|fax|faxed|number|reach|reached|"
                       r"pager|beeper|whatsapp|landline|hotline|extension|ext|n[°º]|nr|tél|telefon|handy|"
                       r"telefone|celular|móvil|cellulare)(?:\W+\w{1,7}){0,3}\W*$")


class PhoneNumberRecognizer(RuleRecognizer):
    """Phone numbers libphonenumber accepts as possible in any of PHONE_REGIONS, where the
    number also looks like one: a leading + or 0 (trunk prefix) or parentheses, ten digits or
    more, or a phone word before it. Vital signs ("98 99 100") and dates are not phone-like."""

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
            digits = re.sub(r"\D", "", raw)
            if not 7 <= len(digits) <= 15:
                continue
            if re.fullmatch(r"\d{1,4}[/.-]\d{1,2}[/.-]\d{2,4}", raw):       # a date
                continue
            if re.fullmatch(r"([01]\d|2[0-4])[0-5]\d\s*-\s*([01]\d|2[0-4])[0-5]\d", raw):   # a shift, 1900-0700
                continue
            cue = PHONE_CUE.search(text[max(0, m.start() - 30):m.start()])
            # Without a phone word the number must look like one: a + or ( or trunk 0 in front, a
            # 3-3-4 layout, or one block of 10-12 digits; "98 99 100 101" are vital signs.
            shaped = (raw.startswith(("+", "(")) or raw.startswith("0") and len(digits) >= 8
                      or re.fullmatch(r"\d{3}[\s.-]?\d{3}[\s.-]?\d{4}|\d{10,12}|\d{3} \d{3} \d{3}", raw) is not None
                      or "-" in raw and len(digits) >= 8 and re.fullmatch(r"\d{2,4}[ -]\d{2,4}[ -]\d{2,4}(?:[ -]\d{2})?", raw))
            if not (cue or shaped):
                continue
            if not self._possible(raw):
                continue
            out.append(RecognizerResult("PHONE_NUMBER", m.start(), m.end(), 0.75))
        return out

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
    r"(?i)\b(?:(?:postal|home|mailing|street|permanent|current|billing|delivery)\s+address|address(?:\s+on\s+file)?|"
    r"addr\.?|lives\s+at|living\s+at|resides\s+at|residing\s+at|live\s+at|located\s+at|"
    r"send\s+(?:it|this|them|the\s+\w+)\s+to|mail(?:ed)?\s+(?:it\s+)?to|ship(?:ped)?\s+(?:it\s+)?to|"
    r"deliver(?:ed)?\s+to|my\s+address\s+is|address\s+is|domicile|domicilio|adresse|anschrift|indirizzo)"
    r"\s*(?:is\s*)?[:\-–]?\s*")
# Words that start a new sentence or clause after an address: the address ends before them.
ADDRESS_END = re.compile(r"\n|;|\.\s+(?=[A-Z][a-z]+\s+[a-z])|\s+(?:and|with|since|for|until|where|who|but)\s+[a-z]|"
                         r"[.,]?\s+(?=(?:We|The|She|He|They|Pt|Patient|No|Seen|Vitals|Family|Please|Will)\b)")
UK_POSTCODE = re.compile(r"\b[A-Z]{1,2}\d[A-Z\d]?\s?\d[ABD-HJLNP-UW-Z]{2}\b")
CA_POSTCODE = re.compile(r"\b[ABCEGHJ-NPRSTVXY]\d[A-Z]\s?\d[A-Z]\d\b")
# ", 05142 North Henry", ", Suryapet 788191", "ValetteBourg 67402": a number beside a town name.
POSTAL = r"(?:\d{2}-\d{3}|\d{4}-\d{3}|\d{5}-\d{3}|\d{3}\s\d{2}|\d{4}\s?[A-Z]{2}|\d{4,6})"
CODE_TOWN = re.compile(rf"(?:(?<=,\s)|(?<=,))(?P<v>{POSTAL}\s+[A-Z][\w'’-]+(?:[ -][A-Z][\w'’-]+){{0,2}})\b"
                       rf"|(?P<w>\b[A-Z][\w'’-]+(?:[ -][A-Z][\w'’-]+){{0,2}},?\s+{POSTAL})(?=\s*(?:$|[.,;\n)]))"
                       rf"|(?P<p>\b[A-Z][\w'’-]+(?:[ -][A-Za-z][\w'’-]+){{0,2}}(?:\s+\([A-Z]{{2}}\))?\s+\({POSTAL}\))",
                       re.M)
# A town after a preposition: "from the clinic in Vernier", "a teacher from Jesus de Sampaio".
TOWN_AFTER = re.compile(r"\b(?:in|from|near|to|at|of)\s+(?:the\s+(?:city|town|village)\s+of\s+)?"
                        r"(?P<v>[A-Z][a-zà-ÿ'’-]+(?:(?:\s+(?:de|da|do|di|del|la|le|les|los|las|sur|am|an|im|upon|on)"
                        r")?\s+[A-Z][a-zà-ÿ'’-]+){0,3})")
MONTHS_DAYS = {"january", "february", "march", "april", "may", "june", "july", "august", "september", "october",
               "november", "december", "monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday"}


class AddressRecognizer(RuleRecognizer):
    """LOCATION: the text after an address cue up to the end of its clause (when it holds a number
    or a capitalized name), UK and Canadian postcodes, postal codes beside a town, and towns
    after a preposition in mixed-case text."""

    entity = "LOCATION"

    def __init__(self):
        self.lex = lexicon()
        super().__init__("medprep_addresses")

    def analyze(self, text, entities, nlp_artifacts=None):
        out = []
        for m in ADDRESS_CUE.finditer(text):
            rest = text[m.end():m.end() + 160]
            end = ADDRESS_END.search(rest)
            value = rest[:end.start() if end else len(rest)].rstrip(" .,")
            first = re.match(r"[^\W_]+", value)
            if not value or not first:
                continue
            # "lives at home with his wife" is no address; "lives at 19 Clover St." or "at Keeley House" is.
            if not re.search(r"\d", value[:50]) and not (first.group()[0].isupper()
                                                         and not self.lex.is_common(first.group().lower())):
                continue
            out.append(RecognizerResult("LOCATION", m.end(), m.end() + len(value), 0.75))
        for regex in (UK_POSTCODE, CA_POSTCODE):
            out += [RecognizerResult("LOCATION", *m.span(), 0.7) for m in regex.finditer(text)]
        for m in CODE_TOWN.finditer(text):
            group = "v" if m.group("v") else "w" if m.group("w") else "p"
            words = re.findall(r"[^\W\d_]+", m.group(group))
            # "Gland (8216)": a postal code in brackets after a name makes it a town, word or not.
            if group == "p" or words and not all(self.lex.is_common(w.lower()) for w in words):
                out.append(RecognizerResult("LOCATION", *m.span(group), 0.7))
        if case_mode(text) == "mixed":
            for m in TOWN_AFTER.finditer(text):
                words = re.findall(r"[^\W\d_]+", m.group("v"))
                lows = [w.lower() for w in words]
                if any(w in MONTHS_DAYS for w in lows):
                    continue
                near = re.match(r"(?:in|from|near)\b", m.group())
                if any(w not in self.lex.english and (w in self.lex.places or not self.lex.is_name(w) or len(words) > 1)
                       or near and w in self.lex.places for w in lows if len(w) > 2):
                    out.append(RecognizerResult("LOCATION", *m.span("v"), 0.6))
        return out


def international_recognizers() -> list[EntityRecognizer]:
    return [PhoneNumberRecognizer(), AddressRecognizer()]
