"""JSON Lines (plain, .gz, .zst): one object per line with a string text field."""
from __future__ import annotations

import gzip
import io
import json
from pathlib import Path

import pyarrow as pa

from pipeline.readers import RowBatcher

SCHEMA = pa.schema([("id", pa.string()), ("text", pa.string()), ("meta", pa.string())])


def open_binary(path: Path):
    name = path.name.lower()
    if name.endswith(".gz"):
        return gzip.open(path, "rb")
    if name.endswith(".zst"):
        import zstandard
        return io.BufferedReader(zstandard.ZstdDecompressor().stream_reader(open(path, "rb")))
    return open(path, "rb")


def read(path: Path, cfg, batch_size: int):
    batcher = RowBatcher(SCHEMA, batch_size)
    stem = path.name
    with open_binary(path) as fh:
        for lineno, raw in enumerate(fh, start=1):
            where = f"{path}:{lineno}"
            if not raw.strip():
                continue
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError:
                batcher.aside(where, "malformed_undecodable")
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError:
                batcher.aside(where, "malformed_bad_json")
                continue
            if not isinstance(obj, dict):
                batcher.aside(where, "malformed_not_an_object")
                continue
            text = obj.pop(cfg.text_field, None)
            if text is None:
                batcher.aside(where, "malformed_missing_text")
                continue
            if not isinstance(text, str):
                batcher.aside(where, "malformed_non_string_text")
                continue
            doc_id = obj.pop(cfg.id_field, None)
            doc_id = str(doc_id) if isinstance(doc_id, (str, int)) and doc_id != "" else f"{stem}:{lineno}"
            # Other fields ride along as one JSON column, so batches keep one schema.
            meta = json.dumps(obj, ensure_ascii=False, sort_keys=True) if obj else None
            out = batcher.add({"id": doc_id, "text": text, "meta": meta})
            if out:
                yield out
    out = batcher.flush()
    if out:
        yield out
