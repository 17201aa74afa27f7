"""Readers: every format, and every kind of malformed record survived, counted, located."""
import gzip
import json
import re

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import zstandard

from conftest import RAW, read_arrow_dir, run_cli, write_config
from pipeline.config import InputConfig
from pipeline.readers import read_documents


def _read(paths, **kw):
    docs, aside = [], []
    for b in read_documents(InputConfig(paths=[str(p) for p in paths], **kw), 3):
        docs.extend(b.table.to_pylist())
        aside.extend(b.set_aside)
    return docs, aside


def test_jsonl_malformed_records_are_counted_with_file_and_line(tmp_path):
    path = tmp_path / "in.jsonl"
    lines = [b'{"id": "a", "text": "good one", "source": "x"}', b'{"id": "b", "text": ',        # bad json
             b'["not", "an", "object"]', b'{"id": "c"}', b'{"id": "d", "text": 42}',
             b'{"id": "e", "text": "caf\xe9"}', b'', b'{"text": "no id here"}']
    path.write_bytes(b"\n".join(lines) + b"\n")
    docs, aside = _read([path])
    assert [d["id"] for d in docs] == ["a", "in.jsonl:8"]
    assert json.loads(docs[0]["meta"]) == {"source": "x"}
    assert aside == [(f"{path}:2", "malformed_bad_json"), (f"{path}:3", "malformed_not_an_object"),
                     (f"{path}:4", "malformed_missing_text"), (f"{path}:5", "malformed_non_string_text"),
                     (f"{path}:6", "malformed_undecodable")]


def test_json_arrays_csv_and_tsv_with_their_fields_and_malformed_rows(tmp_path):
    rows = [{"pmid": "007", "abstract": f"Abstract {i}, with a comma.\nAnd a second line.", "year": 2020}
            for i in range(4)]
    (tmp_path / "a.json").write_text(json.dumps(rows + [["not an object"], {"pmid": "9"}]))
    docs, aside = _read([tmp_path / "a.json"], id_field="pmid", text_field="abstract")
    assert [d["text"] for d in docs] == [r["abstract"] for r in rows] and docs[0]["id"] == "007"
    assert aside == [(f"{tmp_path / 'a.json'}:[4]", "malformed_not_an_object"),
                     (f"{tmp_path / 'a.json'}:[5]", "malformed_missing_text")]
    (tmp_path / "lines.json").write_text("\n".join(json.dumps(r) for r in rows))      # JSON Lines named .json
    assert _read([tmp_path / "lines.json"], id_field="pmid", text_field="abstract")[0] == docs
    csv_text = "pmid,abstract,year\n" + "".join(f'{r["pmid"]},"{r["abstract"]}",2020\n' for r in rows)
    (tmp_path / "b.csv").write_text(csv_text + "9,one,field,too,many\n10,,2020\n")
    got, aside = _read([tmp_path / "b.csv"], id_field="pmid", text_field="abstract")
    assert [(d["id"], d["text"], d["year"]) for d in got] == [("007", r["abstract"], "2020") for r in rows]
    assert aside == [(f"{tmp_path / 'b.csv'}:bad-row1", "malformed_csv_row"),
                     (f"{tmp_path / 'b.csv'}:row4", "malformed_missing_text")]
    with gzip.open(tmp_path / "c.tsv.gz", "wt") as fh:
        fh.write("id\ttext\nn1\tfirst note\nn2\tsecond note\n")
    assert [(d["id"], d["text"]) for d in _read([tmp_path / "c.tsv.gz"])[0]] == [("n1", "first note"),
                                                                               ("n2", "second note")]
    from pipeline.errors import InputError
    with pytest.raises(InputError, match="no column 'body' .*columns: pmid, abstract, year"):
        _read([tmp_path / "b.csv"], text_field="body")


def test_compressed_jsonl_parquet_text_and_hf(tmp_path):
    rows = [{"id": f"r{i}", "text": f"document number {i}"} for i in range(5)]
    body = "".join(json.dumps(r) + "\n" for r in rows).encode()
    (tmp_path / "a.jsonl.gz").write_bytes(gzip.compress(body))
    (tmp_path / "b.jsonl.zst").write_bytes(zstandard.ZstdCompressor().compress(body))
    pq.write_table(pa.table({"id": [r["id"] for r in rows] + ["r5"], "text": [r["text"] for r in rows] + [None],
                             "year": list(range(6))}), tmp_path / "c.parquet")
    (tmp_path / "d.txt").write_text("one\n\ntwo\n")
    from datasets import Dataset
    Dataset.from_list(rows).save_to_disk(str(tmp_path / "hf"))
    for name in ("a.jsonl.gz", "b.jsonl.zst"):
        docs, aside = _read([tmp_path / name])
        assert [d["text"] for d in docs] == [r["text"] for r in rows] and not aside
    docs, aside = _read([tmp_path / "c.parquet"])
    assert (
        len(docs) == 5
        and docs[0]["year"] == 0
        and aside == [(f"{tmp_path / 'c.parquet'}:row5", "malformed_missing_text")]
    )
    docs, _ = _read([tmp_path / "d.txt"])
    assert docs == [{"id": str(tmp_path / "d.txt"), "text": "one\n\ntwo\n"}]
    docs, _ = _read([tmp_path / "d.txt"], text_unit="line")
    assert [d["text"] for d in docs] == ["one", "two"]
    docs, _ = _read([tmp_path / "hf"])
    assert [d["id"] for d in docs] == [r["id"] for r in rows]


def test_pubmed_xml_sections_languages_and_other_abstracts():
    docs, aside = [], []
    for b in read_documents(InputConfig(paths=[str(RAW)], limit=2000), 500):
        docs.extend(b.table.to_pylist())
        aside.extend(b.set_aside)
    first = docs[0]
    assert first["id"] == f"pmid:{first['pmid']}" and first["text"].startswith(first["title"])
    labelled = [d for d in docs if "\n\nBACKGROUND: " in d["text"] or "\n\nMETHODS: " in d["text"]]
    assert labelled, "structured abstracts keep their section labels"
    assert all(r == "no_abstract" for _, r in aside) and aside
    assert all(isinstance(d["year"], int) for d in docs if d["year"] is not None)


def test_malformed_input_survives_a_run_and_is_counted(tmp_path):
    path = tmp_path / "in.jsonl"
    path.write_bytes(
        b'{"id": "a", "text": "A perfectly fine document about the heart."}\n{"id": "b", "text": \n'
        b'{"id": "c", "text": "   "}\n{"id": "d", "text": "caf\xe9"}\n'
    )
    cfg = write_config(
        tmp_path / "c.yaml",
        f"input: {{paths: [{path}]}}\noutput_dir: {tmp_path / 'run'}\nstages: [normalize, dedup_exact]\n",
    )
    run_cli("-m", "pipeline.stage", "normalize", "--config", str(cfg))
    stats = json.loads((tmp_path / "run/stages/01_normalize/stats.json").read_text())
    assert stats["docs_in"] == 4 and stats["docs_out"] == 1
    assert stats["removed"] == {"empty_text": 1, "malformed_bad_json": 1, "malformed_undecodable": 1}
    removed = read_arrow_dir(tmp_path / "run/stages/01_normalize/removed").to_pylist()
    assert {r["id"] for r in removed} == {f"{path}:2", "c", f"{path}:4"}
    assert "text" not in removed[0]  # no text in removed/ unless asked


# ---- PubMed XML: the citation cut and the incremental parser give the same documents -------

TINY = RAW.parent.parent / "samples/pubmed21n1298_tiny.xml.gz"


def _pubmed(path):
    from pathlib import Path

    from pipeline.readers import pubmed_xml

    docs, aside = [], []
    for b in pubmed_xml.read(Path(path), None, 100):
        docs.extend(b.table.to_pylist())
        aside.extend(b.set_aside)
    return docs, aside


def _pubmed_parsed(path):
    """The reference: ElementTree's incremental parser alone (the reader before the cut)."""
    from pathlib import Path

    from pipeline.readers import pubmed_xml

    batcher = pubmed_xml.RowBatcher(pubmed_xml.SCHEMA, 100)
    docs = []
    for elem in pubmed_xml._citations_parsed(Path(path), batcher):
        pmid, found = pubmed_xml.citation_documents(elem)
        if pmid and not found:
            batcher.aside(f"pmid:{pmid}", "no_abstract")
        docs.extend(found)
    return docs, batcher.set_aside


def _cut_count(path):
    """How many citations the fast cut yields before it hands over (all of them: it did not)."""
    from pathlib import Path

    from pipeline.readers import pubmed_xml

    done = [0]
    try:
        for _ in pubmed_xml._citations_cut(Path(path), done):
            pass
    except pubmed_xml._NotPlain:
        return done[0], False
    return done[0], True


def _write_xml(path, data: bytes):
    if str(path).endswith(".gz"):
        path.write_bytes(gzip.compress(data, mtime=0))
    else:
        path.write_bytes(data)
    return path


def test_pubmed_citation_cut_gives_the_parsers_documents(tmp_path):
    xml = gzip.decompress(TINY.read_bytes())
    # Markup the cut must read as the parser does: entities, character references, inline
    # markup, a processing instruction, CRLF line ends, attributes in single quotes.
    first = xml.index(b"<AbstractText")
    first = xml.index(b">", first) + 1
    xml = xml[:first] + b"&lt;5 &amp; &#x3b1;-<i>beta</i>\r\n<sup>2</sup><?pmcsd ?> " + xml[first:]
    xml = xml.replace(
        b'<MedlineCitation Status="MEDLINE" Owner="NLM">', b"<MedlineCitation Status='MEDLINE' Owner='NLM'\n>", 3
    )
    for name in ("plain.xml.gz", "plain.xml"):
        path = _write_xml(tmp_path / name, xml)
        assert _cut_count(path) == (xml.count(b"</MedlineCitation>"), True)
        docs, aside = _pubmed(path)
        assert (docs, aside) == _pubmed_parsed(path)
        assert len(docs) > 250 and ": <5 & \u03b1-beta 2 " in docs[0]["text"]


def test_pubmed_unusual_xml_goes_to_the_parser_from_where_the_cut_stopped(tmp_path):
    xml = gzip.decompress(TINY.read_bytes())
    middle = xml.index(b"<PubmedArticle>", len(xml) // 2)
    variants = {
        "comment": xml[:middle] + b"<!-- <MedlineCitation><PMID>1</PMID></MedlineCitation> -->" + xml[middle:],
        "cdata": xml[:middle] + b"<X><![CDATA[</MedlineCitation>]]></X>" + xml[middle:],
        "latin1": xml.replace(b'encoding="utf-8"', b'encoding="ISO-8859-1"', 1),
        "entity": re.sub(
            rb"<!DOCTYPE[^>]*>", b"<!DOCTYPE PubmedArticleSet [<!ENTITY nlm 'NLM'>]>", xml, count=1
        ).replace(b"<AbstractText>", b"<AbstractText>&nlm; ", 1),
    }
    for name, data in variants.items():
        path = _write_xml(tmp_path / f"{name}.xml.gz", data)
        done, whole = _cut_count(path)
        assert not whole, name
        assert _pubmed(path) == _pubmed_parsed(path), name
    assert _cut_count(tmp_path / "comment.xml.gz")[0] > 100  # it stopped midway, not at the start


def test_pubmed_broken_and_truncated_xml_keep_every_citation_before_the_fault(tmp_path):
    xml = gzip.decompress(TINY.read_bytes())
    starts = [i for i in range(len(xml)) if xml.startswith(b"<PubmedArticle>", i)]
    cut = starts[200]
    before = xml[:cut] + b"</PubmedArticleSet>\n"
    kept, _ = _pubmed_parsed(_write_xml(tmp_path / "before.xml", before))
    # A broken tag in citation 201: the 200 before it are kept, the fault named by its line.
    broken = xml[:cut] + xml[cut:].replace(b'<PMID Version="1">', b'<PMID Version="1"', 1)
    path = _write_xml(tmp_path / "broken.xml.gz", broken)
    docs, aside = _pubmed(path)
    line = broken[: broken.index(b'<PMID Version="1"', cut)].count(b"\n") + 1
    assert docs == kept
    assert aside[-1] == (f"{path}:{line}", "malformed_bad_xml")
    assert aside[-1] == _pubmed_parsed(path)[1][-1]
    # A .gz cut short: the same citations and the same line as the parser's.
    whole = gzip.compress(xml, mtime=0)
    short = tmp_path / "short.xml.gz"
    short.write_bytes(whole[: len(whole) * 2 // 3])
    docs, aside = _pubmed(short)
    ref_docs, ref_aside = _pubmed_parsed(short)
    assert aside[-1] == ref_aside[-1] and aside[-1][1] == "malformed_truncated"
    assert docs[: len(ref_docs)] == ref_docs and len(docs) >= len(ref_docs) > 150


# ---- PubMed XML cut here, parsed elsewhere: the same documents, batches and faults -----------


def _up(executor):
    """The executor with its worker processes started and up."""
    import time

    executor.prestart(None)
    deadline = time.monotonic() + 120
    while not executor.ready() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert executor.ready()
    return executor


class _StartsLate:
    """A real local executor (2 worker processes) that reports not ready for its first
    `calls` questions: the reading meets workers that are still starting."""

    def __init__(self, calls: int):
        from pipeline.executor import LocalExecutor

        self.executor = _up(LocalExecutor(2))
        self.calls = calls

    def ready(self) -> bool:
        self.calls -= 1
        return self.calls < 0 and self.executor.ready()

    def __getattr__(self, name):
        return getattr(self.executor, name)


def _pubmed_chunked(path, executor, folder):
    """pubmed_xml.read with its citations parsed by a ChunkParser: (documents, set aside, batch
    sizes, chunk files the workers parsed)."""
    from pathlib import Path

    from pipeline.ingest import ChunkParser
    from pipeline.readers import pubmed_xml
    from pipeline.runpath import RunPath

    parser = ChunkParser(executor, RunPath.of(folder), 100)
    docs, aside, sizes = [], [], []
    for b in pubmed_xml.read(Path(path), None, 100, parser):
        docs.extend(b.table.to_pylist())
        aside.extend(b.set_aside)
        sizes.append(b.table.num_rows)
    assert not (RunPath.of(folder) / "parse").exists() or not (RunPath.of(folder) / "parse").iterdir()
    return docs, aside, sizes, parser._written


def _pubmed_batches(path):
    from pathlib import Path

    from pipeline.readers import pubmed_xml

    docs, aside, sizes = [], [], []
    for b in pubmed_xml.read(Path(path), None, 100):
        docs.extend(b.table.to_pylist())
        aside.extend(b.set_aside)
        sizes.append(b.table.num_rows)
    return docs, aside, sizes


def _fault_variants(tmp_path) -> dict:
    """The tiny sample as it is, with unusual markup midway (the cut hands over), with a broken
    tag in citation 201, and as a .gz cut short."""
    xml = gzip.decompress(TINY.read_bytes())
    middle = xml.index(b"<PubmedArticle>", len(xml) // 2)
    starts = [i for i in range(len(xml)) if xml.startswith(b"<PubmedArticle>", i)]
    broken = xml[: starts[200]] + xml[starts[200] :].replace(b'<PMID Version="1">', b'<PMID Version="1"', 1)
    whole = gzip.compress(xml, mtime=0)
    paths = {
        "plain": _write_xml(tmp_path / "plain.xml.gz", xml),
        "comment": _write_xml(tmp_path / "comment.xml.gz", xml[:middle] + b"<!-- x -->" + xml[middle:]),
        "broken": _write_xml(tmp_path / "broken.xml.gz", broken),
    }
    paths["short"] = tmp_path / "short.xml.gz"
    paths["short"].write_bytes(whole[: len(whole) * 2 // 3])
    return paths


def test_pubmed_citations_parsed_in_chunks_give_the_same_batches_and_faults(tmp_path, monkeypatch):
    """Chunks of 16 citations, windows of 64: each variant's documents, set-aside records (the
    fault's line among them) and batch boundaries are those of the reader alone, whether the
    chunks are parsed in this process (one worker) or by two worker processes."""
    from pipeline.executor import LocalExecutor
    from pipeline.readers import pubmed_xml

    monkeypatch.setattr(pubmed_xml, "CHUNK_CITATIONS", 16)
    paths = _fault_variants(tmp_path)
    one, two = LocalExecutor(1), _up(LocalExecutor(2))
    try:
        for name, path in paths.items():
            expected = _pubmed_batches(path)
            assert expected[0] and expected[1], name
            *here, written = _pubmed_chunked(path, one, tmp_path / f"{name}-1")
            assert tuple(here) == expected and written == 0, name
            *there, written = _pubmed_chunked(path, two, tmp_path / f"{name}-2")
            assert tuple(there) == expected, name
            assert written > 5, name  # the workers parsed chunks
        assert any(r == "malformed_bad_xml" for _, r in _pubmed_batches(paths["broken"])[1])
        assert any(r == "malformed_truncated" for _, r in _pubmed_batches(paths["short"])[1])
    finally:
        two.close()


def test_pubmed_chunks_cut_while_the_workers_start_wait_or_are_parsed_here(tmp_path, monkeypatch):
    """Workers that are not ready for the first questions: the oldest windows are parsed in
    this process, the later ones by the workers once up; the same batches as the reader
    alone. A `limit` that stops the reading midway leaves no chunk file behind."""
    from pipeline.config import InputConfig
    from pipeline.ingest import ChunkParser
    from pipeline.readers import pubmed_xml, read_documents
    from pipeline.runpath import RunPath

    monkeypatch.setattr(pubmed_xml, "CHUNK_CITATIONS", 16)
    paths = _fault_variants(tmp_path)
    late = _StartsLate(calls=6)
    try:
        for name in ("plain", "broken"):
            expected = _pubmed_batches(paths[name])
            late.calls = 0
            *got, on_workers = _pubmed_chunked(paths[name], late, tmp_path / f"{name}-up")
            assert tuple(got) == expected, name
            late.calls = 10
            *got, written = _pubmed_chunked(paths[name], late, tmp_path / f"{name}-late")
            assert tuple(got) == expected, name
            assert 0 < written < on_workers, name  # some windows parsed here, the rest on the workers
        folder = RunPath.of(tmp_path / "limited")
        cfg = InputConfig(paths=[str(paths["plain"])], limit=150)
        parser = ChunkParser(late, folder, 100)
        got = [b.table.to_pylist() for b in read_documents(cfg, 100, parser)]
        assert got == [b.table.to_pylist() for b in read_documents(cfg, 100)]
        assert not (folder / "parse").exists() or not (folder / "parse").iterdir()
    finally:
        late.executor.close()


def test_arrow_files_without_text_are_named(tmp_path):
    """A stage's folder given as input: its removed/ shards carry ids and reasons, no text;
    the error names the file instead of failing later on a missing column."""
    from pipeline.errors import InputError
    for name, table in (("data/00000.arrow", pa.table({"id": ["a"], "text": ["kept text"]})),
                        ("removed/00000.arrow", pa.table({"id": ["b"], "reason": ["dup"]}))):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        with pa.OSFile(str(tmp_path / name), "wb") as sink, pa.ipc.new_stream(sink, table.schema) as w:
            w.write_table(table)
    with pytest.raises(InputError, match=r"removed/00000\.arrow: no 'text' column \(columns: id, reason\)"):
        _read([tmp_path])
    assert [(d["id"], d["text"]) for d in _read([tmp_path / "data"])[0]] == [("a", "kept text")]
