"""Arrow IPC shards (a stage's data/ folder), streamed through a datasets IterableDataset.
Shards of a stage that refers to its texts rather than copying them (shards.py) are read with
store.read_shard, which joins the texts back in."""
from __future__ import annotations

from pathlib import Path

from pipeline.readers.batch import ReaderBatch


def read(files: list[Path], batch_size: int):
    for table in stream_tables(files, batch_size):
        yield ReaderBatch(table)


def _refers_to_texts(path: Path) -> bool:
    import pyarrow as pa

    from pipeline.shards import TEXT_ROW
    try:
        with pa.OSFile(str(path), "rb") as src:
            return TEXT_ROW in pa.ipc.open_stream(src).schema.names
    except pa.ArrowInvalid:
        return False                     # an Arrow IPC file, not a stream: datasets reads it


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
