"""Arrow IPC shards (a stage's data/ folder), streamed through a datasets IterableDataset."""
from __future__ import annotations

from pathlib import Path

from pipeline.readers import ReaderBatch


def read(files: list[Path], batch_size: int):
    for table in stream_tables(files, batch_size):
        yield ReaderBatch(table)


def stream_tables(files: list[Path], batch_size: int):
    """Batches of a set of Arrow shards via `load_dataset("arrow", streaming=True)`."""
    from datasets import load_dataset

    files = [str(f) for f in files if Path(f).stat().st_size > 0]
    if not files:
        return
    ds = load_dataset("arrow", data_files=files, split="train", streaming=True)
    yield from ds.with_format("arrow").iter(batch_size=batch_size)
