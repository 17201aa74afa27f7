"""Arrow IPC shards (a stage's data/ folder), streamed through a datasets IterableDataset.
Shards of a stage that refers to its texts rather than copying them (shards.py) are read with
store.read_shard, which joins the texts back in."""
from __future__ import annotations

from pathlib import Path

from pipeline.errors import InputError
from pipeline.readers.batch import ReaderBatch


def read(files: list[Path], batch_size: int):
    for table in stream_tables(files, batch_size):
        yield ReaderBatch(table)


def _column_names(path: Path) -> list[str] | None:
    """The columns of an Arrow IPC stream or file; None for an unreadable file."""
    import pyarrow as pa

    for opener in (pa.ipc.open_stream, pa.ipc.open_file):
        try:
            with pa.OSFile(str(path), "rb") as src:
                return opener(src).schema.names
        except pa.ArrowInvalid:
            continue
    return None


def stream_tables(files: list[Path], batch_size: int):
    """Batches of a set of Arrow shards via `load_dataset("arrow", streaming=True)`; shards
    that refer to their texts through store.read_shard. Each file's schema is read once."""
    from datasets import load_dataset

    from pipeline.shards import TEXT_ROW

    columns = {str(f): _column_names(Path(f)) for f in files if Path(f).stat().st_size > 0}
    for f, names in columns.items():
        if names is not None and "text" not in names and TEXT_ROW not in names:
            # A run folder's removed/ or shards/ files sit beside data/: name the file, not a KeyError.
            raise InputError(f"{f}: no 'text' column (columns: {', '.join(names)}); "
                             "for a stage's output, pass its data/ folder")
    if not columns:
        return
    if any(TEXT_ROW in (names or []) for names in columns.values()):
        from pipeline.shards import read_shard
        for f in columns:
            yield from read_shard(f, batch_size)
        return
    ds = load_dataset("arrow", data_files=list(columns), split="train", streaming=True)
    yield from ds.with_format("arrow").iter(batch_size=batch_size)
