"""PMC full texts: JATS XML (`.nxml`, PMC's open-access format; `.xml` whose root is an `article`).

One document per article: the title, the abstract, then the body's sections in order, each
section's heading on a line of its own. Left out: the reference list and the rest of the back
matter (acknowledgements, footnotes, appendices), tables, formulas, supplementary material,
author and affiliation metadata; in-text citation markers (`[4]`, `[4]–[7]`, `(Smith et al.,
2001; 12)` as an `xref` to the bibliography) are removed with the brackets and separators they
leave; figure and table references stay as the words they are (`Figure 3A`). Figure and table
captions are dropped, or kept after the paragraph that holds them with `input.captions: true`.

Columns beside the text: `pmid`, `pmcid` (`PMC…`), `doi`, `journal`, `year`, `title`,
`article_type`, `license` (the family: `cc-by`, `cc-by-nc`, `cc0`, `public-domain`, ...; null
where no open licence is stated), `license_url` and `abstract` (the abstract alone). An
article without body text is read as its title and abstract; one with neither is set aside as
`no_text`; a file that is not well-formed XML as `malformed_bad_xml`."""
from __future__ import annotations

import gzip
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pyarrow as pa

from pipeline.readers.batch import RowBatcher

SCHEMA = pa.schema([
    ("id", pa.string()), ("text", pa.string()), ("pmid", pa.string()), ("pmcid", pa.string()),
    ("doi", pa.string()), ("journal", pa.string()), ("year", pa.int32()), ("title", pa.string()),
    ("article_type", pa.string()), ("license", pa.string()), ("license_url", pa.string()),
    ("abstract", pa.string()),
])
XLINK = "{http://www.w3.org/1999/xlink}href"
# Elements whose text never enters the document.
SKIP = {"ref-list", "table-wrap", "table", "disp-formula", "inline-formula", "supplementary-material",
        "fn-group", "ack", "app-group", "glossary", "object-id", "graphic", "media", "alternatives",
        "tex-math", "{http://www.w3.org/1998/Math/MathML}math", "label"}
FLOATS = {"fig", "table-wrap"}
# A removed citation marker is a CITE mark until the text is cleaned: marks with the brackets
# and separators around and between them go (`[4]–[7]`, `(4, 5)`, `,,` between superscripts).
CITE = "\x00"
_MARKS = r"\x00(?:\s*[,;–—\-]?\s*\x00)*"
# A bracket goes with its marks only when it holds nothing else; a cue left alone in brackets
# ("(see [4])", "(reviewed in 7, 8)") goes with them.
_BRACKETED = re.compile(r"\s*[\[(]\s*" + _MARKS + r"\s*[\])]")
_UNBRACKETED = re.compile(r"\s*" + _MARKS)
_BETWEEN_BRACKETS = re.compile(r"(?<=\x00)\s*[\])]\s*[,;–—\-]\s*[\[(]\s*(?=\x00)")   # `[4]–[7]`
_CUE = r"(?:see(?: also)?|e\.g\.|cf\.|i\.e\.|reviewed in|for (?:a )?reviews?,? see|refs?\.?)[\s,:]*"
_CUE_ONLY = re.compile(r"\s*[\[(]\s*" + _CUE + r"[\])]", re.IGNORECASE)
_CUE_LAST = re.compile(r"\s*[;,]\s*(?:" + _CUE + r")?(?=[\])])", re.IGNORECASE)
_SPACE_BEFORE_PUNCT = re.compile(r"\s+([,.;:)\]])")
_SPACES = re.compile(r"[ \t\u00a0\u2009\u200a]+")


def is_jats(head: bytes) -> bool:
    """Whether the start of an XML file is a JATS article (not a MEDLINE citation set)."""
    return b"<article" in head and b"PubmedArticle" not in head


def _inline(elem, captions: bool, out: list[str], floats: list[str]) -> None:
    """The running text of elem into out: citations dropped, skipped elements left out, floats
    (figures) collected into `floats` when captions are kept."""
    tag = elem.tag
    if tag in FLOATS:
        if captions:
            cap = elem.find("caption")
            if cap is not None:
                text: list[str] = []
                _inline(cap, captions, text, floats)
                label = " ".join("".join(elem.findtext("label") or "").split())
                floats.append(((label + ". ") if label else "") + _clean("".join(text)))
        out.append(elem.tail or "")
        return
    if tag in SKIP:
        out.append(elem.tail or "")
        return
    if tag == "xref" and elem.get("ref-type") in ("bibr", "fn", "table-fn", "aff", "corresp"):
        out.append(CITE + (elem.tail or ""))
        return
    out.append(elem.text or "")
    for child in elem:
        _inline(child, captions, out, floats)
    if tag == "title" and not "".join(out).rstrip().endswith((".", ":", "?", "!")):
        out.append(". ")                        # a caption's title: a sentence of its own
    elif tag == "p":
        out.append(" ")
    out.append(elem.tail or "")


def _clean(text: str) -> str:
    text = _SPACES.sub(" ", text.replace("\n", " "))
    if CITE in text:
        text = _BRACKETED.sub("", _BETWEEN_BRACKETS.sub(",", text))
        text = _CUE_LAST.sub("", _CUE_ONLY.sub("", _UNBRACKETED.sub("", text)))
    return _SPACE_BEFORE_PUNCT.sub(r"\1", text).strip()


def _paragraphs(elem, captions: bool) -> list[str]:
    """A section's (or abstract's) text: a heading line per titled subsection, a line per
    paragraph, captions after their paragraph."""
    lines: list[str] = []
    titled = False
    for child in elem:
        tag = child.tag
        if tag == "title":
            title = _clean("".join(child.itertext()))
            if title:
                lines.append(title)
                titled = True
        elif tag == "sec":
            lines += _paragraphs(child, captions)
        elif tag in ("p", "list", "disp-quote", "boxed-text", "statement", "def-list"):
            out: list[str] = []
            floats: list[str] = []
            _inline(child, captions, out, floats)
            text = _clean("".join(out))
            if text:
                lines.append(text)
            lines += floats
        elif tag in FLOATS and captions:
            floats = []
            _inline(child, captions, [], floats)
            lines += floats
    # A heading over nothing kept (a section of supplementary files) goes with it.
    return [] if titled and len(lines) == 1 else lines


_CC_URL = re.compile(r"creativecommons\.org/licenses/([a-z-]+)/", re.I)


def license_family(url: str | None, text: str) -> str | None:
    """The licence as a short family name: cc-by, cc-by-nc, cc-by-sa, cc-by-nc-sa, cc-by-nd,
    cc-by-nc-nd, cc0, public-domain (None: no open licence stated)."""
    if url:
        m = _CC_URL.search(url)
        if m:
            return "cc-" + m.group(1).lower()
        if "publicdomain/zero" in url:
            return "cc0"
        if "publicdomain" in url:
            return "public-domain"
    low = " ".join(text.split()).lower()
    if "creative commons attribution" in low:
        squeezed = low.replace("-", "").replace(" ", "")
        terms = [("nc", "noncommercial"), ("sa", "sharealike"), ("nd", "noderivative")]
        return "-".join(["cc-by"] + [short for short, word in terms if word in squeezed])
    if "public domain" in low:
        return "public-domain"
    return None


def _license(meta) -> tuple[str | None, str | None]:
    """(licence family, the licence's URL) from the article's permissions."""
    if meta is None:
        return None, None
    # Older articles state it outside <permissions>.
    holders = [e for e in (meta.find("permissions"), meta.find("copyright-statement")) if e is not None]
    lic = meta.find("permissions/license")
    url = None
    if lic is not None:
        url = lic.get(XLINK) or next((e.get(XLINK) for e in lic.iter("ext-link") if e.get(XLINK)), None)
    return license_family(url, " ".join("".join(e.itertext()) for e in holders)), url


def article_document(root, captions: bool = False) -> dict | None:
    """The document and columns of one <article> element (None: no text at all)."""
    front = root.find("front")
    meta = front.find("article-meta") if front is not None else None
    ids = {e.get("pub-id-type"): (e.text or "").strip() for e in (meta.findall("article-id") if meta is not None
                                                                      else [])}
    pmcid = ids.get("pmc") or ids.get("pmcid")
    if pmcid and not pmcid.upper().startswith("PMC"):
        pmcid = "PMC" + pmcid
    title = _clean("".join(meta.find("title-group/article-title").itertext())) \
        if meta is not None and meta.find("title-group/article-title") is not None else ""
    abstracts = [a for a in (meta.findall("abstract") if meta is not None else []) if not a.get("abstract-type")]
    abstract = "\n".join(line for a in abstracts for line in _paragraphs(a, captions))
    body = root.find("body")
    sections = _paragraphs(body, captions) if body is not None else []
    text = "\n\n".join(part for part in (title, abstract, "\n".join(sections)) if part)
    if not text.strip():
        return None
    journal = front.findtext("journal-meta/journal-title-group/journal-title") if front is not None else None
    year = None
    for date in meta.findall("pub-date") if meta is not None else []:
        y = (date.findtext("year") or "").strip()
        if y.isdigit():
            year = int(y)
            if date.get("pub-type") in ("epub", "ppub") or date.get("date-type") == "pub":
                break
    family, url = _license(meta)
    doc_id = f"pmc:{pmcid}" if pmcid else (f"pmid:{ids['pmid']}" if ids.get("pmid") else None)
    return {"id": doc_id, "text": text, "pmid": ids.get("pmid") or None, "pmcid": pmcid or None,
            "doi": ids.get("doi") or None, "journal": " ".join(journal.split()) if journal else None, "year": year,
            "title": title or None, "article_type": root.get("article-type"), "license": family, "license_url": url,
            "abstract": abstract or None}


def _open(path: Path):
    return gzip.open(path, "rb") if path.name.endswith(".gz") else open(path, "rb")


def read(path: Path, cfg, batch_size: int):
    """Each <article> of the file (usually one) as a document."""
    batcher = RowBatcher(SCHEMA, batch_size)
    captions = bool(getattr(cfg, "captions", False))
    try:
        with _open(path) as fh:
            root = ET.parse(fh).getroot()
    except ET.ParseError as exc:
        batcher.aside(f"{path}:{exc.position[0]}", "malformed_bad_xml")
        root = None
    articles = [] if root is None else ([root] if root.tag == "article" else list(root.iter("article")))

    def documents():
        for n, article in enumerate(articles):
            doc = article_document(article, captions)
            if doc is None:
                batcher.aside(f"{path}:article{n}", "no_text")
                continue
            if doc["id"] is None:
                doc["id"] = f"{path.name}:{n}"
            yield doc

    yield from batcher.each(documents())
