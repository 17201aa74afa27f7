"""MEDLINE/PubMed baseline XML (.xml, .xml.gz).

One document per citation abstract: title, then the abstract's sections with their labels.
Each `OtherAbstract` (translations, plain-language summaries) is a document of its own, so
language ID sees the non-English ones. A citation without an abstract is set aside with the
reason `no_abstract`; broken XML is set aside as `malformed_bad_xml` with its line.
"""
from __future__ import annotations

import gzip
import zlib
import xml.etree.ElementTree as ET
from pathlib import Path

import pyarrow as pa

from pipeline.readers.batch import RowBatcher

SCHEMA = pa.schema([
    ("id", pa.string()), ("text", pa.string()), ("pmid", pa.string()), ("title", pa.string()),
    ("language", pa.string()), ("year", pa.int32()), ("abstract_type", pa.string()),
])


def _text(elem) -> str:
    return " ".join("".join(elem.itertext()).split()) if elem is not None else ""


def _sections(abstract) -> str:
    parts = []
    for sec in abstract.findall("AbstractText"):
        body = _text(sec)
        if not body:
            continue
        label = sec.get("Label")
        parts.append(f"{label}: {body}" if label and label.upper() != "UNLABELLED" else body)
    return "\n\n".join(parts)


def _year(article) -> int | None:
    date = article.find("Journal/JournalIssue/PubDate")
    if date is None:
        return None
    y = date.findtext("Year") or (date.findtext("MedlineDate") or "")[:4]
    return int(y) if y and y.isdigit() else None


def _documents(citation):
    pmid = citation.findtext("PMID", default="").strip()
    article = citation.find("Article")
    if article is None or not pmid:
        return None, []
    title = _text(article.find("ArticleTitle"))
    year = _year(article)
    lang = article.findtext("Language", default="")
    docs = []
    abstract = article.find("Abstract")
    body = _sections(abstract) if abstract is not None else ""
    if body:
        text = f"{title}\n\n{body}" if title else body
        docs.append({"id": f"pmid:{pmid}", "text": text, "pmid": pmid, "title": title,
                     "language": lang, "year": year, "abstract_type": "abstract"})
    for k, other in enumerate(citation.findall("OtherAbstract")):
        body = _sections(other)
        if body:
            docs.append({"id": f"pmid:{pmid}:other{k}", "text": body, "pmid": pmid, "title": title,
                         "language": other.get("Language", ""), "year": year,
                         "abstract_type": other.get("Type", "other")})
    return pmid, docs


class _LineCounter:
    """A binary file that counts the lines it has handed out (to place a truncation)."""

    def __init__(self, fh):
        self.fh = fh
        self.lines = 1

    def read(self, n=-1):
        data = self.fh.read(n)
        self.lines += data.count(b"\n")
        return data


def read(path: Path, cfg, batch_size: int):
    batcher = RowBatcher(SCHEMA, batch_size)
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rb") as raw:
        fh = _LineCounter(raw)
        context = ET.iterparse(fh, events=("start", "end"))
        root = None
        try:
            for event, elem in context:
                if root is None:
                    root = elem
                if event != "end" or elem.tag != "MedlineCitation":
                    continue
                pmid, docs = _documents(elem)
                if pmid and not docs:
                    batcher.aside(f"pmid:{pmid}", "no_abstract")
                for doc in docs:
                    out = batcher.add(doc)
                    if out:
                        yield out
                root.clear()   # keep memory flat over a whole baseline file
        except ET.ParseError as exc:
            line = exc.position[0] if getattr(exc, "position", None) else "?"
            batcher.aside(f"{path}:{line}", "malformed_bad_xml")
        except (EOFError, zlib.error):
            # A truncated .xml.gz: the citations before the cut are kept.
            batcher.aside(f"{path}:{fh.lines}", "malformed_truncated")
    out = batcher.flush()
    if out:
        yield out
