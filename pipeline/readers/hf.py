"""A datasets `save_to_disk` folder (Dataset, or the 'train' split of a DatasetDict)."""
from __future__ import annotations

from pathlib import Path

import pyarrow.compute as pc

from pipeline.errors import InputError
from pipeline.readers.batch import ReaderBatch


def read(path: Path, cfg, batch_size: int):
    from datasets import DatasetDict, load_from_disk

    ds = load_from_disk(str(path))
    if isinstance(ds, DatasetDict):
        if "train" not in ds:
            raise InputError(f"{path}: DatasetDict has no 'train' split (splits: {', '.join(ds)})")
        ds = ds["train"]
    if cfg.text_field not in ds.column_names:
        raise InputError(f"{path}: no column '{cfg.text_field}' (input.text_field)")
    row0 = 0
    for table in ds.to_iterable_dataset().with_format("arrow").iter(batch_size=batch_size):
        n = table.num_rows
        if cfg.text_field != "text":
            table = table.rename_columns(["text" if c == cfg.text_field else c for c in table.column_names])
        if cfg.id_field in table.column_names:
            ids = pc.cast(table[cfg.id_field], "string")
            table = table.drop_columns([cfg.id_field])
        else:
            ids = [f"{path.name}:row{r}" for r in range(row0, row0 + n)]
        table = table.add_column(0, "id", [ids] if not hasattr(ids, "chunks") else ids)
        bad = pc.is_null(table["text"])
        set_aside = [(f"{path}:row{row0 + i}", "malformed_missing_text")
                     for i, b in enumerate(bad.to_pylist()) if b]
        yield ReaderBatch(table.filter(pc.invert(bad)), set_aside)
        row0 += n
