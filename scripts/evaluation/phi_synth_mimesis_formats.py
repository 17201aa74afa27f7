"""The TEST generator for multi-locale structured PHI: values from mimesis (a third-party
generator the rules were not fitted on), in sentences, letters, forms and address blocks of 27
Latin-script locales. The development generator is scripts/evaluation/phi_synth_locales.py (Faker); rules
are fitted there and judged here.

Gold is in the format of data/deid-dev/gold.json (type, value, start, end, safe_harbor_allowed)
plus the locale, so scripts/evaluation/eval_phi.py scores it with the same scorer. Seeded and deterministic:
the same (n, seed) gives the same documents.

    python scripts/evaluation/phi_synth_mimesis_formats.py         # print a few documents"""
from __future__ import annotations

import random
import re

# mimesis locale -> how its postal line is written ("{postcode} {city}" unless listed).
LOCALES = ["en", "en-gb", "en-au", "en-ca", "de", "de-at", "de-ch", "fr", "it", "es", "es-mx", "nl", "nl-be",
           "pt", "pt-br", "pl", "sv", "da", "no", "fi", "cs", "sk", "hu", "hr", "et", "is", "tr"]
POSTAL_LINE = {"en": "{city}, {state} {postcode}", "en-au": "{city} {state} {postcode}",
               "en-ca": "{city}, {state} {postcode}", "en-gb": "{city}\n{postcode}", "pt-br": "{postcode} {city}"}
TYPE_OF = {"name": "PERSON", "first": "PERSON", "surname": "PERSON", "phone": "PHONE", "street": "STREET_ADDRESS",
           "postcode": "POSTAL_CODE", "city": "CITY", "email": "EMAIL", "id": "ID", "card": "CREDIT_CARD",
           "date": "DATE"}
STRUCTURED = ["PHONE", "POSTAL_CODE", "EMAIL", "ID", "CREDIT_CARD", "DATE"]
# Cue words and id shapes (# digit, @ letter) as forms write them; values are random per mask.
ID_CUES = ["MRN", "MRN:", "Medical record no.", "Chart #", "Patient ID:", "Hospital number", "Insurance no.",
           "Insurance number:", "Policy #", "Policy number", "Member ID", "Plan ID:", "Subscriber no.", "HICN",
           "Medicare no.", "Case no.", "Case number", "File no.", "Ref.", "Reference no.", "Account #",
           "Claim number", "Passport no.", "ID card no.", "Application no.", "Licence no."]
ID_MASKS = ["#######", "########", "@@-#####", "#@@-#####", "@######", "###-###-###", "##/####", "####/##",
            "@@@ ### ###", "#########@", "@#-####-##", "### ## ####", "@@######", "####-#####"]
DATE_LAYOUTS = ["%d.%m.%Y", "%d/%m/%Y", "%m/%d/%Y", "%Y-%m-%d", "%d %B %Y", "%B %d, %Y", "%b %d %Y",
                "%d-%b-%Y", "%-d %b. %Y", "%d.%m.%y", "%B %Y"]

TEMPLATES = [
    # narrative, with and without cues
    "{name}, who lives at {street}, was seen in clinic today.",
    "Letter sent to {name} at {street}, {postal}.",
    "Her neighbour {name} drove her in; he can be reached on {phone}.",
    "Discussed the results with {first} by telephone ({phone}).",
    "Patient reports she moved from {city} in {date}.",
    "Appointment confirmed for {date}; reminder e-mailed to {email}.",
    "Seen by {surname}'s team on {date}; plan unchanged.",
    "{name} (born {date}) attended with her husband.",
    "Please forward the discharge letter to {email} or fax {phone}.",
    "The family asked that correspondence go to {street}, {postal}.",
    "{id_cue} {id} - please quote on all correspondence.",
    "Registered under {id_cue} {id}; previous {id_cue2} {id2}.",
    "Payment by card {card} was refused.",
    "She gave {phone} as her daytime number and {phone2} for evenings.",
    "Emergency contact: {name}, {phone}",
    "Home visit arranged at {street} on {date}.",
    # forms
    "Name: {name}\nAddress: {street}\n{postal}\nTel: {phone}\nE-mail: {email}",
    "Surname: {surname}   First name: {first}\nDate of birth: {date}\n{id_cue} {id}",
    "Next of kin: {name}\n{street}, {postal}\nMobile {phone}",
    # address blocks, no cue
    "{name}\n{street}\n{postal}",
    "{name}\n{street}\n{postal}\n{phone}",
    "To: {name}, {street}, {postal}",
    "Sender:\n{name}\n{street}\n{postal}\nPhone: {phone}  Fax: {phone2}",
]
PLAIN = [
    "BP 128/76, HR 84, SpO2 97% on room air, T 37.2.",
    "Metformin 500 mg twice daily; HbA1c 7.1 % (3/2020: 8.4 %).",
    "Ratio 2:1; dilution 1/100; grade 3/6 murmur.",
    "CT chest: 12 x 8 mm nodule in the right upper lobe, unchanged since 2019.",
    "No focal deficit. Strength 5/5 throughout.",
    "Referred for BRCA2 testing; EGFR exon 19 deletion excluded.",
]


def _ident(rng: random.Random, mask: str) -> str:
    return "".join(str(rng.randint(0, 9)) if c == "#" else chr(rng.randint(65, 90)) if c == "@" else c for c in mask)


def _date(rng: random.Random, dt) -> str:
    d = dt.date(start=1930, end=2026)
    text = d.strftime(rng.choice(DATE_LAYOUTS))
    return text.lower() if rng.random() < 0.2 else text


def make_format_documents(n: int, seed: int = 0) -> list[dict]:
    """n documents: {"id", "text", "locale", "gold": [{"type", "value", "start", "end",
    "safe_harbor_allowed", "locale"}, ...]} with character offsets into text."""
    from mimesis import Address, Datetime, Payment, Person
    from mimesis.locales import Locale

    rng = random.Random(seed)
    providers = {}
    for i, loc in enumerate(LOCALES):
        s = seed * 1000 + i
        providers[loc] = (Person(Locale(loc), seed=s), Address(Locale(loc), seed=s + 500), Datetime(seed=s + 700),
                          Payment(seed=s + 900))
    docs = []
    for d in range(n):
        locale = LOCALES[d % len(LOCALES)]
        person, address, dt, payment = providers[locale]
        sentences = rng.sample(TEMPLATES, rng.randint(2, 4)) + rng.sample(PLAIN, rng.randint(1, 2))
        rng.shuffle(sentences)
        text, gold = "", []

        def put(kind: str, value: str) -> None:
            nonlocal text
            gold.append({"type": TYPE_OF[kind], "value": value, "start": len(text), "end": len(text) + len(value),
                         "safe_harbor_allowed": False, "locale": locale})
            text += value

        for s_i, template in enumerate(sentences):
            if s_i:
                text += rng.choice([" ", "\n", "\n\n"])
            first, surname = person.first_name(), person.last_name()
            for piece in re.split(r"({\w+})", template):
                if not piece.startswith("{"):
                    text += piece
                    continue
                kind = piece[1:-1]
                if kind == "name":
                    put("first", first)
                    text += " "
                    put("surname", surname)
                elif kind in ("first", "surname"):
                    put(kind, first if kind == "first" else surname)
                elif kind in ("phone", "phone2"):
                    put("phone", person.telephone())
                elif kind == "street":
                    put("street", address.address())
                elif kind == "postal":
                    layout = POSTAL_LINE.get(locale, "{postcode} {city}")
                    for part in re.split(r"({\w+})", layout):
                        if part in ("{city}", "{postcode}"):
                            put(part[1:-1], address.city() if part == "{city}" else address.postal_code())
                        elif part == "{state}":
                            text += address.state(abbr=True) if locale in ("en", "en-au") else address.state()
                        else:
                            text += part
                elif kind == "city":
                    put("city", address.city())
                elif kind == "email":
                    put("email", person.email())
                elif kind in ("id_cue", "id_cue2"):
                    text += rng.choice(ID_CUES)
                elif kind in ("id", "id2"):
                    put("id", _ident(rng, rng.choice(ID_MASKS)))
                elif kind == "card":
                    put("card", payment.credit_card_number())
                elif kind == "date":
                    put("date", _date(rng, dt))
                else:
                    raise KeyError(kind)
        docs.append({"id": f"mim-{seed}-{d}", "text": text, "locale": locale, "gold": gold})
    return docs


if __name__ == "__main__":
    for doc in make_format_documents(6, 1):
        print(doc["locale"], "|", doc["text"].replace("\n", " / "))
