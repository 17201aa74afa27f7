"""Token files trainers read, written by the pack stage document by document (EOS included):

- Megatron-LM's indexed dataset (megatron/core/datasets/indexed_dataset.py): `<prefix>.bin`,
  the tokens, and `<prefix>.idx`: header b"MMIDIDX\\x00\\x00", version <Q 1, dtype code <B,
  sequence count <Q, document count <Q, then int32 sequence lengths, int64 sequence byte
  pointers into .bin, int64 document indices. One sequence per document, as Megatron's
  preprocess_data.py writes with --append-eod: document indices are 0, 1, ..., n.
- Flat token files (nanoGPT's train.bin/val.bin): `<split>.bin`, every token as uint16 or
  uint32, `<split>.doc_offsets.npy`, int64 start of each document plus the end, and meta.json.

Both hold every token in packing order; final/<split> (datasets) holds the same stream cut into
seq_len rows, without the tokens after the last full row."""
from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np

from pipeline.runpath import RunPath, save_npy

MEGATRON_HEADER = b"MMIDIDX\x00\x00"
MEGATRON_VERSION = 1
# Megatron's DType codes.
MEGATRON_DTYPES = {np.uint8: 1, np.int8: 2, np.int16: 3, np.int32: 4, np.int64: 5, np.float64: 6,
                   np.float32: 7, np.uint16: 8}


def megatron_dtype(vocab_size: int):
    """Megatron's DType.optimal_dtype: uint16 below 65,500 ids, else int32."""
    return np.uint16 if vocab_size < 65500 else np.int32


def flat_dtype(vocab_size: int, wanted: str = "auto"):
    if wanted == "auto":
        return np.uint16 if vocab_size <= 1 << 16 else np.uint32
    dtype = {"uint16": np.uint16, "uint32": np.uint32}[wanted]
    if vocab_size > np.iinfo(dtype).max + 1:
        from pipeline.errors import UserError
        raise UserError(f"stages.pack.flat_dtype: {wanted} cannot hold ids of a {vocab_size:,}-token vocabulary")
    return dtype


class _TokenFile:
    """Written straight at its name in the run folder (pyarrow.fs): pack writes these files
    before the stage's _SUCCESS, which is what vouches for them."""

    def __init__(self, path: RunPath, dtype):
        self.path = path
        self.dtype = np.dtype(dtype)
        self.fh = self.path.open_output()
        self.lengths: list[np.ndarray] = []

    def add(self, flat: np.ndarray, lengths: np.ndarray) -> None:
        """Documents as one token stream and their lengths."""
        self.fh.write(flat.astype(self.dtype).tobytes())
        self.lengths.append(np.asarray(lengths, np.int64))

    def all_lengths(self) -> np.ndarray:
        return np.concatenate(self.lengths) if self.lengths else np.zeros(0, np.int64)


class MegatronWriter(_TokenFile):
    def __init__(self, prefix: RunPath, dtype):
        super().__init__(prefix.with_name(prefix.name + ".bin"), dtype)
        self.idx_path = prefix.with_name(prefix.name + ".idx")

    def close(self) -> None:
        self.fh.close()
        lengths = self.all_lengths()
        pointers = np.zeros(len(lengths), np.int64)
        np.cumsum(lengths[:-1] * self.dtype.itemsize, out=pointers[1:])
        with self.idx_path.open_output() as idx:
            idx.write(MEGATRON_HEADER)
            idx.write(struct.pack("<Q", MEGATRON_VERSION))
            idx.write(struct.pack("<B", MEGATRON_DTYPES[self.dtype.type]))
            idx.write(struct.pack("<Q", len(lengths)))
            idx.write(struct.pack("<Q", len(lengths) + 1))
            idx.write(lengths.astype(np.int32).tobytes())
            idx.write(pointers.tobytes())
            idx.write(np.arange(len(lengths) + 1, dtype=np.int64).tobytes())


class FlatWriter(_TokenFile):
    def __init__(self, stem: RunPath, dtype):
        super().__init__(stem.with_name(stem.name + ".bin"), dtype)
        self.offsets_path = stem.with_name(stem.name + ".doc_offsets.npy")

    def close(self) -> None:
        self.fh.close()
        lengths = self.all_lengths()
        offsets = np.zeros(len(lengths) + 1, np.int64)
        np.cumsum(lengths, out=offsets[1:])
        save_npy(self.offsets_path, offsets)

    @staticmethod
    def write_meta(folder: RunPath, writers: dict, **fields) -> None:
        meta = {**fields, "dtype": next(iter(writers.values())).dtype.name if writers else None,
                "splits": {s: {"file": w.path.name, "doc_offsets": w.offsets_path.name,
                               "documents": int(sum(len(x) for x in w.lengths)),
                               "tokens": int(sum(int(x.sum()) for x in w.lengths))} for s, w in writers.items()}}
        (folder / "meta.json").write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")


def read_megatron(prefix: str | Path) -> dict:
    """Reads a Megatron indexed dataset by the format's specification (no megatron-core needed):
    {"dtype", "sequence_lengths", "sequence_pointers", "document_indices", "tokens" (memory-mapped)}."""
    prefix = str(prefix)
    with open(prefix + ".idx", "rb") as fh:
        if fh.read(9) != MEGATRON_HEADER:
            raise ValueError(f"{prefix}.idx: not a Megatron index (bad header)")
        (version,) = struct.unpack("<Q", fh.read(8))
        (code,) = struct.unpack("<B", fh.read(1))
        (n_seq,) = struct.unpack("<Q", fh.read(8))
        (n_doc,) = struct.unpack("<Q", fh.read(8))
        offset = fh.tell()
    if version != MEGATRON_VERSION:
        raise ValueError(f"{prefix}.idx: version {version}")
    dtype = np.dtype({v: k for k, v in MEGATRON_DTYPES.items()}[code])
    idx = np.memmap(prefix + ".idx", mode="r", dtype=np.uint8)
    lengths = np.frombuffer(idx, np.int32, n_seq, offset)
    pointers = np.frombuffer(idx, np.int64, n_seq, offset + lengths.nbytes)
    documents = np.frombuffer(idx, np.int64, n_doc, offset + lengths.nbytes + pointers.nbytes)
    size = Path(prefix + ".bin").stat().st_size
    tokens = np.memmap(prefix + ".bin", mode="r", dtype=dtype) if size else np.zeros(0, dtype)
    return {"dtype": dtype, "sequence_lengths": lengths, "sequence_pointers": pointers,
            "document_indices": documents, "tokens": tokens}
