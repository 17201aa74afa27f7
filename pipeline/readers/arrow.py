"""Arrow IPC shards (a stage's data/ folder), streamed through a datasets IterableDataset.
Shards of a stage that refers to its texts rather than copying them (shards.py) are read with
store.read_shard, which joins the texts back in."""
from __future__ import annotations

from pathlib import Path

from pipeline.errors import InputError
from pipeline.readers.batch import ReaderBatch


def read(files: list[Path], batch_size: int):
    from pipeline.shards import TEXT_ROW
    for f in files:
        names = _column_names(f)
        if names is not None and "text" not in names and TEXT_ROW not in names:
            # A run folder's removed/ or shards/ files sit beside data/: name the file, not a KeyError.
            raise InputError(f"{f}: no 'text' column (columns: {', '.join(names)}); "
                             "for a stage's output, pass its data/ folder")
    for table in stream_tables(files, batch_size):
        yield ReaderBatch(table)


def _column_names(path: Path) -> list[str] | None:
    """The columns of an Arrow IPC stream or file; None for an empty or unreadable file."""
    import pyarrow as pa

    if path.stat().st_size == 0:
        return None
    for opener in (pa.ipc.open_stream, pa.ipc.open_file):
        try:
            with pa.OSFile(str(path), "rb") as src:
                return opener(src).schema.names
        except pa.ArrowInvalid:
            continue
    return None


def _refers_to_texts(path: Path) -> bool:
    from pipeline.shards import TEXT_ROW
    return TEXT_ROW in (_column_names(path) or [])


def stream_tables(files: list[Path], batch_size: int):
    """Batches of a set of Arrow shards via `load_dataset("arrow", streaming=True)`."""
    from datasets import load_dataset

    files = [str(f) for f in files if Path(f).stat().st_size > 0]
    if not files:
        return
    if any(_refers_to_texts(Path(f)) for f in files):
        from pipeline.shards import read_shard
        for f in files:
            yield from read_shard(f, batch_size)
        return
    ds = load_dataset("arrow", data_files=files, split="train", streaming=True)
    yield from ds.with_format("arrow").iter(batch_size=batch_size)
