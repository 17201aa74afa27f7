"""pack: tokenize (encode_batch), EOS after every document, concatenate, cut into seq_len
sequences of int32 input_ids, saved per split with `save_to_disk` as final/<split>.
Tokens left over after the last full sequence are counted, not packed."""
from __future__ import annotations

import math
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pydantic import Field

from pipeline.errors import UserError
from pipeline.stages.base import Stage, StageConfig
from pipeline.stages.split import SPLITS
from pipeline.stages.tokenizer import TOKENIZER_FILE
from pipeline.store import ShardWriter, shards


class PackConfig(StageConfig):
    seq_len: int = Field(default=2048, ge=8, le=1_048_576)
    # Training batch size in sequences: the manifest states steps per epoch for it.
    batch_size: int = Field(default=1024, ge=1)
    eos_token: str = "<|endoftext|>"
    # save_to_disk shards per split; null picks about 500 MB per shard.
    num_shards: int | None = Field(default=None, ge=1)


def steps_per_epoch(tokens: int, batch_size: int, seq_len: int) -> int:
    """Optimizer steps to see `tokens` once at batch_size x seq_len tokens per step."""
    return math.ceil(tokens / (batch_size * seq_len))


class SequencePacker:
    """Concatenates token arrays and emits full rows of seq_len; keeps the remainder."""

    def __init__(self, seq_len: int):
        self.seq_len = seq_len
        self.buffer = np.zeros(0, np.int32)
        self.tokens = 0
        self.sequences = 0

    def add(self, token_lists: list[list[int]], eos_id: int) -> np.ndarray:
        lengths = np.fromiter((len(t) + 1 for t in token_lists), np.int64, len(token_lists))
        flat = np.empty(int(lengths.sum()), np.int32)
        ends = np.cumsum(lengths)
        starts = ends - lengths
        for s, e, ids in zip(starts, ends, token_lists):
            flat[s:e - 1] = ids
        flat[ends - 1] = eos_id
        self.tokens += len(flat)
        data = np.concatenate([self.buffer, flat])
        n = len(data) // self.seq_len
        self.buffer = data[n * self.seq_len:].copy()
        self.sequences += n
        return data[: n * self.seq_len].reshape(n, self.seq_len)


class Pack(Stage):
    name = "pack"
    summary = "tokenize, EOS between documents, pack into seq_len int32 sequences (final/)"
    Config = PackConfig
    kind = "global"
    artifacts = {"final": "final"}

    def _tokenizer(self):
        from tokenizers import Tokenizer

        candidates = [self.ctx.run_dir / "tokenizer" / TOKENIZER_FILE]
        cfg = self.ctx.config
        if cfg is not None and cfg.has_stage("tokenizer") and cfg.stage("tokenizer").config.tokenizer_path:
            candidates.insert(0, Path(cfg.stage("tokenizer").config.tokenizer_path))
        for path in candidates:
            if path.exists():
                return Tokenizer.from_file(str(path))
        raise UserError(f"pack needs a tokenizer: {candidates[-1]} does not exist; run the tokenizer stage first")

    def run(self, inputs, output) -> dict:
        tok = self._tokenizer()
        eos = tok.token_to_id(self.config.eos_token)
        if eos is None:
            raise UserError(f"stages.pack.eos_token: {self.config.eos_token!r} is not in the tokenizer's vocabulary")
        # No offsets needed: the fast path skips computing them (tokenizers >= 0.21).
        encode = getattr(tok, "encode_batch_fast", tok.encode_batch)
        seq_type = pa.list_(pa.int32(), self.config.seq_len)
        schema = pa.schema([("input_ids", seq_type)])
        work = output.folder / "work"
        packers = {s: SequencePacker(self.config.seq_len) for s in SPLITS}
        writers = {s: ShardWriter(work / s, schema, shard_size=10**9) for s in SPLITS}
        docs = {s: 0 for s in SPLITS}
        for table in inputs.tables(output):
            split_col = table["split"] if "split" in table.column_names else None
            for split in SPLITS:
                part = table if split_col is None else table.filter(pc.equal(split_col, split))
                if split_col is None and split != "train":
                    continue
                if not part.num_rows:
                    continue
                encodings = encode(part["text"].to_pylist(), add_special_tokens=False)
                rows = packers[split].add([e.ids for e in encodings], eos)
                docs[split] += part.num_rows
                if len(rows):
                    values = pa.array(rows.ravel(), pa.int32())
                    writers[split].write(pa.table({"input_ids": pa.FixedSizeListArray.from_arrays(values, self.config.seq_len)}))
            output.write(table)
        for w in writers.values():
            w.close()
        result = {s: self._save_split(s, work / s, output.folder / "final" / s) for s in SPLITS}
        shutil.rmtree(work)
        tokens = sum(p.tokens for p in packers.values())
        packed = {s: p.sequences * self.config.seq_len for s, p in packers.items()}
        train_tokens = packed["train"]
        return {
            "seq_len": self.config.seq_len, "batch_size": self.config.batch_size,
            "tokens": tokens, "packed_tokens": sum(packed.values()),
            "leftover_tokens": sum(len(p.buffer) for p in packers.values()),
            "sequences": sum(p.sequences for p in packers.values()),
            "splits": {s: {"documents": docs[s], "tokens": packers[s].tokens, "sequences": packers[s].sequences,
                           "leftover_tokens": int(len(packers[s].buffer)), "shards": result[s]} for s in SPLITS},
            "steps_per_epoch": steps_per_epoch(train_tokens, self.config.batch_size, self.config.seq_len),
        }

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
