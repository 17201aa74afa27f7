"""Ways to train the name and place detector differently, each fitted without a source and scored
on it, beside the committed way: what was tried to lower the leak on styles nothing was fitted on.

    python scripts/evaluation/detector_variants.py --out bench/phi_detector_variants.json

For each held-out source (the two worst of the leave-one-source-out table: the web-ner test sets
and LitBank), fitted without it exactly as `eval_phi.py --cross-style` fits (the same examples):
- `committed`: the committed training (pipeline.phi.detector.TRAIN_PARAMS);
- `stronger_l1`: six times the L1 penalty (c1 0.3 for 0.05), which prunes the rarer features a
  style's own names and contexts give;
- `lower_lines`: every fourth training document also as a copy with every other line in lower
  case (informal text drops capitals; the copies teach that a lower-case line can hold a name);
- `upper_words`: every fourth training document written in mixed case also as a copy with about
  one word in ten, names or not, in capitals (emphasis, as informal text writes it);
- `spacy_ner`: a spaCy NER trained from scratch (a blank English pipeline, `tok2vec` and `ner`,
  spaCy's CPU efficiency config, 3,000 steps, seed 0) on the same examples, run on the held-out
  text beside the committed stage's output: how many of the mentions the stage leaves it finds
  (all their word characters inside its PER or LOC spans), and how many other words it marks
  that the stage's output still holds (what adding it would change on top; counted by the
  word's text, so a rough figure).
The CRF variants are the whole stage (`python -m pipeline.stage phi`, clinical profile, default
threshold) with both models trained that way; each also gives the mentions left by how they are
written (hashtag, capitals, lower case, capitalized); and for the committed way, what its
detector alone made of each mention the stage leaves (no span at the default threshold, a span
over part of the mention, or over all of it), and a bound on completing the spans over part
of a mention (completed_spans: what it would cover and add). Models and stage runs are kept in
--work.
"""
from __future__ import annotations

import argparse
import json
import random
import re
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from scripts.evaluation.eval_phi import (  # noqa: E402
    CROSS_STYLES,
    NOTES_CONFIG,
    detector_model,
    git_state,
    run_stage,
    score,
)

STYLES = ("web", "fiction")
CRF_VARIANTS = {"stronger_l1": ({"c1": 0.3}, None), "lower_lines": ({}, "lower_lines"),
                "upper_words": ({}, "upper_words")}
SPACY_STEPS = 3000
SPACY_LABELS = ("PER", "LOC")


def lower_line_copies(examples: list, every: int = 4) -> list:
    """The examples, then every `every`-th one again with its even-numbered lines in lower case
    (only where lower-casing keeps every offset)."""
    copies = []
    for i, (text, spans, ents) in enumerate(examples):
        if i % every:
            continue
        new = "\n".join(line.lower() if k % 2 == 0 else line for k, line in enumerate(text.split("\n")))
        if len(new) == len(text) and new != text:
            copies.append((new, spans, ents))
    return examples + copies


def upper_word_copies(examples: list, every: int = 4, share: float = 0.1) -> list:
    """The examples, then every `every`-th one of those written in mixed case again with about
    `share` of its words, names or not, in capitals (chosen by a generator seeded with the
    document's number): emphasis in capitals, as informal text writes it, says nothing of a name."""
    from pipeline.phi.detector import case_mode
    copies = []
    for i, (text, spans, ents) in enumerate(examples):
        if i % every or case_mode(text) != "mixed":
            continue
        rng = random.Random(i)
        new = re.sub(r"[^\W\d_]+", lambda m: m.group().upper() if rng.random() < share else m.group(), text)
        if len(new) == len(text) and new != text:
            copies.append((new, spans, ents))
    return examples + copies


AUGMENT = {"lower_lines": lower_line_copies, "upper_words": upper_word_copies}


def train_crf(job: tuple) -> dict:
    """Both models of a variant fitted without a style (job: work, variant, style), as the phi
    options that load them, kept like eval_phi's held-out models."""
    work, variant, style = job
    params, augment = CRF_VARIANTS[variant]
    return detector_model(Path(work), f"{variant}-{style}", train_params=params,
                          rewrite=AUGMENT[augment] if augment else None, **CROSS_STYLES[style][2])


def committed_model(job: tuple) -> dict:
    """The committed way, fitted without the style, as eval_phi.py --cross-style keeps it."""
    work, style = job
    name, _, example_args, _ = CROSS_STYLES[style]
    return detector_model(Path(work), name, **example_args)


def train_spacy(job: tuple) -> str:
    """A spaCy NER trained from scratch on the style's training examples (job: work, style)."""
    import spacy
    from spacy.cli.init_config import init_config
    from spacy.cli.train import train
    from spacy.tokens import DocBin

    work, style = job
    folder = Path(work) / f"spacy-{style}"
    best = folder / "model" / "model-best"
    if best.exists():
        return str(best)
    folder.mkdir(parents=True, exist_ok=True)
    from scripts.models.train_phi_detector import examples
    ex = examples(**CROSS_STYLES[style][2])
    random.Random(0).shuffle(ex)
    nlp = spacy.blank("en")
    bins = {"train": DocBin(), "dev": DocBin()}
    for i, (text, spans, _) in enumerate(ex):
        doc = nlp.make_doc(text)
        ents = [doc.char_span(s, e, label=label, alignment_mode="expand") for s, e, label in spans]
        doc.set_ents(spacy.util.filter_spans([e for e in ents if e is not None]))
        bins["dev" if i % 20 == 0 else "train"].add(doc)
    for name, docbin in bins.items():
        docbin.to_disk(folder / f"{name}.spacy")
    config = init_config(lang="en", pipeline=["ner"], optimize="efficiency", gpu=False)
    config.to_disk(folder / "config.cfg")
    t0 = time.process_time()
    train(folder / "config.cfg", folder / "model", overrides={
        "paths.train": str(folder / "train.spacy"), "paths.dev": str(folder / "dev.spacy"),
        "training.max_steps": SPACY_STEPS, "training.eval_frequency": 500, "system.seed": 0})
    print(f"[variants] spacy-{style}: {time.process_time() - t0:.0f} CPU-s", file=sys.stderr, flush=True)
    return str(best)


def written_form(value: str) -> str:
    """How a mention is written: a hashtag, in capitals (two letters or more), in lower case, or
    capitalized (the rest); as a key of the result file."""
    letters = [c for c in value if c.isalpha()]
    if value.startswith("#"):
        return "hashtag"
    if not letters:
        return "no_letters"
    if all(c.islower() for c in letters):
        return "lower_case"
    return "capitals" if len(letters) > 1 and all(c.isupper() for c in letters) else "capitalized"


def _summary(s: dict, gold: dict, leaks: list) -> dict:
    """The scores, and the mentions left by how they are written (those the leak rate counts)."""
    out = {k: s[k] for k in ("mention_leak", "value_leak", "non_phi_tokens", "non_phi_tokens_outside_identifiers",
                             "mention_leak_by_type")}
    forms: dict = {}
    for ms in gold.values():
        for m in ms:
            if not m.get("safe_harbor_allowed"):
                forms.setdefault(m["type"], {}).setdefault(written_form(m["value"]), {"n": 0, "leaked": 0})["n"] += 1
    for leak, _ in mentions_left(gold, leaks):
        forms[leak["type"]][written_form(leak["value"])]["leaked"] += 1
    out["mention_leak_by_form"] = {t: dict(sorted(f.items())) for t, f in sorted(forms.items())}
    return out


def mentions_left(gold: dict, leaks: list) -> list[tuple[dict, list[dict]]]:
    """The mentions the stage leaves that the leak rate counts (not those Safe Harbor allows):
    each leak with the gold entries of its document that have its value and type."""
    out = []
    for leak in leaks:
        same = [m for m in gold[leak["id"]] if m["value"] == leak["value"] and m["type"] == leak["type"]
                and not m.get("safe_harbor_allowed")]
        if leak["mention_leak"] and same:
            out.append((leak, same))
    return out


def _covered(spans: list, start: int, end: int, text: str) -> bool:
    return all(any(a <= start + m.start() < b for a, b in spans) for m in re.finditer(r"\w", text[start:end]))


def _overlaps(spans: list, start: int, end: int) -> bool:
    return any(a < end and start < b for a, b in spans)


def other_words(texts: dict, gold: dict):
    """(document id, word match) for every word outside the gold mentions."""
    for doc_id, text in texts.items():
        labelled = [(m["start"], m["end"]) for m in gold[doc_id]]
        for m in re.finditer(r"\S+", text):
            if not _overlaps(labelled, m.start(), m.end()):
                yield doc_id, m


def detector_spans(model: dict, docs: list) -> dict:
    """{document id: [(start, end)]} of the detector alone (both models) at its default threshold."""
    from pipeline.phi.detector import DEFAULT_THRESHOLD, PhiDetector
    detector = PhiDetector(model["detector_path"], DEFAULT_THRESHOLD, (model["word_free_detector_path"],))
    return {d["id"]: [(s, e) for s, e, _, _ in detector.spans(d["text"])] for d in docs}


def spacy_beside(model: str, docs: list, gold: dict, outputs: dict, leaks: list) -> dict:
    """What the spaCy model finds beside the stage's output: leaked mentions it covers, and
    other words it marks that the output still holds."""
    import spacy
    nlp = spacy.load(model)
    found = {d["id"]: [(e.start_char, e.end_char) for e in doc.ents if e.label_ in SPACY_LABELS]
             for d, doc in zip(docs, nlp.pipe([d["text"] for d in docs], batch_size=32))}
    texts = {d["id"]: d["text"] for d in docs}
    left = mentions_left(gold, leaks)
    recovered = sum(any(_covered(found[leak["id"]], m["start"], m["end"], texts[leak["id"]]) for m in same)
                    for leak, same in left)
    words = marked = still_there = 0
    for doc_id, m in other_words(texts, gold):
        words += 1
        if _overlaps(found[doc_id], m.start(), m.end()):
            marked += 1
            still_there += m.group() in outputs.get(doc_id, "")
    return {"mentions_left_by_the_stage": len(left), "of_them_found_by_spacy": recovered,
            "other_words": words, "other_words_marked_by_spacy": marked,
            "of_them_still_in_the_stage_output": still_there}


def detector_on_left(spans: dict, docs: list, gold: dict, leaks: list) -> dict:
    """For the mentions the stage leaves (those the leak rate counts), what the detector alone
    made of them (`spans`: detector_spans): no span (no token reaching the threshold), a span
    over part of the mention, or over all of it (then a later step of the stage left it)."""
    texts = {d["id"]: d["text"] for d in docs}
    out: dict = {}
    for leak, same in mentions_left(gold, leaks):
        text = texts[leak["id"]]
        what = "no_span"
        for m in same:
            over = [(s, e) for s, e in spans[leak["id"]] if s < m["end"] and e > m["start"]]
            if over:
                what = "span_over_all" if _covered(over, m["start"], m["end"], text) else "span_over_part"
                break
        counts = out.setdefault(leak["type"], {}).setdefault(written_form(leak["value"]), {})
        counts[what] = counts.get(what, 0) + 1
    return {t: dict(sorted(f.items())) for t, f in sorted(out.items())}


# A capitalized word: what completing a span takes in (below).
_CAPITALIZED = re.compile(r"[A-Z][a-z]+(?:['’][a-z]+)?")
_CAPITALIZED_BEFORE = re.compile(r"(?<![A-Za-z])[A-Z][a-z]+(?:['’][a-z]+)?\Z")


def completed_spans(text: str, spans: list, lex, common: bool = False) -> list:
    """The spans, each grown over the capitalized words right beside it (one space apart, on its
    line, not after a sentence's end; with `common`, common English words too, else not): a bound
    on what completing a name or place found in part would give, not a rule of the stage."""
    out = []
    for start, end in spans:
        while True:
            m = _CAPITALIZED.match(text, end + 1)
            if text[end:end + 1] != " " or not m or not common and lex.is_common(m.group().lower()):
                break
            end = m.end()
        while start > 1 and text[start - 1] == " ":
            low = max(0, start - 61)
            m = _CAPITALIZED_BEFORE.search(text, low, start - 1)
            if not m or not common and lex.is_common(m.group().lower()):
                break
            k = m.start() - 1
            while k >= 0 and text[k] == " ":
                k -= 1
            if k < 0 or text[k] in ".!?\n":        # the first word of a sentence
                break
            start = m.start()
        out.append((start, end))
    return out


def completion_bound(spans: dict, docs: list, gold: dict, leaks: list, common: bool) -> dict:
    """Of the mentions the stage leaves with a detector span (`spans`: detector_spans) over part
    of them, how many completed_spans would cover, and how many other words it would add."""
    from pipeline.phi.lexicon import detector_lexicon
    lex = detector_lexicon()
    texts = {d["id"]: d["text"] for d in docs}
    grown = {doc_id: completed_spans(text, spans[doc_id], lex, common) for doc_id, text in texts.items()}
    part = covered = 0
    for leak, same in mentions_left(gold, leaks):
        text = texts[leak["id"]]
        over = [m for m in same if _overlaps(spans[leak["id"]], m["start"], m["end"])]
        if over and not any(_covered(spans[leak["id"]], m["start"], m["end"], text) for m in over):
            part += 1
            covered += any(_covered(grown[leak["id"]], m["start"], m["end"], text) for m in over)
    words = added = 0
    for doc_id, m in other_words(texts, gold):
        words += 1
        added += _overlaps(grown[doc_id], m.start(), m.end()) and not _overlaps(spans[doc_id], m.start(), m.end())
    return {"mentions_left_with_a_span_over_part": part, "of_them_covered_once_completed": covered,
            "other_words": words, "other_words_the_completion_adds": added}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--work", type=Path, required=True, help="models and stage runs (reused by a rerun)")
    ap.add_argument("--styles", default=",".join(STYLES))
    args = ap.parse_args()
    styles = args.styles.split(",")
    work = args.work.resolve()
    work.mkdir(parents=True, exist_ok=True)
    crf_jobs = [(str(work), v, s) for v in CRF_VARIANTS for s in styles]
    with ProcessPoolExecutor(2) as pool:
        committed = pool.map(committed_model, [(str(work), s) for s in styles])
        crf_paths = list(pool.map(train_crf, crf_jobs))
        spacy_paths = list(pool.map(train_spacy, [(str(work), s) for s in styles]))
        committed = list(committed)
    trained = {(v, s): model for (_, v, s), model in zip(crf_jobs, crf_paths)}
    report = {}
    for style, spacy_model in zip(styles, spacy_paths):
        name, load, example_args, trained_on = CROSS_STYLES[style]
        docs, gold, where = load()
        originals = {d["id"]: d["text"] for d in docs}
        models = {"committed": committed[styles.index(style)]}
        for v in CRF_VARIANTS:
            models[v] = trained[(v, style)]
        row = {"input": where, "docs": len(docs), "trained_on": trained_on, "variants": {}}
        for v, model in models.items():
            outputs, _ = run_stage(docs, NOTES_CONFIG, work, f"{name}-{v}", model)
            leaks: list = []
            row["variants"][v] = _summary(score(originals, outputs, gold, leaks=leaks), gold, leaks)
            if v == "committed":
                row["spacy_ner_beside_committed"] = spacy_beside(spacy_model, docs, gold, outputs, leaks)
                spans = detector_spans(model, docs)
                row["committed_detector_on_mentions_left"] = detector_on_left(spans, docs, gold, leaks)
                row["committed_detector_spans_completed"] = {
                    "over_capitalized_words_not_common": completion_bound(spans, docs, gold, leaks, False),
                    "over_any_capitalized_words": completion_bound(spans, docs, gold, leaks, True)}
            print(f"[variants] {name} {v}: {row['variants'][v]['mention_leak']}", file=sys.stderr, flush=True)
        report[name] = row
    report["measured"] = {"command": "python scripts/evaluation/detector_variants.py " + " ".join(sys.argv[1:]),
                          "date": datetime.now(timezone.utc).isoformat(timespec="seconds"), "git": git_state()}
    args.out.write_text(json.dumps(report, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    print(f"written: {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
