"""Sets for the structured-format and literature-profile parts of the PHI evaluation, each scored
on text the rules were not fitted on (scripts/evaluation/eval_phi.py runs them; flags and result keys there):

- `synthetic_mimesis_formats` (--mimesis-formats N): multi-locale structured PHI from mimesis, the
  test generator (scripts/evaluation/phi_synth_mimesis_formats.py); the development generator is Faker
  (scripts/evaluation/phi_synth_locales.py, --synthetic-locales). Clinical config, same scorer as the notes.
- `planted_abstracts` (--planted-abstracts N): real MEDLINE abstracts (pubmed21n1298, taken after
  the first 2,000 so that they are not the --abstracts precision set) with one to three PHI
  sentences planted at sentence boundaries, in case-report, correspondence, address and form
  styles, values from mimesis; run through configs/pubmed.yaml's phi stage (literature profile).
  Counted: planted values that survive verbatim, by type. Precision on the unplanted abstracts is
  the `abstracts` set (--abstracts: eponym survival, token change).
- `legal_ids` (--legal-ids N): legal and administrative sentences (court cases, applications,
  registers, claims) from templates written here, with case/application/file numbers in many
  shapes, dates and names; clinical config. Counted: values left, by type.

Values come from mimesis with its own seeds; ages and years alone are not counted (Safe Harbor
allows them)."""
from __future__ import annotations

import random
import re
from collections import Counter

ABSTRACTS_OFFSET = 2000
# Planted values in closed formats (the literature profile removes them wherever they are).
STRUCTURED = ("PHONE", "EMAIL", "ID", "POSTAL_CODE", "STREET_ADDRESS")

# Sentences about a patient or a contact, as a case report, a letter or a form writes them.
PLANTED = [
    "The patient, {name}, {age}, presented with a two-week history of fever.",
    "Mr. {surname} presented with dyspnea and was admitted on {date}.",
    "Ms. {surname}, a {age}-year-old teacher, was referred for evaluation.",
    "A {age}-year-old woman ({name}) from {city} was admitted to our ward.",
    "{name} (MRN {id}) was referred to our clinic for recurrent syncope.",
    "Her husband, {name}, can be contacted on {phone}.",
    "The patient lives at {street}, {postcode} {city}.",
    "Case report: {name}, born {date}, insurance no. {id}.",
    "The index case ({name}) resided at {street} and was seen on {date}.",
    "Correspondence to {name}, {street}, {postcode} {city}; tel. {phone}; e-mail: {email}.",
    "For the family, contact {name} at {email} or {phone}.",
    "Patient: {name}; address: {street}, {postcode} {city}; phone {phone}.",
    "{name}, a {age}-year-old man, was found unconscious at his home in {city}.",
    "We describe {name}, whose mother ({name2}) had the same mutation.",
    "The boy's father, {first} {surname}, reported that symptoms began on {date}.",
    "Contact details: {street}\n{postcode} {city}\nTel. {phone}",
    "Policy number {id} covered the treatment of {name}.",
    "Dr. {surname} examined the patient at {street} on {date}.",
]
TYPE_OF = {"name": "PERSON", "name2": "PERSON", "first": "PERSON", "surname": "PERSON", "phone": "PHONE",
           "street": "STREET_ADDRESS", "postcode": "POSTAL_CODE", "city": "CITY", "email": "EMAIL", "id": "ID",
           "date": "DATE"}

# Court, registry and claims text: numbers after a case/application/file cue in many shapes.
LEGAL = [
    "The case originated in an application (no. {app}) against the Republic lodged by {name} on {date}.",
    "In the case of {surname} v. the State (application no. {app}), the Court delivered its judgment on {date}.",
    "The applications (nos. {app} and {app2}) were joined by a decision of {date}.",
    "Case No. {case}: {name} v. {name2}, filed {date}.",
    "By a judgment of {date} (file no. {case}), the regional court dismissed the claim of Mr {surname}.",
    "Docket No. {case} was assigned to Judge {surname} on {date}.",
    "The applicant, {name}, was born on {date} and lives in {city}.",
    "Record number {case} was opened for {name} on {date}.",
    "The claimant (claim no. {case}) was represented by {name}, a lawyer practising in {city}.",
    "On {date} the prosecutor's office opened criminal proceedings (case no. {case}).",
    "Reference: {case}. Decision of {date} concerning {name}.",
    "The appeal was registered under number {case} on {date}.",
    "Registration no. {case} of the company owned by {name} was struck off on {date}.",
    "The administrative file (Az. {case}) shows that {name} was notified on {date}.",
    "Index No. {case}, {name} against the city, was settled on {date}.",
]
LEGAL_TYPE_OF = {"name": "PERSON", "name2": "PERSON", "surname": "PERSON", "city": "CITY", "date": "DATE",
                 "app": "CASE_NUMBER", "app2": "CASE_NUMBER", "case": "CASE_NUMBER"}
LEGAL_DATES = ["%d %B %Y", "%B %d, %Y", "%d.%m.%Y", "%d/%m/%Y", "%Y-%m-%d", "%-d %b %Y", "%d %B, %Y"]


def _case_number(rng: random.Random) -> str:
    shapes = [
        lambda: f"{rng.randint(100, 99999)}/{rng.randint(0, 99):02d}",                    # 36244/06
        lambda: f"{rng.randint(1, 9)}:{rng.randint(10, 25)}-cv-{rng.randint(100, 99999):05d}",
        lambda: f"{rng.randint(10, 99)}-{rng.randint(100, 9999)}",
        lambda: f"C-{rng.randint(1, 999)}/{rng.randint(0, 25):02d}",
        lambda: f"{rng.choice('IVX')}{rng.choice(['', 'I', 'V'])} ZR {rng.randint(1, 999)}/{rng.randint(0, 25):02d}",
        lambda: f"{rng.randint(1, 9)} K {rng.randint(1, 9999)}/{rng.randint(0, 25):02d}",
        lambda: f"{rng.choice(['HQ', 'CV', 'KB', 'AP'])}{rng.randint(10, 25)}X{rng.randint(1000, 99999):05d}",
        lambda: f"{rng.randint(2000, 2025)}-CV-{rng.randint(100, 99999)}",
        lambda: f"{rng.randint(100000, 999999)}/{rng.randint(2000, 2025)}",
        lambda: f"2-{rng.randint(100, 9999)}/{rng.randint(2000, 2025)}",
        lambda: f"{rng.randint(10000000, 99999999)}",
        lambda: f"{rng.choice(['A', 'B', 'R'])}{rng.randint(1000, 999999)}",
    ]
    return rng.choice(shapes)()


def _fill(template: str, values, types: dict, locale: str) -> tuple[str, list[dict]]:
    text, gold = "", []
    for piece in re.split(r"({\w+})", template):
        if not piece.startswith("{"):
            text += piece
            continue
        kind = piece[1:-1]
        value = values(kind)
        if kind in types:
            if kind in ("name", "name2"):        # a full name: its two words are two values
                first, last = value.split(" ", 1)
                gold.append({"type": "PERSON", "value": first, "start": len(text), "end": len(text) + len(first),
                             "safe_harbor_allowed": False, "locale": locale})
                gold.append({"type": "PERSON", "value": last, "start": len(text) + len(first) + 1,
                             "end": len(text) + len(value), "safe_harbor_allowed": False, "locale": locale})
            else:
                gold.append({"type": types[kind], "value": value, "start": len(text), "end": len(text) + len(value),
                             "safe_harbor_allowed": False, "locale": locale})
        text += value
    return text, gold


def _providers(seed: int):
    from mimesis import Address, Datetime, Person
    from mimesis.locales import Locale

    from scripts.evaluation.phi_synth_mimesis_formats import LOCALES
    return {loc: (Person(Locale(loc), seed=seed * 7919 + i), Address(Locale(loc), seed=seed * 7919 + i + 300),
                  Datetime(seed=seed * 7919 + i + 600)) for i, loc in enumerate(LOCALES)}


def _values(rng: random.Random, person, address, dt, date_layouts):
    def value(kind: str) -> str:
        if kind in ("name", "name2"):
            return f"{person.first_name()} {person.last_name()}"
        if kind == "first":
            return person.first_name()
        if kind == "surname":
            return person.last_name()
        if kind == "age":
            return str(rng.randint(18, 85))
        if kind == "phone":
            return person.telephone()
        if kind == "street":
            return address.address()
        if kind == "postcode":
            return address.postal_code()
        if kind == "city":
            return address.city()
        if kind == "email":
            return person.email()
        if kind == "id":
            from scripts.evaluation.phi_synth_mimesis_formats import ID_MASKS, _ident
            return _ident(rng, rng.choice(ID_MASKS))
        if kind == "date":
            text = dt.date(start=1930, end=2026).strftime(rng.choice(date_layouts))
            return text.lower() if rng.random() < 0.15 else text
        if kind in ("app", "app2", "case"):
            return _case_number(rng)
        raise KeyError(kind)
    return value


def make_planted_abstracts(abstracts: list[str], seed: int = 0) -> list[dict]:
    """Each abstract with one to three PHI sentences inserted at sentence boundaries."""
    from scripts.evaluation.phi_synth_mimesis_formats import DATE_LAYOUTS, LOCALES
    rng = random.Random(seed)
    providers = _providers(seed)
    docs = []
    for d, abstract in enumerate(abstracts):
        locale = LOCALES[d % len(LOCALES)]
        values = _values(rng, *providers[locale], DATE_LAYOUTS)
        cuts = [m.end() for m in re.finditer(r"[.!?](?=\s+[A-Z])", abstract)] or [len(abstract)]
        chosen = sorted(rng.sample(cuts, min(len(cuts), rng.randint(1, 3))))
        text, gold, last = "", [], 0
        for cut in chosen:
            text += abstract[last:cut] + " "
            sentence, g = _fill(rng.choice(PLANTED), values, TYPE_OF, locale)
            for e in g:
                e["start"] += len(text)
                e["end"] += len(text)
            gold += g
            text += sentence
            last = cut
        text += abstract[last:]
        docs.append({"id": f"planted-{seed}-{d}", "text": text, "gold": gold})
    return docs


def make_legal_documents(n: int, seed: int = 0) -> list[dict]:
    """n documents of two to four legal/administrative sentences."""
    from scripts.evaluation.phi_synth_mimesis_formats import LOCALES
    rng = random.Random(seed)
    providers = _providers(seed + 17)
    docs = []
    for d in range(n):
        locale = LOCALES[d % len(LOCALES)]
        values = _values(rng, *providers[locale], LEGAL_DATES)
        text, gold = "", []
        for s_i, template in enumerate(rng.sample(LEGAL, rng.randint(2, 4))):
            if s_i:
                text += rng.choice([" ", "\n"])
            sentence, g = _fill(template, values, LEGAL_TYPE_OF, locale)
            for e in g:
                e["start"] += len(text)
                e["end"] += len(text)
            gold += g
            text += sentence
        docs.append({"id": f"legal-{seed}-{d}", "text": text, "gold": gold})
    return docs


def rate(n: int, k: int, key: str = "leaked") -> dict:
    return {"n": n, key: k, "rate": round(k / n, 5) if n else 0.0}


def _occurrences(value: str, text: str) -> int:
    return len(re.findall(rf"(?<![A-Za-z0-9]){re.escape(value)}(?![A-Za-z0-9])", text, re.IGNORECASE))


def value_leaks(docs: list[dict], outputs: dict) -> dict:
    """Planted values that survive verbatim (case-insensitive, as a whole token run), by type. A
    value that the rest of the text also holds ("Long", "case") leaks when the output holds it
    more often than the text without the planted values does."""
    total, leaked = Counter(), Counter()
    for doc in docs:
        rest, last = "", 0
        for e in sorted(doc["gold"], key=lambda e: e["start"]):
            rest += doc["text"][last:e["start"]] + " "
            last = max(last, e["end"])
        rest += doc["text"][last:]
        for e in doc["gold"]:
            total[e["type"]] += 1
            leaked[e["type"]] += _occurrences(e["value"], outputs[doc["id"]]) > _occurrences(e["value"], rest)
    return {"gold_values": sum(total.values()), "value_leak": rate(sum(total.values()), sum(leaked.values())),
            "value_leak_by_type": {t: rate(total[t], leaked[t]) for t in sorted(total)}}


def planted_abstracts(n: int, seed: int, work, run_stage, real_abstracts, config: str) -> dict:
    """`run_stage(docs, config, work, name)` and `real_abstracts(n)`: eval_phi.py's."""
    texts = real_abstracts(ABSTRACTS_OFFSET + n)[ABSTRACTS_OFFSET:]
    docs = make_planted_abstracts(texts, seed)
    outputs, meta = run_stage(docs, config, work, "planted_abstracts")
    leaks = value_leaks(docs, outputs)
    structured = [leaks["value_leak_by_type"][t] for t in STRUCTURED if t in leaks["value_leak_by_type"]]
    n, left = sum(r["n"] for r in structured), sum(r["leaked"] for r in structured)
    return {"docs": len(docs), "seed": seed, "config": config, "source": "data/raw/pubmed21n1298.xml.gz",
            "offset": ABSTRACTS_OFFSET, **leaks, "structured_types": list(STRUCTURED),
            "structured_value_leak": {"n": n, "leaked": left, "rate": round(left / n, 5) if n else 0.0}, **meta,
            "docs_per_cpu_second": round(len(docs) / meta["cpu_seconds"], 2)}


def legal_ids(n: int, seed: int, config: str, work, run_stage) -> dict:
    docs = make_legal_documents(n, seed)
    outputs, meta = run_stage(docs, config, work, "legal_ids")
    return {"docs": len(docs), "seed": seed, "config": config, **value_leaks(docs, outputs), **meta}


def markdown(report: dict) -> list[str]:
    lines = []
    for key, title in (("planted_abstracts", "planted abstracts (literature profile)"),
                       ("legal_ids", "legal/administrative templates")):
        sec = report.get(key)
        if not sec:
            continue
        if "error" in sec:
            lines.append(f"\n{title}: error: {sec['error'][:200]}")
            continue
        lines += [f"\n### {title} ({sec['docs']} docs, {sec['config']})\n", "| type | n | values left |",
                  "|---|---:|---:|"]
        for t, r in sec["value_leak_by_type"].items():
            lines.append(f"| {t} | {r['n']} | {r['leaked']} ({100 * r['rate']:.2f} %) |")
        r = sec["value_leak"]
        lines.append(f"| all | {r['n']} | {r['leaked']} ({100 * r['rate']:.2f} %) |")
    return lines


if __name__ == "__main__":
    import sys

    sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[2]))   # the checkout
    for doc in make_legal_documents(3, 1):
        print(doc["text"], "\n", [(e["type"], e["value"]) for e in doc["gold"]], "\n")
