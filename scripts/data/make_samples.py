"""Rebuild data/samples/pubmed21n1298_tiny.xml.gz: the first citations of the default corpus
(data/raw/pubmed21n1298.xml.gz, `make data`), as many as configs/tiny.yaml reads (its first 300
documents), so the tiny run needs no fetched file and ships in the wheel. Deterministic (gzip
without a timestamp); checks that the sample gives the tiny config the same documents."""
from __future__ import annotations

import gzip
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

RAW = ROOT / "data/raw/pubmed21n1298.xml.gz"
SAMPLE = ROOT / "data/samples/pubmed21n1298_tiny.xml.gz"
DOCUMENTS = 300          # configs/tiny.yaml's input.limit


def documents(path: Path, limit: int) -> list[dict]:
    from pipeline.config import InputConfig
    from pipeline.readers import read_documents
    rows = []
    for batch in read_documents(InputConfig(paths=[str(path)], limit=limit), 100):
        rows += batch.table.to_pylist()
    return rows


def main() -> int:
    import xml.etree.ElementTree as ET

    from pipeline.readers.pubmed_xml import citation_documents
    raw = gzip.open(RAW, "rb").read()
    ends = [m.end() for m in re.finditer(rb"</PubmedArticle>", raw)]
    head = raw[:raw.index(b"<PubmedArticle>")]
    starts = [m.start() for m in re.finditer(rb"<PubmedArticle>", raw)]
    n_docs, k = 0, 0
    while n_docs < DOCUMENTS:
        citation = ET.fromstring(raw[starts[k]:ends[k]]).find("MedlineCitation")
        n_docs += len(citation_documents(citation)[1])
        k += 1
    body = head + raw[starts[0]:ends[k - 1]] + b"\n</PubmedArticleSet>\n"
    SAMPLE.parent.mkdir(parents=True, exist_ok=True)
    with open(SAMPLE, "wb") as fh, gzip.GzipFile(filename="", mode="wb", fileobj=fh, mtime=0, compresslevel=9) as gz:
        gz.write(body)
    assert documents(SAMPLE, DOCUMENTS) == documents(RAW, DOCUMENTS), "the sample reads differently"
    print(f"{SAMPLE.relative_to(ROOT)}: {k} citations, {SAMPLE.stat().st_size:,} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
