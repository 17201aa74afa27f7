"""CSV and TSV (plain or .gz): a header row, a text column (and optionally an id column); other
columns ride along as strings. A row with the wrong number of fields is set aside with its line."""
from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.csv as pacsv

from pipeline.readers.parquet import columnar


def read(path: Path, cfg, batch_size: int, delimiter: str = ","):
    aside: list[tuple[str, str]] = []

    bad_rows = [0]

    def bad_row(row) -> str:
        # Quoted line breaks in values leave the parser without line numbers: the Nth bad row.
        bad_rows[0] += 1
        where = f"{path}:{row.number}" if row.number is not None else f"{path}:bad-row{bad_rows[0]}"
        aside.append((where, "malformed_csv_row"))
        return "skip"

    def taken() -> list[tuple[str, str]]:
        out = list(aside)
        aside.clear()
        return out

    # Every column as text: an id of digits stays as written ("007"), a note is never a number.
    header = _header(path, delimiter)
    reader = pacsv.open_csv(
        str(path),
        read_options=pacsv.ReadOptions(block_size=1 << 20),
        parse_options=pacsv.ParseOptions(delimiter=delimiter, newlines_in_values=True, invalid_row_handler=bad_row),
        convert_options=pacsv.ConvertOptions(column_types={name: pa.string() for name in header},
                                             strings_can_be_null=True),
    )
    batches = (b for batch in reader for b in _rechunk(batch, batch_size))
    yield from columnar(path, header, batches, cfg, malformed=taken)


def read_tsv(path: Path, cfg, batch_size: int):
    yield from read(path, cfg, batch_size, delimiter="\t")


def _header(path: Path, delimiter: str) -> list[str]:
    """The column names: the file's first record (compressed files by their suffix)."""
    import csv
    import io
    with pa.input_stream(str(path), compression="detect") as raw:
        first = io.TextIOWrapper(raw, encoding="utf-8", newline="")
        return next(csv.reader(first, delimiter=delimiter), [])


def _rechunk(batch: pa.RecordBatch, size: int):
    for start in range(0, batch.num_rows, size):
        yield batch.slice(start, size)
