"""Readers: every format, and every kind of malformed record survived, counted, located."""
import gzip
import json

import pyarrow as pa
import pyarrow.parquet as pq
import zstandard

from pipeline.config import InputConfig
from pipeline.readers import read_documents
from conftest import RAW, read_arrow_dir, run_cli, write_config


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
    assert len(docs) == 5 and docs[0]["year"] == 0 and aside == [(f"{tmp_path / 'c.parquet'}:row5", "malformed_missing_text")]
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
    path.write_bytes(b'{"id": "a", "text": "A perfectly fine document about the heart."}\n{"id": "b", "text": \n'
                     b'{"id": "c", "text": "   "}\n{"id": "d", "text": "caf\xe9"}\n')
    cfg = write_config(tmp_path / "c.yaml", f"input: {{paths: [{path}]}}\noutput_dir: {tmp_path / 'run'}\n"
                                            "stages: [normalize, dedup_exact]\n")
    run_cli("-m", "pipeline.stage", "normalize", "--config", str(cfg))
    stats = json.loads((tmp_path / "run/stages/01_normalize/stats.json").read_text())
    assert stats["docs_in"] == 4 and stats["docs_out"] == 1
    assert stats["removed"] == {"empty_text": 1, "malformed_bad_json": 1, "malformed_undecodable": 1}
    removed = read_arrow_dir(tmp_path / "run/stages/01_normalize/removed").to_pylist()
    assert {r["id"] for r in removed} == {f"{path}:2", "c", f"{path}:4"}
    assert "text" not in removed[0]                      # no text in removed/ unless asked
