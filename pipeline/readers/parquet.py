"""Parquet: a text column (and optionally an id column); other columns ride along."""
from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from pipeline.errors import InputError
from pipeline.readers.batch import ReaderBatch


def read(path: Path, cfg, batch_size: int):
    pf = pq.ParquetFile(path)
    yield from columnar(path, pf.schema_arrow.names, pf.iter_batches(batch_size=batch_size), cfg)


def columnar(path: Path, names: list[str], batches, cfg, malformed=None):
    """Documents of a columnar file's record batches (Parquet, CSV): the text column, the id
    column or `FILE:rowN`, other columns along. `malformed()`: the rows the file's parser set
    aside since the last call, (where, reason) each."""
    if cfg.text_field not in names:
        raise InputError(f"{path}: no column '{cfg.text_field}' (input.text_field); columns: {', '.join(names)}")
    row0 = 0
    for batch in batches:
        table = pa.Table.from_batches([batch])
        n = table.num_rows
        rownums = pa.array(range(row0, row0 + n), pa.int64())
        if cfg.id_field in names:
            ids = pc.cast(table[cfg.id_field], pa.string())
            table = table.drop_columns([cfg.id_field])
        else:
            ids = pc.binary_join_element_wise(pa.scalar(f"{path.name}:row"), pc.cast(rownums, pa.string()), "")
        text = table[cfg.text_field]
        table = table.drop_columns([cfg.text_field])
        parsed_aside = malformed() if malformed is not None else []
        if not pa.types.is_string(text.type) and not pa.types.is_large_string(text.type):
            reason = "malformed_non_string_text"
            set_aside = parsed_aside + [(f"{path}:row{r}", reason) for r in range(row0, row0 + n)]
            yield ReaderBatch(pa.table({"id": pa.array([], pa.string()), "text": pa.array([], pa.string())}), set_aside)
            row0 += n
            continue
        bad = pc.is_null(text)
        ids = pc.coalesce(
            ids, pc.binary_join_element_wise(pa.scalar(f"{path.name}:row"), pc.cast(rownums, pa.string()), "")
        )
        doc = pa.table({"id": ids, "text": pc.cast(text, pa.string())})
        for name in table.column_names:
            doc = doc.append_column(name, table[name])
        set_aside = parsed_aside + [(f"{path}:row{r}", "malformed_missing_text")
                                    for r in pc.filter(rownums, bad).to_pylist()]
        yield ReaderBatch(doc.filter(pc.invert(bad)), set_aside)
        row0 += n
    rest = malformed() if malformed is not None else []
    if rest:
        yield ReaderBatch(pa.table({"id": pa.array([], pa.string()), "text": pa.array([], pa.string())}), rest)
