"""Readers: map source files onto documents (id, text, extra columns), in Arrow batches.

A record that cannot become a document (bad JSON, missing or non-string text, undecodable
bytes, broken XML) never stops a run: it comes back as a set-aside row with its file and line
as id and a `malformed_*` reason, so the first stage counts it like any other removal.
"""
from __future__ import annotations

import gzip
from pathlib import Path
from typing import Iterator

import pyarrow as pa

from pipeline.errors import InputError
from pipeline.readers.batch import ReaderBatch, RowBatcher  # noqa: F401  (the readers' batch types)

SUPPORTED_SUFFIXES = (".jsonl", ".jsonl.gz", ".jsonl.zst", ".json", ".json.gz", ".ndjson", ".parquet",
                      ".csv", ".csv.gz", ".tsv", ".tsv.gz", ".txt", ".xml", ".xml.gz", ".nxml", ".nxml.gz", ".arrow")


def is_hf_folder(path: Path) -> bool:
    return path.is_dir() and ((path / "state.json").exists() or (path / "dataset_dict.json").exists())


def detect_format(path: Path) -> str:
    name = path.name.lower()
    if is_hf_folder(path):
        return "hf"
    if name.endswith((".jsonl", ".jsonl.gz", ".jsonl.zst", ".ndjson")):
        return "jsonl"
    if name.endswith((".json", ".json.gz")):
        return "json"
    if name.endswith((".csv", ".csv.gz")):
        return "csv"
    if name.endswith((".tsv", ".tsv.gz")):
        return "tsv"
    if name.endswith(".parquet"):
        return "parquet"
    if name.endswith(".txt"):
        return "text"
    if name.endswith((".nxml", ".nxml.gz")):
        return "jats"
    if name.endswith((".xml", ".xml.gz")):
        from pipeline.readers.jats import is_jats
        try:
            with (gzip.open(path, "rb") if name.endswith(".gz") else open(path, "rb")) as fh:
                head = fh.read(4096)
        except OSError:
            head = b""
        return "jats" if is_jats(head) else "pubmed_xml"
    if name.endswith(".arrow"):
        return "arrow"
    raise InputError(f"{path}: unsupported input file type (supported: {', '.join(SUPPORTED_SUFFIXES)}, "
                     "or a datasets save_to_disk folder)")


def expand_paths(paths: list[str]) -> list[Path]:
    """Files named by paths, folders (recursively) and globs, in a stable order."""
    import glob

    out: list[Path] = []
    for p in paths:
        path = Path(p)
        if any(ch in p for ch in "*?["):
            out.extend(Path(m) for m in sorted(glob.glob(p, recursive=True)) if Path(m).is_file())
        elif path.is_dir() and not is_hf_folder(path):
            out.extend(sorted(f for f in path.rglob("*") if f.is_file() and f.name.endswith(SUPPORTED_SUFFIXES)))
        else:
            out.append(path)
    return out


def read_documents(input_cfg, batch_size: int, parser=None) -> Iterator[ReaderBatch]:
    """All documents of the configured input, in file order, as batches. `parser`: where a
    PubMed XML file's citations are parsed (pubmed_xml.read; the same batches as without)."""
    from pipeline.readers import arrow, csv, hf, jats, jsonl, parquet, pubmed_xml, text

    files = expand_paths(input_cfg.paths)
    readers = {"jsonl": jsonl.read, "json": jsonl.read_json, "csv": csv.read, "tsv": csv.read_tsv,
               "parquet": parquet.read, "text": text.read, "pubmed_xml": pubmed_xml.read, "jats": jats.read,
               "hf": hf.read}
    # Consecutive Arrow shards are streamed together through one datasets IterableDataset.
    arrow_files = [f for f in files if input_cfg.format == "auto" and detect_format(f) == "arrow"]
    if arrow_files and len(arrow_files) == len(files):
        yield from _limit(arrow.read(arrow_files, batch_size), input_cfg.limit)
        return
    def batches():
        for path in files:
            fmt = input_cfg.format if input_cfg.format != "auto" else detect_format(path)
            try:
                if fmt == "arrow":
                    yield from arrow.read([path], batch_size)
                elif fmt == "pubmed_xml" and parser is not None:
                    yield from pubmed_xml.read(path, input_cfg, batch_size, parser)
                else:
                    yield from readers[fmt](path, input_cfg, batch_size)
            except (OSError, EOFError, pa.ArrowException) as exc:
                # A file that cannot be read at all (not gzip, not parquet, unreadable): one
                # line naming it, not a traceback from deep inside a decoder.
                detail = getattr(exc, "strerror", None) or (str(exc).strip().splitlines() or [type(exc).__name__])[0]
                raise InputError(f"{path}: cannot read as {fmt}: {detail}") from None
    yield from _limit(batches(), input_cfg.limit)


def _limit(batches: Iterator[ReaderBatch], limit: int | None) -> Iterator[ReaderBatch]:
    if limit is None:
        yield from batches
        return
    left = limit                    # >= 1: the config validates it
    for b in batches:
        if b.table.num_rows > left:
            b = ReaderBatch(b.table.slice(0, left), b.set_aside)
        left -= b.table.num_rows
        yield b
        if left <= 0:
            return                  # before the reader parses a batch more, only to drop it
