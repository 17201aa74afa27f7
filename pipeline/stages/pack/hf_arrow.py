"""A packed split in datasets' `save_to_disk` layout, written with pyarrow alone: the shards'
Arrow stream files with the features in their schema metadata, state.json and
dataset_info.json. The bytes are those `datasets` (its ArrowWriter, DatasetInfo and the
writer batch size of save_to_disk) writes for a one-column `input_ids` dataset of fixed-length
int32 rows; tests/test_pack.py compares them with the installed `datasets`, byte for byte.

Why not call `datasets` here: importing it costs about 0.7 s per process (pandas,
huggingface_hub, fsspec), paid by the driver and by every worker that writes a shard, which
was a quarter of a retune's wall time. `datasets.load_from_disk` still opens the result."""
from __future__ import annotations

import json

import pyarrow as pa

STATE_FILE = "state.json"                 # datasets.config.DATASET_STATE_JSON_FILENAME
INFO_FILE = "dataset_info.json"           # datasets.config.DATASET_INFO_FILENAME
DEFAULT_MAX_BATCH_SIZE = 1000             # datasets.config.DEFAULT_MAX_BATCH_SIZE
MAX_ROW_GROUP_BYTES = 100 * 10**6         # datasets.config.MAX_ROW_GROUP_SIZE ("100MB")


def sequence_features(seq_len: int) -> dict:
    """`Features({"input_ids": Sequence(Value("int32"), length=seq_len)}).to_dict()`."""
    return {"input_ids": {"feature": {"dtype": "int32", "_type": "Value"}, "length": seq_len, "_type": "List"}}


def sequence_schema(seq_len: int) -> pa.Schema:
    """The schema ArrowWriter(features=...) writes: the Arrow type and the features as metadata."""
    meta = {"huggingface": json.dumps({"info": {"features": sequence_features(seq_len)}})}
    return pa.schema([pa.field("input_ids", pa.list_(pa.int32(), seq_len))], metadata=meta)


def writer_batch_size(num_rows: int, num_bytes: int) -> int:
    """Rows per record batch, as save_to_disk picks them (`get_writer_batch_size_from_data_size`,
    capped at DEFAULT_MAX_BATCH_SIZE)."""
    if num_bytes <= 0:
        return DEFAULT_MAX_BATCH_SIZE
    return min(DEFAULT_MAX_BATCH_SIZE, max(1, num_rows * MAX_ROW_GROUP_BYTES // num_bytes))


class SequenceShardWriter:
    """One data-XXXXX-of-YYYYY.arrow file: `write(flat_int32_values)` per record batch."""

    def __init__(self, sink, seq_len: int):
        self.seq_len = seq_len
        self.schema = sequence_schema(seq_len)
        self.sink = sink
        self.writer = pa.ipc.new_stream(sink, self.schema)

    def write(self, values: pa.Array) -> None:
        rows = pa.FixedSizeListArray.from_arrays(values, self.seq_len)
        self.writer.write_batch(pa.record_batch([rows], schema=self.schema))

    def close(self) -> None:
        self.writer.close()
        self.sink.close()


def dataset_state(split: str, rows: int, seq_len: int, num_shards: int) -> str:
    """state.json. The fingerprint only names the dataset: a pure function of the content, so
    reruns are byte-identical."""
    state = {"_fingerprint": f"medprep-{split}-{rows}-{seq_len}", "_format_columns": None, "_format_kwargs": {},
             "_format_type": None, "_output_all_columns": False, "_split": None,
             "_data_files": [{"filename": f"data-{i:05d}-of-{num_shards:05d}.arrow"} for i in range(num_shards)]}
    return json.dumps(state, indent=2, sort_keys=True)


def dataset_info(seq_len: int) -> str:
    """dataset_info.json: `asdict(DatasetInfo(features=...))` with its keys sorted."""
    info = {"citation": "", "description": "", "features": sequence_features(seq_len), "homepage": "", "license": ""}
    return json.dumps(info, indent=2)
