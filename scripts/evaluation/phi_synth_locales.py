"""Held-out-style synthetic PHI in many locales, of the kind Presidio's evaluator data generator
makes: English template sentences filled with Faker values of one locale per document (phone
numbers in that locale's formats, street addresses, postal codes, cities, person names with and
without a cue word, e-mails, national ids, IBANs, card numbers, dates, MRN-like ids).

Gold is in the format of data/deid-dev/gold.json (type, value, start, end, safe_harbor_allowed)
plus the value's locale, so scripts/evaluation/eval_phi.py scores it with the same scorer. Seeded and
deterministic: the same (n, seed) gives the same documents."""
from __future__ import annotations

import random
import re
from functools import lru_cache

from faker import Faker

# Locale -> value kinds it supplies in Latin script (ja_JP: romanized names, no addresses).
LOCALES = {
    "en_US": None, "en_GB": None, "en_AU": None, "en_IN": None, "en_CA": None, "de_DE": None,
    "de_CH": None, "fr_FR": None, "fr_CH": None, "it_IT": None, "es_ES": None, "nl_NL": None,
    "pt_BR": None, "pl_PL": None, "sv_SE": None,
    # Central, Nordic, Baltic, Balkan and Turkish locales, and Mexico and Portugal.
    "cs_CZ": None, "sk_SK": None, "hu_HU": None, "hr_HR": None, "da_DK": None, "fi_FI": None, "no_NO": None,
    "et_EE": None, "tr_TR": None, "pt_PT": None, "de_AT": None, "nl_BE": None, "es_MX": None,
    "ja_JP": {"name", "name_cue", "first", "last_cue", "phone", "postcode", "email", "date", "mrn", "iban",
              "credit_card"},
}
# National phone layouts (ITU-T E.164 numbering plans as these countries write them) for locales whose
# Faker provider has none of its own (it falls back to en_US's): # is a digit.
PHONE_FORMATS = {
    "et_EE": ["+372 5### ####", "5### ####", "5## ####", "6## ####", "+372 6## ####", "7## ####", "+372 5#######"],
    "es_MX": ["55 #### ####", "(55) #### ####", "+52 55 #### ####", "+52 1 33 #### ####", "(81) ####-####",
              "### ### ####", "+52 (###) ###-####", "01 ### ### ####"],
}
DATE_FORMATS = {"en_US": "%m/%d/%Y", "en_CA": "%Y-%m-%d", "ja_JP": "%Y/%m/%d", "de_DE": "%d.%m.%Y",
                "de_CH": "%d.%m.%Y", "pl_PL": "%d.%m.%Y", "nl_NL": "%d-%m-%Y", "sv_SE": "%Y-%m-%d",
                "cs_CZ": "%d.%m.%Y", "sk_SK": "%d.%m.%Y", "hu_HU": "%Y.%m.%d", "hr_HR": "%d.%m.%Y",
                "da_DK": "%d-%m-%Y", "fi_FI": "%d.%m.%Y", "no_NO": "%d.%m.%Y", "et_EE": "%d.%m.%Y",
                "tr_TR": "%d.%m.%Y", "de_AT": "%d.%m.%Y"}
TYPE_OF = {"name": "PERSON", "first": "PERSON", "name_cue": "PERSON_CUE", "last_cue": "PERSON_CUE",
           "phone": "PHONE", "street": "STREET_ADDRESS", "postcode": "POSTAL_CODE", "city": "CITY",
           "email": "EMAIL", "national_id": "NATIONAL_ID", "iban": "IBAN", "credit_card": "CREDIT_CARD",
           "date": "DATE", "mrn": "MRN"}
# Identifier types with a fixed shape: the issue allows none of them above 1 % leak.
STRUCTURED = ["PHONE", "POSTAL_CODE", "EMAIL", "NATIONAL_ID", "IBAN", "CREDIT_CARD", "DATE", "MRN"]

TEMPLATES = [
    "{name} was admitted through the emergency department on {date}.",
    "Yesterday {name} called the ward asking about the biopsy results.",
    "The discharge papers were handed to {name} and her daughter.",
    "We discussed the plan with {name}, who agreed to the transfer.",
    "{name} reports that the pain has been better since {date}.",
    "Spoke with {first} about the medication changes this morning.",
    "Pt is a retired teacher from {city}; lives with {name}.",
    "{name}, {phone}, {email}",
    "Patient: {name_cue}",
    "Mr. {name_cue} lives at {street}, {postcode} {city}.",
    "Seen today together with Dr. {last_cue} from cardiology.",
    "Dr. {name_cue} signed the consent form on {date}.",
    "Family meeting held; the son, {name_cue}, will call back at {phone}.",
    "Next of kin: {name_cue} (wife).",
    "Contact: {phone}",
    "Please ring {phone} to reach the family.",
    "Her mobile number is {phone} and her e-mail is {email}.",
    "Faxed the summary to {phone} on {date}.",
    "The patient lives at {street} in {city}.",
    "Postal address: {street}, {postcode} {city}",
    "Address on file: {street}, {city} {postcode}",
    "Moved here from {city} ({postcode}) last spring.",
    "Transferred from the clinic in {city} on {date}.",
    "National ID {national_id} was checked against the insurance card.",
    "ID number: {national_id}",
    "Reimbursement to account {iban} was approved.",
    "Bank details for the refund: IBAN {iban}.",
    "The co-payment was charged to card {credit_card}.",
    "Payment card {credit_card} was declined at the pharmacy.",
    "Date of birth {date}, admitted with dyspnea.",
    "Follow-up visit booked for {date} at 10:30.",
    "MRN {mrn}; bed 12B.",
    "Record no. {mrn} was merged with an older chart.",
    "Send the report to {email} before Friday.",
]
PLAIN = [
    "Vitals stable overnight, afebrile, SpO2 96% on 2 L nasal cannula.",
    "Metoprolol 25 mg PO BID restarted; K 3.8, Mg 2.1.",
    "No acute distress. Lungs clear bilaterally, abdomen soft.",
    "Chest X-ray unchanged from prior; continue diuresis.",
    "Plan: wean FiO2 as tolerated, PT/OT consult, advance diet.",
    "History of Parkinson's disease and type 2 diabetes.",
]


def _national_id(fake: Faker, locale: str) -> str:
    if locale == "en_IN":
        return fake.aadhaar_id()
    if locale == "pt_BR":
        return fake.cpf()
    while True:
        v = fake.ssn()
        if v not in ("078-05-1120", "123-45-6789"):  # Presidio rejects these well-known fakes
            return v


def _value(fake: Faker, rng: random.Random, locale: str, kind: str, person: tuple[str, str]) -> str:
    if kind in ("name", "name_cue"):
        return f"{person[0]} {person[1]}"
    if kind == "first":
        return person[0]
    if kind == "last_cue":
        return person[1]
    if kind == "phone":
        if locale in PHONE_FORMATS:
            return re.sub("#", lambda _: str(rng.randint(0, 9)), rng.choice(PHONE_FORMATS[locale]))
        return fake.phone_number()
    if kind == "street":
        return re.sub(r"\s*\n\s*", ", ", fake.street_address().strip())
    if kind == "postcode":
        return fake.postcode()
    if kind == "city":
        return fake.city()
    if kind == "email":
        return fake.email()
    if kind == "national_id":
        return _national_id(fake, locale)
    if kind == "iban":
        return fake.iban()
    if kind == "credit_card":
        return fake.credit_card_number()
    if kind == "date":
        d = fake.date_between("-30y", "+1y")
        fmt = rng.choice([DATE_FORMATS.get(locale, "%d/%m/%Y"), "%d %B %Y", "%B %d, %Y", "%Y-%m-%d"])
        return d.strftime(fmt)
    if kind == "mrn":
        return rng.choice(["{}", "A{}", "MR-{}"]).format(rng.randint(10**6, 10**9))
    raise KeyError(kind)


def _person(fake: Faker, locale: str) -> tuple[str, str]:
    if locale == "ja_JP":
        return fake.first_romanized_name(), fake.last_romanized_name()
    return fake.first_name(), fake.last_name()


# Locales whose Faker city list is built from a set: its order, and so a seeded city(), follows
# the hash seed. Sorted, the documents are the same in every process.
CITIES_FROM_A_SET = {"it_IT"}


@lru_cache(maxsize=None)
def _faker(locale: str) -> Faker:
    """One Faker per locale per process (building one costs ~0.2 s), reseeded by each caller."""
    fake = Faker(locale)
    if locale in CITIES_FROM_A_SET:
        for provider in fake.get_providers():
            if isinstance(getattr(provider, "cities", None), list):
                provider.cities = sorted(provider.cities)
    return fake


def make_locale_documents(n: int, seed: int = 0) -> list[dict]:
    """n documents: {"id", "text", "locale", "gold": [{"type", "value", "start", "end",
    "safe_harbor_allowed", "locale"}, ...]} with character offsets into text."""
    rng = random.Random(seed)
    fakers = {}
    for i, loc in enumerate(LOCALES):
        fakers[loc] = _faker(loc)
        fakers[loc].seed_instance(seed * 1000 + i)
    locales = list(LOCALES)
    docs = []
    for d in range(n):
        locale = locales[d % len(locales)]
        fake, allowed = fakers[locale], LOCALES[locale]
        usable = [t for t in TEMPLATES if allowed is None or set(re.findall(r"{(\w+)}", t)) <= allowed]
        sentences = rng.sample(usable, rng.randint(3, 6)) + rng.sample(PLAIN, rng.randint(1, 2))
        rng.shuffle(sentences)
        text, gold = "", []
        for s_i, template in enumerate(sentences):
            if s_i:
                text += rng.choice([" ", "\n", "\n\n"])
            person = _person(fake, locale)  # one person per sentence: name and e-mail may differ
            for piece in re.split(r"({\w+})", template):
                if piece.startswith("{"):
                    kind = piece[1:-1]
                    value = _value(fake, rng, locale, kind, person)
                    gold.append({"type": TYPE_OF[kind], "value": value, "start": len(text),
                                 "end": len(text) + len(value), "safe_harbor_allowed": False, "locale": locale})
                    text += value
                else:
                    text += piece
        docs.append({"id": f"loc-{seed}-{d}", "text": text, "locale": locale, "gold": gold})
    return docs


if __name__ == "__main__":
    for doc in make_locale_documents(4, 1):
        print(doc["locale"], "|", doc["text"].replace("\n", " / "))
