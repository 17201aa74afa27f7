"""Philter (philter-lite 0.6.0, BSD-3) as an anchor for scripts/evaluation/eval_phi.py. Runs with
.venv-philter's Python (bench/requirements-philter.txt; `make .venv-philter/.installed`).

    .venv-philter/bin/python scripts/evaluation/philter_anchor.py install-tagger
    .venv-philter/bin/python scripts/evaluation/philter_anchor.py run --input notes.jsonl --output out.jsonl

install-tagger: Philter tags parts of speech with NLTK's averaged perceptron, whose model
(`averaged_perceptron_tagger_eng`) no registry ships as NLTK data. textblob-aptagger 0.2.0
carries the weights of the same tagger (Honnibal's averaged perceptron, Penn tags) as a
pickle; this writes them as the three JSON files NLTK loads, into .venv-philter/nltk_data
(on NLTK's default path for that interpreter). textblob's bracket tags -LRB-/-RRB- become
NLTK's ( and ).

run: Philter's shipped config (configs/philter_delta.toml), asterisk output (every character
of a word Philter does not keep becomes *), one JSON line {"id", "text"} per input line, in
input order. Its name regexes `[A-Z]\\'?[A-Z]?[\\-aA-zZ]+` backtrack exponentially on runs of
ALL-CAPS words; the `[A-Z]?` is redundant (the next class matches the same letters), so it is
dropped in memory before the filters compile: same matches, about 25x faster. Philter's own
files are not changed."""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import pickle
import sys
from pathlib import Path

SLOW_NAME_PIECE = "\\'?[A-Z]?[\\-aA-zZ]+"
FAST_NAME_PIECE = "\\'?[\\-aA-zZ]+"
TAGGER = "averaged_perceptron_tagger_eng"
BRACKETS = {"-LRB-": "(", "-RRB-": ")"}


def install_tagger() -> Path:
    spec = importlib.util.find_spec("textblob_aptagger")
    pickle_path = Path(list(spec.submodule_search_locations)[0]) / "trontagger-0.1.0.pickle"
    with open(pickle_path, "rb") as f:
        weights, tagdict, classes = pickle.load(f, encoding="latin1")  # a Python 2 pickle
    weights = {feat: {BRACKETS.get(t, t): w for t, w in by_tag.items()} for feat, by_tag in weights.items()}
    tagdict = {word: BRACKETS.get(t, t) for word, t in tagdict.items()}
    classes = sorted(BRACKETS.get(t, t) for t in classes)
    out = Path(sys.prefix) / "nltk_data" / "taggers" / TAGGER
    out.mkdir(parents=True, exist_ok=True)
    for attr, obj in (("weights", weights), ("tagdict", tagdict), ("classes", classes)):
        tmp = out / f"{TAGGER}.{attr}.json.tmp"
        tmp.write_text(json.dumps(obj), encoding="utf-8")
        os.replace(tmp, out / f"{TAGGER}.{attr}.json")
    return out


def _patch_regexes(node) -> int:
    """Drop the redundant `[A-Z]?` from every name regex in Philter's regex table, in place."""
    n = 0
    for key, value in node.items():
        if isinstance(value, dict):
            n += _patch_regexes(value)
        elif isinstance(value, str) and SLOW_NAME_PIECE in value:
            node[key] = value.replace(SLOW_NAME_PIECE, FAST_NAME_PIECE)
            n += 1
    return n


def run(input_path: str, output_path: str) -> None:
    import philter_lite
    from philter_lite.filters import filter_db

    patched = _patch_regexes(filter_db.regex_db)
    config = Path(philter_lite.__file__).parent / "configs" / "philter_delta.toml"
    filters = philter_lite.load_filters(str(config))
    n = 0
    tmp = output_path + ".tmp"
    with open(input_path, encoding="utf-8") as fin, open(tmp, "w", encoding="utf-8") as fout:
        for line in fin:
            if not line.strip():
                continue
            doc = json.loads(line)
            include_map, _, _ = philter_lite.detect_phi(doc["text"], patterns=filters)
            text = philter_lite.transform_text_asterisk(doc["text"], include_map)
            fout.write(json.dumps({"id": doc["id"], "text": text}) + "\n")
            n += 1
    os.replace(tmp, output_path)
    print(json.dumps({"docs": n, "patched_regexes": patched, "philter_lite": philter_lite.__version__}))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("install-tagger")
    r = sub.add_parser("run")
    r.add_argument("--input", required=True)
    r.add_argument("--output", required=True)
    args = ap.parse_args()
    if args.cmd == "install-tagger":
        print(install_tagger())
    else:
        run(args.input, args.output)
    return 0


if __name__ == "__main__":
    sys.exit(main())
