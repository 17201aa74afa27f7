"""JSON Lines (plain, .gz, .zst): one object per line with a string text field; and .json files,
which hold either JSON Lines or one array of such objects."""
from __future__ import annotations

import gzip
import io
import json
import logging
import zlib
from pathlib import Path

import pyarrow as pa

from pipeline.readers.batch import RowBatcher

log = logging.getLogger("medprep")
SCHEMA = pa.schema([("id", pa.string()), ("text", pa.string()), ("meta", pa.string())])


def open_binary(path: Path):
    name = path.name.lower()
    if name.endswith(".gz"):
        return gzip.open(path, "rb")
    if name.endswith(".zst"):
        return io.BufferedReader(ZstdFrames(path), 1 << 20)
    return open(path, "rb")


class ZstdFrames(io.RawIOBase):
    """Decompressed bytes of a .zst file (one or more frames). zstandard's stream_reader ends
    quietly at a truncated frame; this raises EOFError there, as gzip does."""

    def __init__(self, path: Path):
        import zstandard
        self._zstd = zstandard.ZstdDecompressor()
        self._src = open(path, "rb")
        self._frame = None
        self._out = b""

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        while not self._out:
            if self._frame is not None and self._frame.eof:
                rest, self._frame = self._frame.unused_data, None
            else:
                rest = self._src.read(1 << 20)
                if not rest:
                    if self._frame is not None:
                        raise EOFError("zstd stream ended before the end of its frame")
                    return 0
            if rest:
                self._frame = self._frame or self._zstd.decompressobj()
                self._out = self._frame.decompress(rest)
        n = min(len(buffer), len(self._out))
        buffer[:n] = self._out[:n]
        self._out = self._out[n:]
        return n

    def close(self) -> None:
        self._src.close()
        super().close()


def lines(fh, path: Path, batcher: RowBatcher):
    """(line number, bytes) of a possibly compressed file. A truncated archive ends the file:
    the lines before it are kept and the truncation is set aside as one malformed record at
    the line where it cut in."""
    lineno = 0
    try:
        for lineno, raw in enumerate(fh, start=1):
            yield lineno, raw
    except (EOFError, zlib.error) as exc:
        batcher.aside(f"{path}:{lineno + 1}", "malformed_truncated")
        log.warning("%s:%d: %s; the %d lines before are kept", path, lineno + 1, exc, lineno)


def _schema(cfg) -> pa.Schema:
    """id, text, the fields the config reads into columns of their own, and meta."""
    columns = [c for c in cfg.columns if c not in ("id", "text", "meta")]
    return pa.schema([SCHEMA.field("id"), SCHEMA.field("text"), *[(c, pa.string()) for c in columns],
                      SCHEMA.field("meta")])


def read(path: Path, cfg, batch_size: int):
    batcher = RowBatcher(_schema(cfg), batch_size)
    stem = path.name
    with open_binary(path) as fh:
        for lineno, raw in lines(fh, path, batcher):
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
            out = _record(batcher, obj, where, f"{stem}:{lineno}", cfg)
            if out:
                yield out
    out = batcher.flush()
    if out:
        yield out


def read_json(path: Path, cfg, batch_size: int):
    """A .json file: one array of objects (each set aside or kept as a JSON Lines record is,
    named FILE:[INDEX]), or JSON Lines."""
    with open_binary(path) as fh:
        head = fh.read(4096).lstrip()
    if not head.startswith(b"["):
        yield from read(path, cfg, batch_size)
        return
    batcher = RowBatcher(_schema(cfg), batch_size)
    with open_binary(path) as fh:
        try:
            items = json.loads(fh.read().decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            from pipeline.errors import InputError
            raise InputError(f"{path}: not a JSON array of objects ({exc})") from None
    for index, obj in enumerate(items):
        out = _record(batcher, obj, f"{path}:[{index}]", f"{path.name}:[{index}]", cfg)
        if out:
            yield out
    out = batcher.flush()
    if out:
        yield out


def _record(batcher: RowBatcher, obj, where: str, fallback_id: str, cfg):
    """One parsed object as a document row (or set aside with its reason); a full batch or None."""
    if not isinstance(obj, dict):
        batcher.aside(where, "malformed_not_an_object")
        return None
    text = obj.pop(cfg.text_field, None)
    if text is None:
        batcher.aside(where, "malformed_missing_text")
        return None
    if not isinstance(text, str):
        batcher.aside(where, "malformed_non_string_text")
        return None
    doc_id = obj.pop(cfg.id_field, None)
    doc_id = str(doc_id) if isinstance(doc_id, (str, int)) and doc_id != "" else fallback_id
    row = {"id": doc_id, "text": text}
    for name in batcher.schema.names[2:-1]:           # the fields read into columns of their own
        value = obj.pop(name, None)
        row[name] = None if value is None else str(value)
    # Other fields ride along as one JSON column, so batches keep one schema.
    row["meta"] = json.dumps(obj, ensure_ascii=False, sort_keys=True) if obj else None
    return batcher.add(row)
