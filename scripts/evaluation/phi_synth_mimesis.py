"""A test set for the name and place detector from a generator it was not fitted on: mimesis
(22.x, its own multi-locale person and address data) in templates written apart from those of
scripts/models/phi_train_synth.py (the detector's Faker-based training text): referral letters,
telephone encounters, ED triage notes in capitals, discharge summaries in lower case, chat
questions, address blocks. Persons (PERSON), towns, streets and countries (LOCATION) and
facilities (FACILITY) are labelled by span, in the gold format of scripts/evaluation/eval_phi.py.

    python scripts/evaluation/phi_synth_mimesis.py --docs 5        # print a few

`make_mimesis_documents(n, seed)` -> [{"id", "text", "gold": [{type, value, start, end,
safe_harbor_allowed, locale}]}]. Deterministic for a seed."""
from __future__ import annotations

import argparse
import random

LOCALES = ["en", "en-gb", "en-au", "en-ca", "de", "de-at", "de-ch", "fr", "es", "es-mx", "it", "nl", "nl-be",
           "pt", "pt-br", "pl", "sv", "da", "no", "fi", "cs", "sk", "hu", "hr", "tr", "et", "is"]
FACILITY_FORMS = ["{city} General Hospital", "{city} Medical Centre", "{surname} Memorial Hospital",
                  "{city} University Hospital", "Klinikum {city}", "Hôpital {surname}", "Hospital {surname}",
                  "{surname} Clinic", "{city} Infirmary", "St {given}'s Hospital", "{surname} Rehabilitation Centre",
                  "{city} Community Health Centre", "{surname} Nursing Home", "the {city} Heart Institute"]
ROLES = ["GP", "consultant", "registrar", "midwife", "physio", "charge nurse", "on-call doctor", "social worker"]
KIN = ["spouse", "eldest son", "younger daughter", "partner", "mum", "stepfather", "sister-in-law", "carer",
       "next of kin", "flatmate", "godmother"]
CLINICAL = ["BP 142/88, HR 96 regular", "chest clear, no oedema", "started on amoxicillin 500 mg tds",
            "bloods: Hb 11.2, CRP 45", "ECG sinus rhythm, no acute changes", "for review in clinic in 6 weeks",
            "Parkinson's disease stable on co-careldopa", "Wilson's disease excluded", "GCS 15, afebrile",
            "mobilising with frame", "Crohn's disease in remission", "metformin held pre-procedure",
            "Apgar scores 8 and 9", "no known drug allergies", "Gram-negative rods in blood culture"]


def _providers(seed: int):
    from mimesis import Address, Person
    from mimesis.locales import Locale
    out = {}
    for i, code in enumerate(LOCALES):
        loc = Locale(code)
        out[code] = (Person(loc, seed=seed * 100 + i), Address(loc, seed=seed * 100 + i))
    return out


class Builder:
    def __init__(self, locale: str):
        self.locale, self.parts = locale, []

    def add(self, text: str, kind: str | None = None) -> "Builder":
        self.parts.append((text, kind))
        return self

    def build(self, case: str = "mixed") -> tuple[str, list[dict]]:
        text, gold, pos = "", [], 0
        for piece, kind in self.parts:
            piece = piece.upper() if case == "upper" else piece.lower() if case == "lower" else piece
            if kind:
                gold.append({"type": kind, "value": piece, "start": pos, "end": pos + len(piece),
                             "safe_harbor_allowed": False, "locale": self.locale})
            text += piece
            pos += len(piece)
        return text, gold


def make_mimesis_documents(n: int, seed: int = 3) -> list[dict]:
    r = random.Random(seed)
    providers = _providers(seed)
    docs = []
    for i in range(n):
        locale = LOCALES[i % len(LOCALES)]
        person, address = providers[locale]

        def full():
            return person.full_name() if r.random() < 0.6 else f"{person.first_name()} {person.last_name()}"

        def facility():
            form = r.choice(FACILITY_FORMS)
            return form.format(city=address.city(), surname=person.last_name(), given=person.first_name())

        b = Builder(locale)
        kind = i % 6
        if kind == 0:       # referral letter
            b.add("Dear Dr ").add(person.last_name(), "PERSON").add(",\n\nThank you for seeing ")
            b.add(full(), "PERSON").add(", who lives in ").add(address.city(), "LOCATION")
            b.add(f". {r.choice(CLINICAL)}. She is accompanied by her {r.choice(KIN)}, ")
            b.add(person.first_name(), "PERSON").add(".\n\nKind regards,\n").add(full(), "PERSON")
            b.add("\n").add(facility(), "FACILITY").add("\n")
            case = "mixed"
        elif kind == 1:     # telephone encounter
            b.add(f"Telephone call from {r.choice(KIN)} ").add(full(), "PERSON")
            b.add(f" re: medication. {r.choice(CLINICAL)}. Advised to attend ").add(facility(), "FACILITY")
            b.add(f" if worse. Discussed with {r.choice(ROLES)} ").add(person.last_name(), "PERSON").add(".")
            case = "mixed"
        elif kind == 2:     # ED triage, capitals
            b.add("TRIAGE: BROUGHT IN BY AMBULANCE FROM ").add(address.city(), "LOCATION")
            b.add(f". {r.choice(CLINICAL)}. SEEN BY DR ").add(person.last_name(), "PERSON")
            b.add(". NOK ").add(full(), "PERSON").add(f" ({r.choice(KIN)}) INFORMED.")
            case = "upper"
        elif kind == 3:     # discharge summary, lower case
            b.add("discharged home to ").add(address.city(), "LOCATION").add(f" today. {r.choice(CLINICAL)}. ")
            b.add("follow up with ").add(person.first_name(), "PERSON").add(" ").add(person.last_name(), "PERSON")
            b.add(f" ({r.choice(ROLES)}) at ").add(facility(), "FACILITY").add(".")
            case = "lower"
        elif kind == 4:     # a chat question
            b.add(f"My patient {r.choice(['', 'Mr ', 'Mrs '])}").add(full(), "PERSON")
            b.add(f", {r.randint(20, 88)}, was transferred from ").add(facility(), "FACILITY")
            b.add(f" with {r.choice(['sepsis', 'an NSTEMI', 'a hip fracture', 'DKA'])}; what should I check first?")
            case = "mixed"
        else:               # address block
            b.add("Patient details\n").add(full(), "PERSON").add("\n")
            b.add(f"{address.street_number()} ").add(address.street_name(), "LOCATION").add("\n")
            b.add(address.city(), "LOCATION").add(f" {address.postal_code()}\n").add(address.country(), "LOCATION")
            b.add(f"\n{r.choice(CLINICAL)}.")
            case = "mixed"
        text, gold = b.build(case)
        docs.append({"id": f"mimesis-{seed}-{i}", "text": text, "gold": gold})
    return docs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--docs", type=int, default=6)
    ap.add_argument("--seed", type=int, default=3)
    args = ap.parse_args()
    for d in make_mimesis_documents(args.docs, args.seed):
        print(d["text"], "\n", [(g["type"], g["value"]) for g in d["gold"]], "\n---")


if __name__ == "__main__":
    main()
