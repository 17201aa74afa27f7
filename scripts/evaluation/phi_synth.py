"""A labeled synthetic PHI set: clinical notes and sentences built from templates and Faker
values, with the gold identifier values of each document. Used by scripts/evaluation/eval_phi.py and the
tests. Names come from several Faker locales so that the NER path is tested on names outside
any en_US list."""
from __future__ import annotations

import random
import re

from faker import Faker

NAME_LOCALES = ["en_US", "en_US", "en_GB", "en_IN", "es_MX", "fr_FR", "de_DE", "it_IT", "pl_PL", "nl_NL", "en_IE"]

SENTENCES = [
    "Patient: {name}, MRN: {mrn}, DOB: {dob}.",
    "{name} is a {age}-year-old woman admitted on {date} with chest pain.",
    "Mr. {last} was seen in clinic on {date_long}; he is {age} years old.",
    "Mrs. {last} presented on {date} after a fall at home.",
    "Seen by Dr. {name_doc} on {date_long}.",
    "Please call the patient's daughter, {name}, at {phone}.",
    "Contact number: {phone}. Fax: {fax}.",
    "The patient lives at {street}, {city}, {state} {zip}.",
    "Home address: {street}, {city}, {state} {zip}",
    "Email: {email}",
    "She can be reached by e-mail at {email} or by phone at {phone}.",
    "SSN: {ssn}",
    "Social Security Number {ssn} was verified at registration.",
    "Medical record number {mrn} was used for the encounter.",
    "Med Rec #: {mrn}",
    "Insurance member ID: {member_id}; policy number {policy}.",
    "Payment by card {credit_card} was declined.",
    "Account number: {account}",
    "Refund to IBAN {iban}.",
    "Driver's license #: {dl}",
    "Vehicle VIN: {vin}, licence plate {plate}.",
    "Pacemaker serial number {serial} was interrogated.",
    "The portal account was accessed from IP {ip} at {url}.",
    "Patient portal: {url}",
    "Follow-up scheduled for {date_short}.",
    "Admitted {date_dmy}; discharged {date_iso}.",
    "Electronically signed by {name_doc}, MD on {date}.",
    "{name_doc}, RN",
    "Attending: {name_doc}",
    "Referred by Dr. {last_doc} for evaluation.",
    "Emergency contact: {name} (husband), {phone}.",
    "The {age} y/o patient, {name}, denies tobacco use.",
    "Aged {age}, the patient lives alone in {city}.",
    "{name} was born on {dob} and lives in {city}.",
    "Pt {name} reports improvement since {date_long}.",
    "Spoke with {name} by telephone at {phone} regarding results.",
    "ZIP code: {zip}",
    "Lab accession #: {mrn}",
    "Her husband {name} accompanied her to the visit on {date}.",
    "Case ID: {case_id}",
]
PLAIN = [
    "History of Parkinson's disease and Hodgkin lymphoma in remission.",
    "Gram stain showed gram-positive cocci; Apgar scores were 8 and 9.",
    "Chest X-ray was unremarkable. Started metformin 500 mg twice daily.",
    "Blood pressure 132/84 mmHg, heart rate 78, SpO2 97% on room air.",
    "She was counseled on diet and exercise; HbA1c 7.2%.",
    "No evidence of Crohn's disease on colonoscopy in 2017.",
    "Follow up with cardiology in 3 months.",
    "Down syndrome and Cushing syndrome were excluded.",
]


def _value(fake: Faker, rng: random.Random, kind: str) -> str:
    if kind == "age":
        return str(rng.randint(90, 104))
    if kind == "mrn":
        return rng.choice(["", "", "MR", "A"]) + str(rng.randint(10**5, 10**9)).zfill(rng.choice([7, 8, 9]))
    if kind == "ssn":
        while True:
            v = fake.ssn()
            if v not in ("078-05-1120", "123-45-6789"):
                return v
    if kind == "date":
        d = fake.date_between("-20y", "today")
        return rng.choice([d.strftime("%m/%d/%Y"), d.strftime("%-m/%-d/%y"), d.strftime("%-m/%-d/%Y")])
    if kind == "date_long":
        d = fake.date_between("-20y", "today")
        return rng.choice(
            [d.strftime("%B %-d, %Y"), d.strftime("%b %-d, %Y"), d.strftime("%B %-d") + rng.choice(["st", "th", ""])]
        )
    if kind == "date_short":
        d = fake.date_between("-2y", "+1y")
        return d.strftime("%-m/%-d/%y")
    if kind == "date_dmy":
        d = fake.date_between("-20y", "today")
        return rng.choice([d.strftime("%d-%b-%Y"), d.strftime("%-d %B %Y")])
    if kind == "date_iso":
        return fake.date_between("-20y", "today").isoformat()
    if kind == "dob":
        return fake.date_of_birth(minimum_age=18, maximum_age=100).strftime(rng.choice(["%m/%d/%Y", "%B %-d, %Y"]))
    if kind == "phone":
        return rng.choice(
            [
                fake.phone_number(),
                fake.phone_number(),
                "({}) {}-{}".format(rng.randint(201, 989), rng.randint(200, 999), rng.randint(1000, 9999)),
            ]
        )
    if kind == "fax":
        return "{}-{}-{}".format(rng.randint(201, 989), rng.randint(200, 999), rng.randint(1000, 9999))
    if kind == "member_id":
        return fake.bothify(rng.choice(["???#########", "#########", "??-#######"])).upper()
    if kind == "policy":
        return fake.bothify("##########")
    if kind == "account":
        return fake.bban() if rng.random() < 0.5 else str(rng.randint(10**7, 10**12))
    if kind == "dl":
        return fake.bothify(rng.choice(["?#######", "#########", "?###-####-####"])).upper()
    if kind == "vin":
        return fake.vin() if hasattr(fake, "vin") else fake.bothify("1HGCM8#######????").upper()
    if kind == "plate":
        return fake.license_plate()
    if kind == "serial":
        return fake.bothify(rng.choice(["??######", "SN-########", "#########"])).upper()
    if kind == "case_id":
        return fake.bothify("??-######").upper()
    if kind == "ip":
        return fake.ipv4() if rng.random() < 0.8 else fake.ipv6()
    if kind == "url":
        return fake.url() + rng.choice(["", "patient/" + fake.user_name()])
    if kind == "zip":
        return fake.zipcode()
    if kind == "credit_card":
        return fake.credit_card_number()
    if kind == "iban":
        return fake.iban()
    if kind == "email":
        return fake.email()
    if kind == "street":
        return fake.street_address()
    if kind == "city":
        return fake.city()
    if kind == "state":
        return fake.state_abbr()
    raise KeyError(kind)


TYPE_OF = {
    "name": "NAME",
    "last": "NAME",
    "name_doc": "NAME",
    "last_doc": "NAME",
    "age": "AGE",
    "mrn": "MRN",
    "ssn": "SSN",
    "date": "DATE",
    "date_long": "DATE",
    "date_short": "DATE",
    "date_dmy": "DATE",
    "date_iso": "DATE",
    "dob": "DATE",
    "phone": "PHONE",
    "fax": "PHONE",
    "member_id": "ACCOUNT",
    "policy": "ACCOUNT",
    "account": "ACCOUNT",
    "credit_card": "ACCOUNT",
    "iban": "ACCOUNT",
    "dl": "LICENSE",
    "vin": "VEHICLE_DEVICE",
    "plate": "VEHICLE_DEVICE",
    "serial": "VEHICLE_DEVICE",
    "case_id": "ID",
    "ip": "IP",
    "url": "URL",
    "zip": "ZIP",
    "email": "EMAIL",
    "street": "ADDRESS",
    "city": "CITY",
    "state": None,
}


def make_documents(n: int, seed: int = 0) -> list[dict]:
    """n notes of 3-8 sentences each: {"id", "text", "gold": [(type, value), ...]}."""
    rng = random.Random(seed)
    # Sorted: a set's order follows PYTHONHASHSEED, and each Faker is seeded by its place.
    fakers = {loc: Faker(loc) for loc in sorted(set(NAME_LOCALES))}
    for i, f in enumerate(fakers.values()):
        f.seed_instance(seed * 1000 + i)
    us = fakers["en_US"]
    docs = []
    for d in range(n):
        person = fakers[rng.choice(NAME_LOCALES)]
        doctor = fakers[rng.choice(NAME_LOCALES)]
        first, last = person.first_name(), person.last_name()
        doc_first, doc_last = doctor.first_name(), doctor.last_name()
        fixed = {"name": f"{first} {last}", "last": last, "name_doc": f"{doc_first} {doc_last}", "last_doc": doc_last}
        parts, gold = [], []
        for template in rng.sample(SENTENCES, rng.randint(3, 7)) + rng.sample(PLAIN, 2):
            values = {}
            for key in re.findall(r"{(\w+)}", template):
                values[key] = fixed[key] if key in fixed else _value(us, rng, key)
                if TYPE_OF.get(key):
                    gold.append((TYPE_OF[key], values[key]))
            parts.append(template.format(**values))
        rng.shuffle(parts)
        docs.append({"id": f"synth-{seed}-{d}", "text": "\n".join(parts), "gold": gold})
    return docs
