"""pack: tokenize (encode_batch), shuffle documents (seeded, in bounded memory), EOS after every
document, concatenate, cut into seq_len sequences of int32 input_ids, saved per split with
`save_to_disk` as final/<split>; optionally also as Megatron-LM indexed datasets and flat
nanoGPT-style token files (pipeline/writers.py). Tokens left over after the last full sequence
are counted, not packed into final/<split> (the Megatron and flat files hold every token)."""
from __future__ import annotations

import math
import shutil
from pathlib import Path
from typing import Iterator, Literal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import xxhash
from pydantic import Field

from pipeline.errors import UserError
from pipeline.stages.base import GlobalStage, StageConfig
from pipeline.stages.split import SPLITS
from pipeline.stages.tokenizer import TOKENIZER_FILE
from pipeline.store import ShardWriter, shards
from pipeline.writers import FlatWriter, MegatronWriter, flat_dtype, megatron_dtype

FORMATS = ("datasets", "megatron", "flat")
# Documents are spread over this many key ranges on disk; a range larger than the memory bound
# is split again into as many sub-ranges, so any corpus sorts in bounded memory.
SHUFFLE_FANOUT = 64
# Bytes a document takes in a bucket besides its 4-byte token ids (key, position, split, offsets).
ROW_OVERHEAD = 32
BUCKET_SCHEMA = pa.schema([("key", pa.uint64()), ("pos", pa.int64()), ("split", pa.int8()),
                           ("ids", pa.list_(pa.int32()))])


class PackConfig(StageConfig):
    seq_len: int = Field(default=2048, ge=8, le=1_048_576)
    # Training batch size in sequences: the manifest states steps per epoch for it.
    batch_size: int = Field(default=1024, ge=1)
    eos_token: str = "<|endoftext|>"
    # save_to_disk shards per split; null picks about 500 MB per shard.
    num_shards: int | None = Field(default=None, ge=1)
    # Documents in a seeded random order (a keyed hash of the id, seeded by the run seed);
    # false keeps corpus order.
    shuffle: bool = True
    # Memory for the shuffle: documents wait on disk in key ranges, each sorted alone in this much.
    shuffle_memory_mb: float = Field(default=512, gt=0)
    # Outputs: datasets (final/<split>), megatron (final/megatron/<split>_text_document.bin/.idx),
    # flat (final/flat/<split>.bin + <split>.doc_offsets.npy + meta.json).
    formats: list[Literal["datasets", "megatron", "flat"]] = Field(default=["datasets"], min_length=1)
    # Token width of the flat files; auto: uint16 when every id fits, else uint32.
    flat_dtype: Literal["auto", "uint16", "uint32"] = "auto"


def steps_per_epoch(tokens: int, batch_size: int, seq_len: int) -> int:
    """Optimizer steps to see `tokens` once at batch_size x seq_len tokens per step."""
    return math.ceil(tokens / (batch_size * seq_len))


def shuffle_keys(ids: list[str], seed: int) -> np.ndarray:
    """The shuffle order: a keyed hash of each id, independent of the split's hash of (seed, id)."""
    return np.fromiter((xxhash.xxh3_64_intdigest(b"pack\0" + i.encode("utf-8"), seed=seed) for i in ids),
                       dtype=np.uint64, count=len(ids))


def with_eos(ids: pa.ListArray | pa.ChunkedArray, eos_id: int) -> tuple[np.ndarray, np.ndarray]:
    """Documents' token lists as one int32 stream with EOS after each, and each one's length
    (EOS included)."""
    if isinstance(ids, pa.ChunkedArray):
        ids = ids.combine_chunks()
    lengths = pc.list_value_length(ids).to_numpy(zero_copy_only=False).astype(np.int64) + 1
    flat = pc.list_flatten(ids).to_numpy(zero_copy_only=False)
    ends = np.cumsum(lengths)
    out = np.empty(int(ends[-1]) if len(ends) else 0, np.int32)
    body = np.ones(len(out), bool)
    body[ends - 1] = False
    out[body] = flat
    out[ends - 1] = eos_id
    return out, lengths


class SequencePacker:
    """Concatenates token streams and emits full rows of seq_len; keeps the remainder."""

    def __init__(self, seq_len: int):
        self.seq_len = seq_len
        self.buffer = np.zeros(0, np.int32)
        self.tokens = 0
        self.sequences = 0

    def add(self, flat: np.ndarray) -> np.ndarray:
        self.tokens += len(flat)
        data = np.concatenate([self.buffer, flat])
        n = len(data) // self.seq_len
        self.buffer = data[n * self.seq_len:].copy()
        self.sequences += n
        return data[: n * self.seq_len].reshape(n, self.seq_len)


class BucketShuffle:
    """Documents in the order of their keys, in bounded memory: rows go to SHUFFLE_FANOUT files
    by key range; each file is sorted in memory if it fits half of `memory_bytes` (the sort makes
    a copy), else split again into sub-ranges on disk. Ties (equal keys) keep corpus order."""

    def __init__(self, folder: Path, memory_bytes: int):
        self.folder = Path(folder)
        self.memory_bytes = memory_bytes
        self.counter = 0
        self.max_bucket_bytes = 0
        self.buckets_sorted = 0
        self.resplits = 0
        self.root = self._open_level(0, 1 << 64)

    def _open_level(self, lo: int, hi: int) -> dict:
        return {"lo": lo, "hi": hi, "width": -(-(hi - lo) // SHUFFLE_FANOUT), "files": {}, "bytes": {}, "rows": {}}

    def _distribute(self, level: dict, table: pa.Table) -> None:
        keys = table["key"].to_numpy()
        lo, width = level["lo"], level["width"]
        idx = ((keys - np.uint64(lo)) // np.uint64(width)).astype(np.int64)
        order = np.argsort(idx, kind="stable")
        idx_sorted = idx[order]
        starts = np.flatnonzero(np.concatenate([[True], idx_sorted[1:] != idx_sorted[:-1]]))
        ends = np.append(starts[1:], len(idx_sorted))
        sizes = pc.list_value_length(table["ids"]).to_numpy(zero_copy_only=False).astype(np.int64) * 4 + ROW_OVERHEAD
        for s, e in zip(starts, ends):
            b = int(idx_sorted[s])
            rows = order[s:e]
            part = table.take(pa.array(rows))
            writer = level["files"].get(b)
            if writer is None:
                self.counter += 1
                path = self.folder / f"b{self.counter:06d}.arrow"
                sink = pa.OSFile(str(path), "wb")
                writer = level["files"][b] = (path, sink, pa.ipc.new_stream(sink, BUCKET_SCHEMA))
                level["bytes"][b] = level["rows"][b] = 0
            writer[2].write_table(part)
            level["bytes"][b] += int(sizes[rows].sum())
            level["rows"][b] += len(rows)

    def add(self, table: pa.Table) -> None:
        self._distribute(self.root, table)

    def drain(self) -> Iterator[pa.Table]:
        yield from self._drain(self.root)

    def _drain(self, level: dict) -> Iterator[pa.Table]:
        for _, sink, writer in level["files"].values():
            writer.close()
            sink.close()
        for b in sorted(level["files"]):
            path = level["files"][b][0]
            lo = level["lo"] + b * level["width"]
            hi = min(level["hi"], lo + level["width"])
            # Half the bound: sorting takes a second copy of the bucket. A single document is
            # never split: the bound must hold twice the largest document.
            if level["bytes"][b] > self.memory_bytes // 2 and level["rows"][b] > 1 and hi - lo > 1:
                # Too large to sort at once: split the range again, reading the file batch by batch.
                self.resplits += 1
                sub = self._open_level(lo, hi)
                with pa.OSFile(str(path), "rb") as src:
                    for batch in pa.ipc.open_stream(src):
                        self._distribute(sub, pa.Table.from_batches([batch]))
                path.unlink()
                yield from self._drain(sub)
                continue
            with pa.OSFile(str(path), "rb") as src:
                table = pa.ipc.open_stream(src).read_all()
            path.unlink()
            self.max_bucket_bytes = max(self.max_bucket_bytes, table.nbytes)
            self.buckets_sorted += 1
            yield table.take(pc.sort_indices(table, [("key", "ascending"), ("pos", "ascending")]))


class Pack(GlobalStage):
    name = "pack"
    summary = "tokenize, shuffle, EOS between documents, pack into seq_len int32 sequences (final/)"
    Config = PackConfig
    artifacts = {"final": "final"}

    def _tokenizer(self):
        from tokenizers import Tokenizer

        # The runner resolves which tokenizer.json (see runner.stage_artifacts).
        path = self.ctx.artifacts.get(TOKENIZER_FILE)
        if path is None or not Path(path).exists():
            where = path or self.ctx.run_dir / "tokenizer" / TOKENIZER_FILE
            raise UserError(f"pack needs a tokenizer: {where} does not exist; run the tokenizer stage first")
        return Tokenizer.from_file(str(path))

    def tokenize_shard(self, task: dict) -> dict:
        """Map: one shard's documents tokenized (key, global position, split, ids) into
        work/tok-NAME.arrow; the documents pass through unchanged as the output shard."""
        from pipeline.executor import rewrite_shard
        if getattr(self, "_encode", None) is None:
            tok = self._tokenizer()
            # No offsets needed: the fast path skips computing them (tokenizers >= 0.21).
            self._encode = getattr(tok, "encode_batch_fast", tok.encode_batch)
        path = Path(task["folder"]) / "work" / "tokens" / f"{task['name']}.arrow"
        sink = pa.OSFile(str(path) + ".tmp", "wb")
        writer = pa.ipc.new_stream(sink, BUCKET_SCHEMA)
        shuffle = task["shuffle"]

        def tokenize(table: pa.Table, row0: int) -> pa.Table:
            if "split" in table.column_names:
                split = pc.if_else(pc.equal(table["split"], "validation"), 1, 0).cast(pa.int8())
            else:
                split = pa.array(np.zeros(table.num_rows, np.int8))
            ids = pa.array([e.ids for e in self._encode(table["text"].to_pylist(), add_special_tokens=False)],
                           pa.list_(pa.int32()))
            n = table.num_rows
            keys = shuffle_keys(table["id"].to_pylist(), self.ctx.seed) if shuffle else np.zeros(n, np.uint64)
            writer.write_table(pa.table({"key": pa.array(keys), "pos": pa.array(np.arange(row0, row0 + n, dtype=np.int64)),
                                         "split": split, "ids": ids}, schema=BUCKET_SCHEMA))
            return table
        try:
            marker = rewrite_shard(self, task, tokenize)
        finally:
            writer.close()
            sink.close()
        Path(str(path) + ".tmp").replace(path)
        return marker

    def _documents(self, inputs, output, shuffle: BucketShuffle | None) -> Iterator[pa.Table]:
        """Tokenized documents (split code, ids) in packing order: corpus order, or key order.
        Tokenizing is per shard, on the executor; the driver reads the results in shard order."""
        from pipeline.store import read_shard
        (output.folder / "work" / "tokens").mkdir(parents=True, exist_ok=True)
        inputs.map(self, "tokenize_shard", shuffle=shuffle is not None)
        for name in inputs.names():
            path = output.folder / "work" / "tokens" / f"{name}.arrow"
            for docs in read_shard(path):
                if shuffle is None:
                    yield docs
                else:
                    shuffle.add(docs)
            path.unlink()
        if shuffle is not None:
            yield from shuffle.drain()

    def run(self, inputs, output) -> dict:
        cfg = self.config
        tok = self._tokenizer()
        eos = tok.token_to_id(cfg.eos_token)
        if eos is None:
            raise UserError(f"stages.pack.eos_token: {cfg.eos_token!r} is not in the tokenizer's vocabulary")
        vocab_size = tok.get_vocab_size()
        seq_type = pa.list_(pa.int32(), cfg.seq_len)
        schema = pa.schema([("input_ids", seq_type)])
        work = output.folder / "work"
        final = output.folder / "final"
        packers = {s: SequencePacker(cfg.seq_len) for s in SPLITS}
        writers = {s: ShardWriter(work / s, schema, shard_size=10**9) for s in SPLITS}
        extra = {s: [] for s in SPLITS}
        if "megatron" in cfg.formats:
            dtype = megatron_dtype(vocab_size)
            for s in SPLITS:
                extra[s].append(MegatronWriter(final / "megatron" / f"{s}_text_document", dtype))
        if "flat" in cfg.formats:
            dtype = flat_dtype(vocab_size, cfg.flat_dtype)
            for s in SPLITS:
                extra[s].append(FlatWriter(final / "flat" / s, dtype))
        docs = {s: 0 for s in SPLITS}
        shuffle = BucketShuffle(work / "shuffle", int(cfg.shuffle_memory_mb * 2**20)) if cfg.shuffle else None
        if shuffle is not None:
            shuffle.folder.mkdir(parents=True, exist_ok=True)
        for table in self._documents(inputs, output, shuffle):
            codes = table["split"].to_numpy()
            for code, split in enumerate(SPLITS):
                part = table.filter(pa.array(codes == code)) if (codes != code).any() else table
                if not part.num_rows:
                    continue
                flat, lengths = with_eos(part["ids"], eos)
                docs[split] += part.num_rows
                for w in extra[split]:
                    w.add(flat, lengths)
                rows = packers[split].add(flat)
                if len(rows):
                    values = pa.array(rows.ravel(), pa.int32())
                    writers[split].write(pa.table({"input_ids": pa.FixedSizeListArray.from_arrays(values, cfg.seq_len)}))
        for w in writers.values():
            w.close()
        for split in SPLITS:
            for w in extra[split]:
                w.close()
        if "flat" in cfg.formats:
            FlatWriter.write_meta(final / "flat", {s: w for s in SPLITS for w in extra[s] if isinstance(w, FlatWriter)},
                                  vocab_size=vocab_size, eos_id=eos, seq_len=cfg.seq_len)
        result = {s: self._save_split(s, work / s, final / s) for s in SPLITS} if "datasets" in cfg.formats else {}
        shutil.rmtree(work)
        tokens = sum(p.tokens for p in packers.values())
        packed = {s: p.sequences * cfg.seq_len for s, p in packers.items()}
        train_tokens = packed["train"]
        stats = {
            "seq_len": cfg.seq_len, "batch_size": cfg.batch_size, "formats": list(cfg.formats),
            "tokens": tokens, "packed_tokens": sum(packed.values()),
            "leftover_tokens": sum(len(p.buffer) for p in packers.values()),
            "sequences": sum(p.sequences for p in packers.values()),
            "splits": {s: {"documents": docs[s], "tokens": packers[s].tokens, "sequences": packers[s].sequences,
                           "leftover_tokens": int(len(packers[s].buffer)), "shards": result.get(s)} for s in SPLITS},
            "steps_per_epoch": steps_per_epoch(train_tokens, cfg.batch_size, cfg.seq_len),
            "shuffle": {"enabled": cfg.shuffle},
        }
        if shuffle is not None:
            stats["shuffle"].update({"memory_bytes": shuffle.memory_bytes, "max_bucket_bytes": shuffle.max_bucket_bytes,
                                     "buckets": shuffle.buckets_sorted, "resplits": shuffle.resplits})
        return stats

    def _save_split(self, split: str, work: Path, target: Path) -> int:
        from datasets import Dataset, Features, Sequence, Value, concatenate_datasets

        features = Features({"input_ids": Sequence(Value("int32"), length=self.config.seq_len)})
        files = shards(work, ".")
        if files:
            ds = concatenate_datasets([Dataset.from_file(str(f)) for f in files]).cast(features) \
                if len(files) > 1 else Dataset.from_file(str(files[0]))
        else:
            ds = Dataset.from_dict({"input_ids": []}, features=features)
        num_shards = self.config.num_shards or max(1, math.ceil(ds.data.nbytes / 500e6))
        num_shards = min(num_shards, max(1, len(ds)))
        # The fingerprint only names the dataset in state.json: make it a pure function of the
        # content so reruns are byte-identical (datasets would otherwise derive it from temp paths).
        ds._fingerprint = f"medprep-{split}-{len(ds)}-{self.config.seq_len}"
        ds.save_to_disk(str(target), num_shards=num_shards)
        return num_shards
