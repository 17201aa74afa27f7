"""MEDLINE/PubMed baseline XML (.xml, .xml.gz).

One document per citation abstract: title, then the abstract's sections with their labels.
Each `OtherAbstract` (translations, plain-language summaries) is a document of its own, so
language ID sees the non-English ones. A citation without an abstract is set aside with the
reason `no_abstract`; broken XML is set aside as `malformed_bad_xml` with its line.

The citation's metadata rides along in typed columns, outside the text, the same on each of its
documents: `journal`, `publication_types`, `mesh` and `mesh_major` (MeSH descriptors, those that
are a major topic), and `retraction` (`retracted`, `retraction_notice`, `erratum` or null), which
the `metadata` stage decides on.
"""
from __future__ import annotations

import gzip
import re
import xml.etree.ElementTree as ET
import zlib
from pathlib import Path
from xml.parsers import expat

import pyarrow as pa

from pipeline.readers.batch import RowBatcher

SCHEMA = pa.schema([
    ("id", pa.string()), ("text", pa.string()), ("pmid", pa.string()), ("title", pa.string()),
    ("language", pa.string()), ("year", pa.int32()), ("abstract_type", pa.string()),
    ("journal", pa.string()), ("publication_types", pa.list_(pa.string())), ("mesh", pa.list_(pa.string())),
    ("mesh_major", pa.list_(pa.string())), ("retraction", pa.string()),
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


def _journal(article) -> str | None:
    journal = article.find("Journal")
    if journal is None:
        return None
    name = " ".join((journal.findtext("Title") or journal.findtext("ISOAbbreviation") or "").split())
    return name or None


# What a citation is, from its publication types and its CommentsCorrections links, first match
# wins: a retracted paper, the notice that retracts one, the erratum that corrects one.
RETRACTION = (
    ("retracted", "Retracted Publication", "RetractionIn"),
    ("retraction_notice", "Retraction of Publication", "RetractionOf"),
    ("erratum", "Published Erratum", "ErratumFor"),
)


def _children(parent, name: str, tag: str) -> list:
    """The `tag` children of parent's `name` child (a plain find, not a path: a path goes through
    ElementPath, in Python, for every citation)."""
    holder = parent.find(name)
    return [] if holder is None else [child for child in holder if child.tag == tag]


def _metadata(citation, article) -> dict:
    """The columns a citation's documents share besides its title, year and language."""
    types = [(t.text or "").strip() for t in _children(article, "PublicationTypeList", "PublicationType")]
    mesh, major = [], []
    for heading in _children(citation, "MeshHeadingList", "MeshHeading"):
        name, is_major = None, False
        for part in heading:                     # DescriptorName, then its QualifierNames
            if part.tag == "DescriptorName":
                name = (part.text or "").strip()
            if part.get("MajorTopicYN") == "Y":
                is_major = True
        if name is not None:
            mesh.append(name)
            if is_major:
                major.append(name)
    refs = {c.get("RefType") for c in _children(citation, "CommentsCorrectionsList", "CommentsCorrections")}
    retraction = next((kind for kind, ptype, ref in RETRACTION if ref in refs or ptype in types), None)
    return {"journal": _journal(article), "publication_types": types, "mesh": mesh, "mesh_major": major,
            "retraction": retraction}


def citation_documents(citation):
    pmid = citation.findtext("PMID", default="").strip()
    article = citation.find("Article")
    if article is None or not pmid:
        return None, []
    title = _text(article.find("ArticleTitle"))
    year = _year(article)
    lang = article.findtext("Language", default="")
    docs = []
    meta = None
    abstract = article.find("Abstract")
    body = _sections(abstract) if abstract is not None else ""
    if body:
        meta = _metadata(citation, article)
        text = f"{title}\n\n{body}" if title else body
        docs.append({"id": f"pmid:{pmid}", "text": text, "pmid": pmid, "title": title,
                     "language": lang, "year": year, "abstract_type": "abstract", **meta})
    for k, other in enumerate(citation.findall("OtherAbstract")):
        body = _sections(other)
        if body:
            meta = meta or _metadata(citation, article)
            docs.append({"id": f"pmid:{pmid}:other{k}", "text": body, "pmid": pmid, "title": title,
                         "language": other.get("Language", ""), "year": year,
                         "abstract_type": other.get("Type", "other"), **meta})
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


def _opener(path: Path):
    return gzip.open if path.name.endswith(".gz") else open


def _citations_parsed(path: Path, batcher: RowBatcher, skip: int = 0):
    """Every MedlineCitation element of the file, in order, from ElementTree's incremental
    parser; the first `skip` are parsed but not yielded. Broken XML and a truncated .gz end
    the file with a set-aside record naming the line (what came before is kept)."""
    with _opener(path)(path, "rb") as raw:
        fh = _LineCounter(raw)
        context = ET.iterparse(fh, events=("start", "end"))
        root = None
        try:
            for event, elem in context:
                if root is None:
                    root = elem
                if event != "end" or elem.tag != "MedlineCitation":
                    continue
                if skip:
                    skip -= 1
                else:
                    yield elem
                root.clear()   # keep memory flat over a whole baseline file
        except ET.ParseError as exc:
            line = exc.position[0] if getattr(exc, "position", None) else "?"
            batcher.aside(f"{path}:{line}", "malformed_bad_xml")
        except (EOFError, zlib.error):
            # A truncated .xml.gz: the citations before the cut are kept.
            batcher.aside(f"{path}:{fh.lines}", "malformed_truncated")


class _NotPlain(Exception):
    """The fast path cannot vouch for the rest of the file: the parser takes over."""


CHUNK = 1 << 20
START, END, EMPTY = b"<MedlineCitation", b"</MedlineCitation>", b"<MedlineCitation/>"
# Markup a citation-by-citation cut could misread: a tag inside a comment or CDATA section,
# entities or default attributes declared in the file. (Processing instructions, such as
# MEDLINE's `<?pmcsd ?>`, are dropped by both parsers.)
UNPLAIN = re.compile(rb"<!(?:--|\[CDATA\[|ENTITY|ATTLIST)")
DECLARATION = re.compile(rb'^<\?xml[^>]*?encoding=["\']([A-Za-z0-9._-]+)["\'][^>]*\?>|^<\?xml[^>]*\?>')


def _citations_cut(path: Path, done: list[int]):
    """The same elements as _citations_parsed, found by cutting the byte stream at
    <MedlineCitation ...> ... </MedlineCitation> and parsing each cut alone (in C, with no
    Python event per element: the whole reader 1.5-1.9x faster on MEDLINE). `done[0]` counts
    the citations yielded; anything this path cannot vouch for raises _NotPlain."""
    for raw in _raw_citations(path):
        try:
            elem = ET.fromstring(raw)
        except ET.ParseError:
            raise _NotPlain from None
        yield elem
        done[0] += 1


def _raw_citations(path: Path):
    """Each <MedlineCitation ...> ... </MedlineCitation> of the file, as bytes, in order. The
    bytes between cuts, with an empty element in each cut's place, go through an expat parser
    with no handlers, so the whole file is checked for well-formedness as before: a citation
    is yielded once everything before it passed; anything this path cannot vouch for raises
    _NotPlain."""
    skeleton = expat.ParserCreate()
    with _opener(path)(path, "rb") as fh:
        try:
            buf = fh.read(CHUNK)
        except (EOFError, zlib.error, OSError):
            raise _NotPlain from None
        if buf.startswith((b"\xef\xbb\xbf", b"\xff\xfe", b"\xfe\xff")):
            raise _NotPlain                     # a byte-order mark: decoding is the parser's
        head = DECLARATION.match(buf)
        if head and head.group(1) and head.group(1).lower() not in (b"utf-8", b"utf8"):
            raise _NotPlain
        if head:
            _skeleton_feed(skeleton, buf[:head.end()])
            buf = buf[head.end():]
        eof = False
        while True:
            if UNPLAIN.search(buf):
                raise _NotPlain
            pos = 0
            while True:
                start = buf.find(START, pos)
                if start < 0 or start + len(START) >= len(buf):
                    break
                if buf[start + len(START)] not in b" \t\r\n>":
                    raise _NotPlain
                end = buf.find(END, start)
                if end < 0:
                    break
                end += len(END)
                _skeleton_feed(skeleton, buf[pos:start])
                _skeleton_feed(skeleton, EMPTY)
                yield buf[start:end]
                pos = end
            if eof:
                break
            try:
                more = fh.read(CHUNK)
            except (EOFError, zlib.error, OSError):
                raise _NotPlain from None
            if not more:
                eof = True
            # What is left before the next cut's start goes through now; a cut's start stays.
            keep = buf.find(START, pos)
            if keep < 0:
                keep = max(pos, len(buf) - len(START))
            _skeleton_feed(skeleton, buf[pos:keep])
            buf = buf[keep:] + more
        if START in buf:
            raise _NotPlain                     # a citation without its end tag
        _skeleton_feed(skeleton, buf, final=True)


def _skeleton_feed(parser, data: bytes, final: bool = False) -> None:
    try:
        parser.Parse(data, final)
    except expat.ExpatError:
        raise _NotPlain from None


def _citations(path: Path, batcher: RowBatcher):
    """Each citation's (pmid, documents): from the fast cut when it can vouch for the file; from
    the incremental parser from where it stopped otherwise (broken or unusual XML: the same
    elements, errors and lines as ever)."""
    done = [0]
    try:
        for elem in _citations_cut(path, done):
            yield citation_documents(elem)
    except _NotPlain:
        for elem in _citations_parsed(path, batcher, skip=done[0]):
            yield citation_documents(elem)


# Citations per chunk a parser elsewhere (a worker) turns into documents.
CHUNK_CITATIONS = 500


def parse_chunk(raws: list[bytes]) -> dict:
    """Raw citations (from _raw_citations) to their (pmid, documents), in order, up to the first
    that is not well-formed: "failed_at" is its index in `raws` (None: all were)."""
    out = []
    for i, raw in enumerate(raws):
        try:
            elem = ET.fromstring(raw)
        except ET.ParseError:
            return {"citations": out, "failed_at": i}
        out.append(citation_documents(elem))
    return {"citations": out, "failed_at": None}


def _citations_in_chunks(path: Path, batcher: RowBatcher, parser):
    """The same (pmid, documents) as _citations, in the same order: the cut runs here, the
    parsing of what it cut elsewhere. Every `parser.window` citations go, in chunks of
    CHUNK_CITATIONS, to `parser.submit(chunks)`, whose `.result()` is each chunk's parse_chunk
    result; up to `parser.ahead()` windows are cut before the oldest is handed on (parsed
    meanwhile, or waiting for workers that are starting); `parser.close()` when the reading
    ends. Where the cut cannot vouch for the file, or a citation does not parse, what came
    before it is kept and the incremental parser takes over from there, as in _citations."""
    from collections import deque
    pending: list[bytes] = []
    windows: deque = deque()                     # submitted, not handed on yet, oldest first
    parsed = 0                                   # citations whose documents were yielded
    failed = False

    def submit():
        nonlocal pending
        chunks = [pending[i:i + CHUNK_CITATIONS] for i in range(0, len(pending), CHUNK_CITATIONS)]
        pending = []
        windows.append(parser.submit(chunks))

    def hand_on():
        nonlocal parsed, failed
        for result in windows.popleft().result():
            for item in result["citations"]:
                yield item
                parsed += 1
            if result["failed_at"] is not None:
                failed = True                    # nothing after it is read from these windows
                return

    plain = True
    try:
        try:
            for raw in _raw_citations(path):
                pending.append(raw)
                if len(pending) >= parser.window:
                    submit()
                    while len(windows) > parser.ahead() and not failed:
                        yield from hand_on()
                    if failed:
                        break
        except _NotPlain:
            plain = False                        # what was cut before the fault is still read
        if pending and not failed:
            submit()
        while windows and not failed:
            yield from hand_on()
    finally:
        for window in windows:                   # stopped early (a `limit`, a fault): not wanted
            window.abandon()
        parser.close()                           # every map under way has ended, its files gone
    if failed or not plain:
        for elem in _citations_parsed(path, batcher, skip=parsed):
            yield citation_documents(elem)


def read(path: Path, cfg, batch_size: int, parser=None):
    """The file's documents in batches. `parser`: where the citations are parsed (see
    _citations_in_chunks; the documents and batches are the same as without)."""
    batcher = RowBatcher(SCHEMA, batch_size)
    citations = _citations(path, batcher) if parser is None else _citations_in_chunks(path, batcher, parser)
    def documents():
        for pmid, docs in citations:
            if pmid and not docs:
                batcher.aside(f"pmid:{pmid}", "no_abstract")
            yield from docs

    yield from batcher.each(documents())
