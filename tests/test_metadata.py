"""MEDLINE's metadata as columns (journal, publication types, MeSH, retraction), checked against
the XML read here on its own, and the `metadata` stage that decides on them, on both shipped
MEDLINE files."""
import gzip
import json
import random
import xml.etree.ElementTree as ET
from collections import Counter

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from conftest import RAW, REFERENCE, read_arrow_dir, run_in_process, write_config, write_jsonl
from pipeline.config import InputConfig
from pipeline.readers import read_documents

FILES = {"pubmed21n1298": RAW, "pubmed20n0014": REFERENCE}
COLUMNS = ["id", "pmid", "language", "journal", "publication_types", "mesh", "mesh_major", "retraction"]


def _flat(elem) -> str:
    return " ".join("".join(elem.itertext()).split())


def _kind(types: set, refs: set):
    """What a record is, as the issue defines it: retracted, a retraction notice, an erratum."""
    if "RetractionIn" in refs or "Retracted Publication" in types:
        return "retracted"
    if "RetractionOf" in refs or "Retraction of Publication" in types:
        return "retraction_notice"
    if "ErratumFor" in refs or "Published Erratum" in types:
        return "erratum"
    return None


def _pubmed_articles(path):
    """Each <PubmedArticle> element of the file, cut at its end tags (not as the reader cuts)."""
    buf = b""
    with gzip.open(path, "rb") as fh:
        while chunk := fh.read(1 << 22):
            *parts, buf = (buf + chunk).split(b"</PubmedArticle>")
            for part in parts:
                yield ET.fromstring(part[part.index(b"<PubmedArticle>"):] + b"</PubmedArticle>")


def _from_xml(path) -> list[dict]:
    """Every citation of the file, read with ElementTree alone: its documents' ids and
    languages (the main abstract, then each OtherAbstract with text, numbered among all of
    them), its journal, publication types, MeSH descriptors (major ones) and RefTypes."""
    out = []
    for record in _pubmed_articles(path):
        for elem in record.findall("MedlineCitation"):
            pmid = (elem.findtext("PMID") or "").strip()
            article = elem.find("Article")
            docs = []
            if any(_flat(t) for t in elem.findall("Article/Abstract/AbstractText")):
                docs.append((f"pmid:{pmid}", article.findtext("Language") or ""))
            for k, other in enumerate(elem.findall("OtherAbstract")):
                if any(_flat(t) for t in other.findall("AbstractText")):
                    docs.append((f"pmid:{pmid}:other{k}", other.get("Language", "")))
            types = [t.text.strip() for t in elem.iter("PublicationType")]
            refs = {c.get("RefType") for c in elem.iter("CommentsCorrections")}
            mesh, major = [], []
            for heading in elem.findall("MeshHeadingList/MeshHeading"):
                descriptor = heading.find("DescriptorName")
                mesh.append(descriptor.text.strip())
                if "Y" in [q.get("MajorTopicYN") for q in heading.findall("QualifierName")] + \
                        [descriptor.get("MajorTopicYN")]:
                    major.append(descriptor.text.strip())
            out.append({"pmid": pmid, "docs": docs, "types": types, "refs": refs, "mesh": mesh, "major": major,
                        "journal": " ".join((elem.findtext("Article/Journal/Title") or "").split())
                        or elem.findtext("Article/Journal/ISOAbbreviation"),
                        "kind": _kind(set(types), refs),
                        "animal_only": "Animals" in mesh and "Humans" not in mesh})
    return out


@pytest.fixture(scope="module")
def medline():
    """Per file: the citations as the XML has them, and the reader's documents."""
    out = {}
    for name, path in FILES.items():
        docs, aside = [], []
        for batch in read_documents(InputConfig(paths=[str(path)]), 2000):
            docs += batch.table.select(COLUMNS).to_pylist()
            aside += batch.set_aside
        out[name] = {"xml": _from_xml(path), "docs": docs, "aside": aside}
    return out


def _aligned(found) -> list[tuple[dict, dict]]:
    """Each document the reader gave, with the citation it comes from (the reader keeps the
    file's order; a PMID can be in a file twice, as two versions of a record)."""
    expected = [(doc_id, c) for c in found["xml"] for doc_id, _ in c["docs"]]
    assert [d["id"] for d in found["docs"]] == [doc_id for doc_id, _ in expected]
    return [(d, c) for d, (_, c) in zip(found["docs"], expected)]


@pytest.mark.parametrize("name", list(FILES))
def test_retractions_notices_and_errata_match_the_xml(medline, name):
    xml, docs = medline[name]["xml"], medline[name]["docs"]
    with_docs = [c for c in xml if c["docs"]]
    for kind in ("retracted", "retraction_notice", "erratum"):
        expected = {c["pmid"] for c in with_docs if c["kind"] == kind}
        assert {d["pmid"] for d in docs if d["retraction"] == kind} == expected, kind
    pairs = _aligned(medline[name])
    assert [d["retraction"] for d, _ in pairs] == [c["kind"] for _, c in pairs]
    animal = {d["pmid"] for d in docs if "Animals" in d["mesh"] and "Humans" not in d["mesh"]}
    assert animal == {c["pmid"] for c in with_docs if c["animal_only"]}
    # The citations without a text (most errata and notices) are set aside, as before.
    assert len([r for _, r in medline[name]["aside"] if r == "no_abstract"]) == len(xml) - len(with_docs)


def test_both_files_hold_what_the_rules_are_for(medline):
    """The counts found in the shipped files (records with documents), so a reader that stops
    finding them fails here rather than passing with empty sets."""
    counts = {name: Counter(c["kind"] for c in f["xml"] if c["docs"]) for name, f in medline.items()}
    assert (counts["pubmed21n1298"]["retracted"], counts["pubmed21n1298"]["retraction_notice"],
            counts["pubmed21n1298"]["erratum"]) == (4, 3, 47)
    assert counts["pubmed20n0014"]["retracted"] == 1
    animal = {name: sum(c["animal_only"] for c in f["xml"] if c["docs"]) for name, f in medline.items()}
    assert animal == {"pubmed21n1298": 46, "pubmed20n0014": 4894}


@pytest.mark.parametrize("name", list(FILES))
def test_journal_publication_types_and_mesh_of_200_records(medline, name):
    first = {}
    for d, c in _aligned(medline[name]):
        first.setdefault(id(c), (d, c))
    records = list(first.values())
    rng = random.Random(7)
    # 150 records at random, and 50 with MeSH headings (most of pubmed21n1298's have none yet).
    sample = rng.sample(records, 150)
    sample += rng.sample([r for r in records if r[1]["mesh"] and r not in sample], 50)
    for doc, c in sample:
        assert (doc["journal"], doc["publication_types"], doc["mesh"], doc["mesh_major"]) == \
            (c["journal"], c["types"], c["mesh"], c["major"]), c["pmid"]
    assert any(c["major"] for _, c in sample) and any(len(c["types"]) > 1 for _, c in sample)
    # Every document of a record (its OtherAbstracts too) carries the record's columns.
    for doc, c in _aligned(medline[name]):
        assert (doc["journal"], doc["publication_types"], doc["mesh"]) == (c["journal"], c["types"], c["mesh"])


def test_the_stage_removes_exactly_those_records_with_their_reasons(medline, tmp_path):
    cfg = write_config(tmp_path / "c.yaml", f"input: {{paths: [{RAW}]}}\noutput_dir: {tmp_path / 'run'}\n"
                       "num_proc: 1\nbatch_size: 1000\nshard_size: 4000\nstages:\n"
                       "  - metadata: {languages: [eng], drop_animal_only: true}\n")
    out = tmp_path / "out"
    code, _, err = run_in_process("stage", "metadata", "--config", cfg, "--input", RAW, "--output", out)
    assert code in (0, None), err
    expected = []
    for c in medline["pubmed21n1298"]["xml"]:
        for doc_id, language in c["docs"]:
            reason = c["kind"] or ("language" if language not in ("eng", "") else None) \
                or ("animal_only" if c["animal_only"] else None)
            if reason:
                expected.append((doc_id, reason))
    removed = read_arrow_dir(out / "removed")
    got = [(i, r) for i, r in zip(removed["id"].to_pylist(), removed["reason"].to_pylist()) if r != "no_abstract"]
    assert sorted(got) == sorted(expected)
    stats = json.loads((out / "stats.json").read_text())
    assert stats["docs_in"] == stats["docs_out"] + sum(stats["removed"].values())
    assert {k: v for k, v in stats["removed"].items() if k != "no_abstract"} == dict(Counter(r for _, r in expected))
    assert set(stats["removed"]) == {"no_abstract", "retracted", "retraction_notice", "erratum", "language",
                                     "animal_only"}
    assert stats["unchecked"] == {}
    kept = read_arrow_dir(out / "data")
    assert kept.num_rows == stats["docs_out"] and not {i for i, _ in expected} & set(kept["id"].to_pylist())
    # The columns ride along, typed, outside the text.
    assert kept.schema.field("mesh").type == pa.list_(pa.string())
    assert kept.schema.field("retraction").type == pa.string() and kept["retraction"].null_count == kept.num_rows


def _stage(tmp_path, path, options):
    cfg = write_config(tmp_path / "c.yaml", f"input: {{paths: [{path}]}}\noutput_dir: {tmp_path / 'run'}\n"
                       f"num_proc: 1\nstages:\n  - metadata: {options}\n")
    return run_in_process("stage", "metadata", "--config", cfg, "--input", path, "--output", tmp_path / "out")


def _run(tmp_path, path, options="{languages: [eng], drop_animal_only: true}"):
    code, _, err = _stage(tmp_path, path, options)
    assert code in (0, None), err
    return json.loads((tmp_path / "out/stats.json").read_text()), read_arrow_dir(tmp_path / "out/data")


def test_jsonl_without_the_columns_passes_through_untouched(tmp_path):
    rows = [{"id": f"n{i}", "text": f"Note {i}: the patient was seen today.", "retraction": "retracted",
             "language": "fre"} for i in range(7)]
    stats, kept = _run(tmp_path, write_jsonl(tmp_path / "notes.jsonl", rows))
    # JSON Lines fields other than id and text ride along in `meta`: no rule has its column.
    assert stats["docs_in"] == stats["docs_out"] == 7 and stats["removed"] == {}
    assert stats["unchecked"] == {"language": 7, "mesh": 7, "retraction": 7}
    assert kept["id"].to_pylist() == [r["id"] for r in rows] and kept["text"].to_pylist() == [r["text"] for r in rows]
    assert [json.loads(m) for m in kept["meta"].to_pylist()] == [{"retraction": "retracted", "language": "fre"}] * 7


def test_columns_of_any_input_and_nulls_in_them(tmp_path):
    """The rules read columns, whatever the input: a Parquet file with them, nulls kept."""
    table = pa.table({
        "id": ["a", "b", "c", "d", "e", "f"],
        "text": ["one", "two", "three", "four", "five", "six"],
        "retraction": ["erratum", None, None, "retraction_notice", None, None],
        "language": ["eng", "ger", None, "eng", "", "eng"],
        "mesh": pa.array([[], ["Animals", "Mice"], ["Animals"], None, ["Animals", "Humans"], None],
                         pa.list_(pa.string())),
    })
    pq.write_table(table, tmp_path / "in.parquet")
    options = "{languages: [eng], drop_animal_only: true, drop_errata: false}"
    stats, kept = _run(tmp_path, tmp_path / "in.parquet", options)
    assert stats["removed"] == {"language": 1, "animal_only": 1, "retraction_notice": 1}
    assert kept["id"].to_pylist() == ["a", "e", "f"]
    assert stats["unchecked"] == {"language": 2, "mesh": 2}
    # A column of another type is an error naming it, not a rule silently skipped.
    (tmp_path / "ints").mkdir()
    pq.write_table(table.set_column(2, "retraction", pa.array([1, 2, 3, 4, 5, 6])), tmp_path / "ints/in.parquet")
    code, _, err = _stage(tmp_path / "ints", tmp_path / "ints/in.parquet", "{}")
    assert code not in (0, None) and "column 'retraction' is int64, not a string column" in err
