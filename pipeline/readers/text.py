"""Plain text: one document per file, or one per non-empty line."""
from __future__ import annotations

from pathlib import Path

import pyarrow as pa

from pipeline.readers.batch import RowBatcher

SCHEMA = pa.schema([("id", pa.string()), ("text", pa.string())])


def read(path: Path, cfg, batch_size: int):
    batcher = RowBatcher(SCHEMA, batch_size)
    data = path.read_bytes()
    if cfg.text_unit == "file":
        try:
            batcher.add({"id": str(path), "text": data.decode("utf-8")})
        except UnicodeDecodeError as exc:
            line = data[: exc.start].count(b"\n") + 1
            batcher.aside(f"{path}:{line}", "malformed_undecodable")
    else:
        for lineno, raw in enumerate(data.split(b"\n"), start=1):
            if not raw.strip():
                continue
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError:
                batcher.aside(f"{path}:{lineno}", "malformed_undecodable")
                continue
            out = batcher.add({"id": f"{path}:{lineno}", "text": text})
            if out:
                yield out
    out = batcher.flush()
    if out:
        yield out
