"""pack: tokenize (encode_batch), shuffle documents (seeded, in bounded memory), EOS after every
document, concatenate, cut into seq_len sequences of int32 input_ids, saved per split in the
`save_to_disk` layout as final/<split>; optionally also as Megatron-LM indexed datasets and
flat nanoGPT-style token files (pipeline/stages/pack/writers.py). Tokens left over after the last full
sequence are counted, not packed into final/<split> (the Megatron and flat files hold every
token).

Map, combine, map, map: the work runs on the executor, the driver only adds up counts.
1. tokenize, per input shard: each document's shuffle key, global position, split and token
   ids, in key-bin order (BINS bins by the key's top bits), with each bin's row and token
   counts;
2. the driver sums the counts and cuts the bins into buckets of consecutive key ranges that
   fit half of `shuffle_memory_mb` each, and so knows where every bucket's tokens start in
   each split's stream, and how many sequences each final shard holds;
3. order, per bucket: its documents from every shard, sorted by (key, position), with EOS
   after each, as one token stream per split (work/stream/);
4. write, per final shard: its seq_len rows cut from the streams at their global offsets.
The packing order, and so every byte, is that of one sequential sort of the whole corpus by
(key, position); without shuffle, each input shard is one bucket, in corpus order."""
from __future__ import annotations

import math
from typing import Iterator, Literal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pydantic import Field

from pipeline.documents import source_of_shard
from pipeline.engines.bpe import TOKENIZER_FILE, tokenizer_from_json, tokenizers_threads
from pipeline.engines.mixing import repeat_factors, shuffle_keys
from pipeline.engines.splits import SPLITS
from pipeline.errors import UserError
from pipeline.runpath import RunPath, as_run_path, load_npy, save_npy
from pipeline.shards import WRITE_CHUNK
from pipeline.stages.base import Dependencies, GlobalStage, StageConfig
from pipeline.stages.pack import hf_arrow
from pipeline.stages.pack.writers import FlatWriter, MegatronWriter, flat_dtype, megatron_dtype
from pipeline.tasks import shard_task

FORMATS = ("datasets", "megatron", "flat")
# Key bins (the shuffle key's top 10 bits): buckets are runs of consecutive bins. A bin holds
# 1/1024 of the corpus, so the memory bound holds while a bin fits in it (43 MB of tokens per
# bin for all of PubMed).
BIN_BITS = 10
BINS = 1 << BIN_BITS
# Per bin, per shard: rows, then documents and tokens (EOS included) of train and validation.
COUNTS = ("rows", "docs_train", "docs_validation", "tokens_train", "tokens_validation")
# Tokens of a bucket's split taken in order at a time (16 MB of ids): see order_bucket.
ORDER_PIECE_TOKENS = 1 << 22
# Bytes a document takes in a bucket besides its 4-byte token ids (key, position, split, offsets).
ROW_OVERHEAD = 32
# A bucket is at most 1/BUCKET_SHARE of shuffle_memory_mb. Ordering it holds the bucket twice
# while its rows read from the shards are made one chunk, then once, with its sort order and one
# piece of ORDER_PIECE_TOKENS (order_bucket): about 2 buckets. The share is that of when a split's
# sorted rows and whole token stream were held too (3.25 buckets), so the buckets, and so the
# tasks, are cut as they were.
BUCKET_SHARE = 3.5
# Buckets are cut smaller, down to this, so that every worker orders one (no driver-side bucket
# while the workers wait).
MIN_SPLIT_BYTES = 32 << 20
# src: the document's source (its index among a mix's sources; 0 without a mix).
BUCKET_SCHEMA = pa.schema([("key", pa.uint64()), ("pos", pa.int64()), ("split", pa.int8()),
                           ("ids", pa.list_(pa.int32())), ("src", pa.int8())])
# Sequences per window over which a mix's shares are measured (every window of that many
# consecutive sequences), and a finer window beside it.
MIX_WINDOW_SEQUENCES = 1000
MIX_FINE_WINDOW_SEQUENCES = 100


class PackConfig(StageConfig):
    seq_len: int = Field(default=2048, ge=8, le=1_048_576)
    # Ids per row of final/<split>: seq_len, or seq_len + 1 (2,049 for 2,048, as DCLM's rows and
    # each sample Megatron's GPTDataset draws), for a trainer that takes row[:-1] as the input
    # and row[1:] as the labels. Rows are cut one after another either way: no id is in two rows.
    row_len: Literal["seq_len", "seq_len_plus_one"] = "seq_len"
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


def row_tokens(cfg: PackConfig) -> int:
    """Ids per row of final/<split>."""
    return cfg.seq_len + (cfg.row_len == "seq_len_plus_one")


def steps_per_epoch(tokens: int, batch_size: int, seq_len: int) -> int:
    """Optimizer steps to see `tokens` once at batch_size x seq_len tokens per step."""
    return math.ceil(tokens / (batch_size * seq_len))


def with_eos(ids: pa.ListArray | pa.ChunkedArray, eos_id: int) -> tuple[np.ndarray, np.ndarray]:
    """Documents' token lists as one int32 stream with EOS after each, and each one's length
    (EOS included)."""
    if isinstance(ids, pa.ChunkedArray):
        ids = ids.combine_chunks() if ids.num_chunks else pa.array([], pa.list_(pa.int32()))
    lengths = pc.list_value_length(ids).to_numpy(zero_copy_only=False).astype(np.int64) + 1
    flat = pc.list_flatten(ids).to_numpy(zero_copy_only=False)
    ends = np.cumsum(lengths)
    out = np.empty(int(ends[-1]) if len(ends) else 0, np.int32)
    body = np.ones(len(out), bool)
    body[ends - 1] = False
    out[body] = flat
    out[ends - 1] = eos_id
    return out, lengths


def order_pieces(rows: np.ndarray, tokens: np.ndarray, step: int) -> Iterator[np.ndarray]:
    """`rows` cut, in order, into pieces of about `step` tokens (`tokens[row]` each; a piece
    ends at the first row that reaches its share, so it may pass it by one document); one
    empty piece when there are no rows."""
    if not len(rows):
        yield rows
        return
    ends = np.cumsum(tokens[rows])
    cuts = np.searchsorted(ends, np.arange(step, int(ends[-1]), step, dtype=np.int64), side="left") + 1
    bounds = np.unique(np.concatenate([[0], cuts, [len(rows)]]))
    for a, b in zip(bounds[:-1].tolist(), bounds[1:].tolist()):
        yield rows[a:b]


def plan_buckets(bin_bytes: np.ndarray, limit: int) -> list[tuple[int, int]]:
    """Consecutive bins grouped into buckets of at most `limit` bytes ([lo, hi) bin ranges);
    a bin larger than the limit is a bucket alone. Empty bins join their neighbours."""
    buckets, lo, size = [], 0, 0
    for b, nbytes in enumerate(bin_bytes.tolist()):
        if b > lo and size + nbytes > limit:
            buckets.append((lo, b))
            lo, size = b, 0
        size += nbytes
    buckets.append((lo, len(bin_bytes)))
    return buckets


def contiguous_shards(rows: int, num_shards: int) -> list[tuple[int, int]]:
    """[start, end) rows of each shard, as datasets' Dataset.shard(contiguous=True) cuts them."""
    div, mod = divmod(rows, num_shards)
    out = []
    for i in range(num_shards):
        start = div * i + min(i, mod)
        out.append((start, start + div + (1 if i < mod else 0)))
    return out


def read_tokens(streams: list[RunPath], offsets: np.ndarray, t0: int, t1: int) -> np.ndarray:
    """Tokens [t0, t1) of a split's stream, stored as one file per bucket (bucket k holds
    [offsets[k], offsets[k+1])): range reads of the files it spans."""
    parts = []
    k = int(np.searchsorted(offsets, t0, side="right")) - 1
    while t0 < t1:
        lo, hi = int(offsets[k]), int(offsets[k + 1])
        take = min(t1, hi) - t0
        if take > 0:
            with streams[k].open_input() as f:
                f.seek((t0 - lo) * 4)
                parts.append(np.frombuffer(f.read(take * 4), np.int32))
            t0 += take
        k += 1
    return np.concatenate(parts) if parts else np.zeros(0, np.int32)


class Pack(GlobalStage):
    name = "pack"
    summary = "tokenize, shuffle, EOS between documents, pack into seq_len int32 sequences (final/)"
    Config = PackConfig
    engines = ("tokenizers", "datasets", "xxhash")
    reads = {TOKENIZER_FILE: "tokenizer"}
    publishes = {"final": "final"}

    def _tokenizer(self):
        # The runner resolves which tokenizer.json (the one the tokenizer stage publishes).
        path = self.ctx.read_paths.get(TOKENIZER_FILE)
        if path is None or not as_run_path(path).exists():
            where = path or self.ctx.run_dir / "tokenizer" / TOKENIZER_FILE
            raise UserError(f"pack needs a tokenizer: {where} does not exist; run the tokenizer stage first")
        return tokenizer_from_json(as_run_path(path).read_text())

    # -- 1. map: tokenize one input shard ----------------------------------------------------
    @shard_task
    def tokenize_shard(self, task) -> dict:
        """One shard's documents tokenized into work/tokens/NAME.arrow (an Arrow IPC file of
        (key, global position, split, ids), in key-bin order, WRITE_CHUNK rows per batch) and
        NAME.counts.npy (per bin: rows, documents and tokens by split); the documents pass
        through unchanged as the output shard."""
        from pipeline.tasks import rewrite_shard
        if getattr(self, "_encode", None) is None:
            tok = self._tokenizer()
            # No offsets needed: the fast path skips computing them (tokenizers >= 0.21).
            self._encode = getattr(tok, "encode_batch_fast", tok.encode_batch)
        shuffle = task.params["shuffle"]
        threads = task.params.get("encode_threads", 1)
        sources = task.params.get("sources") or []
        src = sources.index(source_of_shard(task.shard.name)) if sources else 0
        # A weighted source's documents' repeat factors, and the rules each matches (mix repeat_by).
        rules = (task.params.get("repeat_by") or {}).get(source_of_shard(task.shard.name))
        factors: list[tuple[np.ndarray, np.ndarray]] = []
        parts: list[pa.Table] = []

        def tokenize(table: pa.Table, row0: int) -> pa.Table:
            if "split" in table.column_names:
                split = pc.if_else(pc.equal(table["split"], "validation"), 1, 0).cast(pa.int8())
            else:
                split = pa.array(np.zeros(table.num_rows, np.int8))
            with tokenizers_threads(threads):
                encodings = self._encode(table["text"].to_pylist(), add_special_tokens=False)
            ids = pa.array([e.ids for e in encodings], pa.list_(pa.int32()))
            n = table.num_rows
            keys = shuffle_keys(table["id"].to_pylist(), self.ctx.seed) if shuffle else np.zeros(n, np.uint64)
            parts.append(pa.table({"key": pa.array(keys), "pos": pa.array(np.arange(row0, row0 + n, dtype=np.int64)),
                                   "split": split, "ids": ids, "src": pa.array(np.full(n, src, np.int8))},
                                  schema=BUCKET_SCHEMA))
            if rules:
                factors.append(repeat_factors(table, rules))
            return table
        marker = rewrite_shard(self, task, tokenize)
        docs = pa.concat_tables(parts) if parts else BUCKET_SCHEMA.empty_table()
        folder = task.folder / "work" / "tokens"
        order = _write_tokens(folder, task.shard.name, docs, shuffle)
        if rules:
            # Beside the token file, in its row order.
            f = np.concatenate([x for x, _ in factors]) if factors else np.zeros(0)
            m = np.concatenate([b for _, b in factors]) if factors else np.zeros(0, np.int64)
            save_npy(folder / f"{task.shard.name}.factor.npy", f[order])
            save_npy(folder / f"{task.shard.name}.rules.npy", m[order])
        return marker

    @shard_task
    def repeat_shard(self, task) -> dict:
        """A mix's repetitions of one shard's train documents: copy K (params `copies`: [K,
        cutoff]) with its own shuffle keys, all of them (cutoff 1) or, for the partial last, those
        whose seeded draw is below the cutoff, as the token file NAME~K like a shard's own;
        positions after every original row."""
        from pipeline.engines.mixing import copy_keys, partial_draws
        p = task.params
        folder = task.folder / "work" / "tokens"
        with (folder / f"{p['name']}.arrow").open_input() as f:
            docs = pa.ipc.open_file(f).read_all()
        train = pc.equal(docs["split"], 0)
        docs = docs.filter(train)
        keys = docs["key"].to_numpy()
        copies = p.get("copies", [])
        if "weighted" in p:
            from pipeline.engines.mixing import weighted_copies
            factors = load_npy(folder / f"{p['name']}.factor.npy")[train.to_numpy(zero_copy_only=False)]
            extra = weighted_copies(factors, keys, p["weighted"]["epochs"], p["weighted"]["cutoff"])
            copies = [[k, None] for k in range(1, int(extra.max(initial=0)) + 1)]
        out = []
        for copy, cutoff in copies:
            if cutoff is None:                  # a weighted source: the documents with that many copies
                part = docs.filter(pa.array(extra >= copy))
                cutoff = 1.0
            else:
                part = docs
            part = part if cutoff >= 1 else part.filter(pa.array(partial_draws(keys, copy) < cutoff))
            kept_keys = part["key"].to_numpy()
            part = part.set_column(0, "key", pa.array(copy_keys(kept_keys, copy)))
            part = part.set_column(1, "pos", pc.add(part["pos"], pa.scalar(copy * p["rows"], pa.int64())))
            name = f"{p['name']}~{copy}"
            _write_tokens(folder, name, part, True)
            out.append(name)
        return {"names": out}

    # -- 3. map: one bucket in packing order ---------------------------------------------------
    @shard_task
    def order_bucket(self, task) -> dict:
        """A bucket's documents from every shard (row ranges of their token files), sorted by
        (key, position), EOS after each: work/stream/<split>/K.bin (int32) and K.len.npy
        (document lengths, EOS included; with a mix, K.src.npy: their sources, and K.rep.npy:
        1 for a repeated copy, 0 for a document's own)."""
        work = task.folder / "work"
        p = task.params
        parts = []
        for name, r0, r1 in p["shards"]:
            if r1 <= r0:
                continue
            with (work / "tokens" / f"{name}.arrow").open_input() as f:
                reader = pa.ipc.open_file(f)
                for i in range(r0 // WRITE_CHUNK, (r1 - 1) // WRITE_CHUNK + 1):
                    batch = reader.get_batch(i)
                    lo, hi = max(r0 - i * WRITE_CHUNK, 0), min(r1 - i * WRITE_CHUNK, batch.num_rows)
                    # A copy of the bucket's rows: a slice would keep the whole batch read (every
                    # shard's, where a bucket takes an eighth of each) alive while the bucket is.
                    parts.append(pa.Table.from_batches([batch]).take(pa.array(np.arange(lo, hi))))
                    del batch
        # One chunk: Arrow's take on a chunked list column first concatenates the whole column,
        # which each piece below would pay again (a bucket's copy per piece).
        table = pa.concat_tables(parts) if parts else BUCKET_SCHEMA.empty_table()
        del parts
        nbytes = table.nbytes
        table = table.combine_chunks()
        order = (pc.sort_indices(table, [("key", "ascending"), ("pos", "ascending")]).to_numpy()
                 if p["shuffle"] else np.arange(table.num_rows))
        codes = table["split"].to_numpy(zero_copy_only=False)[order]
        # Tokens of each document, EOS included: a split's rows are taken in order a piece of
        # about ORDER_PIECE_TOKENS at a time, each piece's stream appended to the split's file,
        # so ordering holds the bucket as read and one piece, not a sorted copy of the bucket
        # and its whole stream (the same bytes: the stream is the pieces' streams one after another).
        doc_tokens = pc.list_value_length(table["ids"]).to_numpy(zero_copy_only=False).astype(np.int64) + 1
        for code, split in enumerate(SPLITS):
            stem = work / "stream" / split / f"{p['bucket']:05d}"
            target = stem.with_name(stem.name + ".bin")
            tmp = target.with_name(target.name + ".tmp") if target.renames else target
            lengths, srcs, reps = [], [], []
            with tmp.open_output() as out:
                for rows in order_pieces(order[codes == code], doc_tokens, ORDER_PIECE_TOKENS):
                    part = table.take(pa.array(rows))
                    flat, n = with_eos(part["ids"], p["eos"])
                    out.write(memoryview(flat))
                    lengths.append(n)
                    if p.get("mix"):
                        srcs.append(part["src"].to_numpy(zero_copy_only=False))
                        # Repeated copies sit at positions after every original row (repeat_shard).
                        reps.append((part["pos"].to_numpy(zero_copy_only=False) >= p["original_rows"]).astype(np.int8))
                    del part, flat
            if tmp != target:
                tmp.rename(target)
            save_npy(stem.with_name(stem.name + ".len.npy"), np.concatenate(lengths))
            if p.get("mix"):
                save_npy(stem.with_name(stem.name + ".src.npy"), np.concatenate(srcs))
                save_npy(stem.with_name(stem.name + ".rep.npy"), np.concatenate(reps))
        return {"bytes": int(nbytes)}

    # -- 4. map: one shard of final/<split> ----------------------------------------------------
    @shard_task
    def write_sequences(self, task) -> dict:
        """Rows [r0, r1) of final/<split>, cut from the split's token stream at their global
        offsets, written as datasets' save_to_disk writes a shard (the same schema and record
        batches: pipeline/stages/pack/hf_arrow.py), so the bytes are those of one sequential save_to_disk.
        The split's first shard also writes its state.json and dataset_info.json."""
        p = task.params
        seq_len, split = p["seq_len"], p["split"]
        folder = task.folder
        streams = [folder / "work" / "stream" / split / f"{k:05d}.bin" for k in range(p["buckets"])]
        offsets = np.asarray(p["offsets"], np.int64)
        target = folder / "final" / split / f"data-{p['index']:05d}-of-{p['of']:05d}.arrow"
        tmp = target.with_name(target.name + ".tmp") if target.renames else target
        writer = hf_arrow.SequenceShardWriter(tmp.open_output(), seq_len)
        r0, r1 = p["rows"]
        for c0 in range(r0, r1, p["writer_batch_size"]):
            c1 = min(c0 + p["writer_batch_size"], r1)
            writer.write(pa.array(read_tokens(streams, offsets, c0 * seq_len, c1 * seq_len), pa.int32()))
        writer.close()
        if tmp != target:
            tmp.rename(target)
        if p["index"] == 0:
            (folder / "final" / split / hf_arrow.STATE_FILE).write_text(
                hf_arrow.dataset_state(split, p["split_rows"], seq_len, p["of"]))
            (folder / "final" / split / hf_arrow.INFO_FILE).write_text(hf_arrow.dataset_info(seq_len))
        return {"rows": r1 - r0}

    # -- the driver: 2. combine counts, and the steps in order ----------------------------------
    def run(self, inputs, output) -> dict:
        cfg = self.config
        tok = self._tokenizer()
        eos = tok.token_to_id(cfg.eos_token)
        if eos is None:
            raise UserError(f"stages.pack.eos_token: {cfg.eos_token!r} is not in the tokenizer's vocabulary")
        vocab_size = tok.get_vocab_size()
        work, final = output.folder / "work", output.folder / "final"
        work.rmtree()
        final.rmtree()
        mix = self.ctx.mix if self.ctx is not None else None
        if mix and not cfg.shuffle:
            raise UserError("stages.pack.shuffle: false: a mix interleaves its sources by the shuffle; "
                            "set shuffle: true (or drop mix:)")
        # With workers, each encodes on two threads: two workers on two cores lose nothing to
        # it, and the last shards, once the other workers are done, take half the time.
        encode_threads = min(2, inputs.driver_threads(self))
        repeat_by = {s: m["repeat_by"] for s, m in (mix or {}).items() if m.get("repeat_by")}
        inputs.map(self.tokenize_shard, shuffle=cfg.shuffle, encode_threads=encode_threads,
                   **({"sources": sorted(mix)} if mix else {}), **({"repeat_by": repeat_by} if repeat_by else {}))
        names = inputs.names()
        mix_plan = self._repeat(inputs, work, names) if mix else None
        original_rows = None
        if mix_plan is not None:
            names = names + mix_plan.pop("copies")
            original_rows = mix_plan.pop("original_rows")
        tasks, bucket_counts, shuffle_stats = self._plan(work, names, eos, inputs.driver_threads(self))
        if mix:
            tasks = [{**t, "mix": True, "original_rows": original_rows} for t in tasks]
        sizes = inputs.map_tasks(self.order_bucket, tasks)
        # Where each bucket's tokens start in its split's stream: the global offsets.
        offsets = {s: np.concatenate([[0], np.cumsum(bucket_counts[:, 3 + i])]).astype(np.int64)
                   for i, s in enumerate(SPLITS)}
        tokens = {s: int(offsets[s][-1]) for s in SPLITS}
        row_len = row_tokens(cfg)
        sequences = {s: tokens[s] // row_len for s in SPLITS}
        docs = {s: int(bucket_counts[:, 1 + i].sum()) for i, s in enumerate(SPLITS)}
        if mix_plan is not None:
            mix_plan["windows"], mix_plan["windows_fine"] = self._window_shares(
                work, len(tasks), sorted(mix), (MIX_WINDOW_SEQUENCES, MIX_FINE_WINDOW_SEQUENCES))
        shard_counts = self._write_datasets(inputs, offsets, sequences, len(tasks)) \
            if "datasets" in cfg.formats else {}
        self._write_token_files(work, final, len(tasks), vocab_size, eos)
        megatron = self._write_megatron_sources(work, final, len(tasks), vocab_size, mix_plan, sequences["train"]) \
            if mix and "megatron" in cfg.formats else None
        work.rmtree()
        packed = {s: sequences[s] * row_len for s in SPLITS}
        stats = {
            "seq_len": cfg.seq_len, "row_len": row_len, "batch_size": cfg.batch_size, "formats": list(cfg.formats),
            "tokens": sum(tokens.values()), "packed_tokens": sum(packed.values()),
            "leftover_tokens": sum(tokens[s] - packed[s] for s in SPLITS),
            "sequences": sum(sequences.values()),
            "splits": {s: {"documents": docs[s], "tokens": tokens[s], "sequences": sequences[s],
                           "leftover_tokens": tokens[s] - packed[s], "shards": shard_counts.get(s)} for s in SPLITS},
            "steps_per_epoch": steps_per_epoch(packed["train"], cfg.batch_size, row_len),
            "eos_token": cfg.eos_token, "eos_id": eos,
            "shuffle": {"enabled": cfg.shuffle},
        }
        if cfg.shuffle:
            stats["shuffle"].update({**shuffle_stats, "max_bucket_bytes": max((r["bytes"] for r in sizes), default=0)})
        if mix_plan is not None:
            stats["mix"] = mix_plan
        if megatron is not None:
            stats["megatron"] = megatron
        return stats

    def dependencies(self) -> Dependencies:
        # A multi-source run's mix decides what is packed.
        return Dependencies(values=(self.ctx.mix,) if self.ctx is not None and self.ctx.mix else ())

    def _repeat(self, inputs, work: RunPath, names: list[str]) -> dict:
        """A mix applied: each source's epochs (pipeline/engines/mixing.py), its repeated train documents
        written as extra token files (tasks on the executor), and the tokens per source before
        and after. Returns the stats' `mix`, with `copies`: the extra token files' names."""
        import math

        from pipeline.documents import source_of_shard
        from pipeline.engines.mixing import plan_epochs
        mix = self.ctx.mix
        counts = {name: load_npy(work / "tokens" / f"{name}.counts.npy") for name in names}
        source = {name: source_of_shard(name) for name in names}
        train = {s: int(sum(c[:, 3].sum() for n, c in counts.items() if source[n] == s)) for s in mix}
        validation = {s: int(sum(c[:, 4].sum() for n, c in counts.items() if source[n] == s)) for s in mix}
        # A weighted source (repeat_by) takes its share in weighted tokens: each train document's
        # tokens times its factor; its epochs then scale every document's factor alike.
        weighted = {s: self._weighted_docs(work, [n for n in names if source[n] == s]) for s in mix
                    if mix[s].get("repeat_by")}
        epochs = plan_epochs({**train, **{s: int(round(w["weighted"])) for s, w in weighted.items()}}, mix)
        rows = int(sum(c[:, 0].sum() for c in counts.values()))
        cutoffs = {s: self._cutoff(work, [n for n in names if source[n] == s], epochs[s], train[s])
                   for s in mix if epochs[s] % 1 > 1e-9 and s not in weighted}
        for s, w in weighted.items():
            w["cutoff"] = self._weighted_cutoff(w, epochs[s])
        tasks = []
        for name in names:
            if source[name] in weighted:
                w = weighted[source[name]]
                tasks.append({"name": name, "rows": rows, "weighted": {"epochs": epochs[source[name]],
                                                                        "cutoff": w["cutoff"]}})
                continue
            e = epochs[source[name]]
            last = math.ceil(e - 1e-9) - 1
            copies = [[k, 1.0 if k < last or e % 1 <= 1e-9 else cutoffs[source[name]]] for k in range(1, last + 1)]
            if copies:
                tasks.append({"name": name, "copies": copies, "rows": rows})
        made = [n for r in inputs.map_tasks(self.repeat_shard, tasks) for n in r["names"]]
        after = dict(train)
        for name in made:
            after[source[name.split("~")[0]]] += int(load_npy(work / "tokens" / f"{name}.counts.npy")[:, 3].sum())
        total_weight = sum(m["weight"] for m in mix.values())
        total = sum(after.values())
        plan = {"copies": made, "original_rows": rows, "train_tokens": total, "sources": {s: {
            "weight": round(mix[s]["weight"] / total_weight, 6), "max_epochs": mix[s]["max_epochs"],
            "epochs": round(epochs[s], 4), "train_tokens_before": train[s], "train_tokens_after": after[s],
            "repeated_tokens": after[s] - train[s], "share": round(after[s] / total, 6) if total else 0.0,
            "validation_tokens": validation[s]} for s in sorted(mix)}}
        for s, w in weighted.items():
            plan["sources"][s]["repeat_by"] = _repeat_by_stats(w, epochs[s], mix[s]["repeat_by"])
        return plan

    def _weighted_docs(self, work: RunPath, names: list[str]) -> dict:
        """A weighted source's train documents on the driver: shuffle key, length (EOS included),
        repeat factor and matched rules of each (32 bytes a document), and its weighted tokens."""
        keys, lengths, factors, rules = [], [], [], []
        for name in names:
            with (work / "tokens" / f"{name}.arrow").open_input() as f:
                docs = pa.ipc.open_file(f).read_all()
            train = pc.equal(docs["split"], 0).to_numpy(zero_copy_only=False)
            keys.append(docs["key"].to_numpy()[train])
            lengths.append(pc.list_value_length(docs["ids"]).to_numpy(zero_copy_only=False).astype(np.int64)[train] + 1)
            factors.append(load_npy(work / "tokens" / f"{name}.factor.npy")[train])
            rules.append(load_npy(work / "tokens" / f"{name}.rules.npy")[train])
        out = {"keys": np.concatenate(keys) if keys else np.zeros(0, np.uint64),
               "lengths": np.concatenate(lengths) if lengths else np.zeros(0, np.int64),
               "factors": np.concatenate(factors) if factors else np.zeros(0),
               "rules": np.concatenate(rules) if rules else np.zeros(0, np.int64)}
        out["weighted"] = float(np.dot(out["factors"], out["lengths"]))
        return out

    def _weighted_cutoff(self, w: dict, epochs: float) -> float:
        """The ranked-draw cutoff of a weighted source's fractions (mixing.weighted_parts): the
        documents by rising ranked draw until the source holds epochs x its weighted tokens, to
        the nearest document. Sets w["copies"]: each document's repeated copies."""
        from pipeline.engines.mixing import draw_cutoff, weighted_parts
        whole, ranked = weighted_parts(w["factors"], w["keys"], epochs)
        part = np.isfinite(ranked)
        need = epochs * w["weighted"] - float(np.dot(whole, w["lengths"]))
        cutoff = draw_cutoff(ranked[part], w["lengths"][part], need, past_end=float(2 ** 64)) if part.any() else 1.0
        w["copies"] = whole - 1 + (ranked < cutoff)
        return cutoff

    def _cutoff(self, work: RunPath, names: list[str], epochs: float, train_tokens: int) -> float:
        """The draw cutoff of a source's partial last copy: its documents by rising draw until
        they hold the tokens its fractional epoch asks (on the driver: key and length of each
        of the source's train documents, 16 bytes each)."""
        import math

        from pipeline.engines.mixing import draw_cutoff, partial_draws
        keys, lengths = [], []
        for name in names:
            with (work / "tokens" / f"{name}.arrow").open_input() as f:
                docs = pa.ipc.open_file(f).read_all()
            docs = docs.filter(pc.equal(docs["split"], 0))
            keys.append(docs["key"].to_numpy())
            lengths.append(pc.list_value_length(docs["ids"]).to_numpy(zero_copy_only=False).astype(np.int64) + 1)
        last = math.ceil(epochs - 1e-9) - 1
        keys = np.concatenate(keys) if keys else np.zeros(0, np.uint64)
        lengths = np.concatenate(lengths) if lengths else np.zeros(0, np.int64)
        return draw_cutoff(partial_draws(keys, last), lengths, (epochs - last) * train_tokens)

    def _window_shares(self, work: RunPath, n_buckets: int, sources: list[str], window_sizes) -> list[dict]:
        """For each size in `window_sizes`: each source's share of the train tokens in every window
        of that many consecutive packed sequences (moved one sequence at a time; all of them, one
        window, when the split is shorter), the lowest and highest. The streams are read once."""
        from pipeline.engines.mixing import sliding_window_shares
        stems = [work / "stream" / "train" / f"{k:05d}" for k in range(n_buckets)]
        lengths = np.concatenate([load_npy(st.with_name(st.name + ".len.npy")) for st in stems]) if stems else \
            np.zeros(0, np.int64)
        srcs = np.concatenate([load_npy(st.with_name(st.name + ".src.npy")) for st in stems]).astype(np.int64) \
            if stems else np.zeros(0, np.int64)
        row_len = row_tokens(self.config)
        out = []
        for sequences in window_sizes:
            window = max(1, min(sequences, int(lengths.sum()) // row_len))
            shares = sliding_window_shares(lengths, srcs, len(sources), row_len, window)
            out.append({"sequences_per_window": window, "step_sequences": 1, "windows": int(len(shares)),
                        "min_share": {s: round(float(shares[:, i].min()), 6) for i, s in enumerate(sources)}
                        if len(shares) else {},
                        "max_share": {s: round(float(shares[:, i].max()), 6) for i, s in enumerate(sources)}
                        if len(shares) else {}})
        return out

    def _write_megatron_sources(self, work: RunPath, final: RunPath, n_buckets: int, vocab_size: int,
                                mix_plan: dict, train_sequences: int) -> dict:
        """A mix for Megatron-LM's own blending: one indexed dataset per source and split
        (final/megatron/SOURCE/<split>_text_document), each source's documents once (no repeated
        copy), in packing order; and the --data-path value that blends them by the mix's
        weights, in the stats and in final/megatron/data_path.txt (prefixes relative to the run
        folder). Megatron's BlendedDataset draws each dataset's share of the samples by weight and
        repeats a dataset as it needs, so the blend of --train-samples (the mix's train
        sequences) samples repeats the sources as this run's mix does."""
        sources = sorted(mix_plan["sources"])
        dtype = megatron_dtype(vocab_size)
        files: dict[str, dict] = {s: {} for s in sources}
        for split in SPLITS:
            writers = [MegatronWriter(final / "megatron" / s / f"{split}_text_document", dtype) for s in sources]
            for k in range(n_buckets):
                stem = work / "stream" / split / f"{k:05d}"
                flat = np.frombuffer(stem.with_name(stem.name + ".bin").read_bytes(), np.int32)
                lengths = load_npy(stem.with_name(stem.name + ".len.npy"))
                src = load_npy(stem.with_name(stem.name + ".src.npy"))
                own = load_npy(stem.with_name(stem.name + ".rep.npy")) == 0
                for i, w in enumerate(writers):
                    docs = own & (src == i)
                    w.add(flat[np.repeat(docs, lengths)], lengths[docs])
            for s, w in zip(sources, writers):
                w.close()
                done = w.all_lengths()
                files[s][split] = {"prefix": f"final/megatron/{s}/{split}_text_document",
                                   "documents": int(len(done)), "tokens": int(done.sum())}

        def blend(weights: dict[str, float], split: str) -> str:
            return " ".join(f"{weights[s]:.6g} {files[s][split]['prefix']}" for s in sources)
        train_weights = {s: mix_plan["sources"][s]["weight"] for s in sources}
        valid_total = sum(files[s]["validation"]["tokens"] for s in sources)
        valid_weights = {s: files[s]["validation"]["tokens"] / valid_total if valid_total else 0.0 for s in sources}
        data_path = blend(train_weights, "train")
        (final / "megatron" / "data_path.txt").write_text(data_path + "\n")
        return {"data_path": data_path, "valid_data_path": blend(valid_weights, "validation") if valid_total else None,
                "train_samples": train_sequences, "files": files}

    def manifest_fields(self, stats: dict) -> dict:
        return {k: stats[k] for k in ("tokens", "sequences", "leftover_tokens", "seq_len", "row_len", "batch_size",
                                      "steps_per_epoch", "eos_token", "eos_id", "splits", "mix", "megatron")
                if k in stats}

    def empty_output_reason(self, stats: dict) -> str | None:
        if stats.get("sequences"):
            return None
        return (f"stage 'pack': {stats.get('tokens', 0)} tokens are fewer than one sequence of "
                f"{stats.get('seq_len')}: no sequence was packed")

    def report_section(self, stats: dict, run):
        from pipeline.sections import Section, table
        near = run.manifest.get("validation_near_train")
        figures = {k: stats[k] for k in ("tokens", "sequences", "leftover_tokens", "steps_per_epoch", "seq_len",
                                         "batch_size") if k in stats}
        figures["validation_near_train"] = near
        rows = [[s, v["documents"], v["tokens"], v["sequences"], v["leftover_tokens"]]
                for s, v in stats["splits"].items()]
        body = (table(["split", "documents", "tokens", "sequences", "leftover tokens"], rows)
                + f"<p>{stats['sequences']:,} sequences of {stats['seq_len']} tokens; "
                f"{stats['steps_per_epoch']:,} steps per epoch at batch size {stats['batch_size']}. "
                f"Validation documents sharing an LSH bucket with a train document: "
                f"{'not checked' if near is None else near}.</p>")
        mix = stats.get("mix")
        if mix:
            figures["mix"] = mix
            windows = [w for w in (mix["windows"], mix.get("windows_fine")) if w]
            body += ("<h3>Mix of sources (train tokens)</h3>" + table(
                ["source", "weight", "share", "epochs", "tokens before", "tokens after", "repeated"]
                + [f"share per {w['sequences_per_window']:,} sequences (min-max)" for w in windows],
                [[s, v["weight"], v["share"], v["epochs"], v["train_tokens_before"], v["train_tokens_after"],
                  v["repeated_tokens"]] + [f"{w['min_share'].get(s, 0):.3f}-{w['max_share'].get(s, 0):.3f}"
                                           for w in windows]
                 for s, v in mix["sources"].items()])
                + f"<p>Over every window of consecutive sequences, moved one sequence at a time "
                f"({windows[0]['windows']:,} windows of {windows[0]['sequences_per_window']:,}).</p>")
            for src, v in mix["sources"].items():
                rb = v.get("repeat_by")
                if not rb:
                    continue
                body += (f"<h3>Repeats by metadata: {src}</h3><p>Each train document {v['epochs']:g} x its factor "
                         "times (1 plus the adds of the rules it matches; validation once):</p>"
                         + table(["factor", "documents", "tokens before", "tokens after", "repeated", "times"],
                                 [[f["factor"], f["documents"], f["tokens_before"], f["tokens_after"],
                                   f["repeated_tokens"], f["times"]] for f in rb["factors"]])
                         + table(["rule", "adds", "documents matched", "their tokens"],
                                 [[r["rule"], r["add"], r["documents"], r["tokens_before"]] for r in rb["rules"]]))
        megatron = stats.get("megatron")
        if megatron:
            figures["megatron"] = megatron
            body += ("<h3>Megatron-LM blend</h3><p>One indexed dataset per source, each source's documents once; "
                     f"Megatron's blending by the mix's weights: <code>--data-path {megatron['data_path']}</code> "
                     f"(final/megatron/data_path.txt), {megatron['train_samples']:,} train samples.</p>")
        return Section("Packed sequences", body, figures=figures)

    def _plan(self, work: RunPath, names: list[str], eos: int, workers: int = 1
              ) -> tuple[list[dict], np.ndarray, dict]:
        """Bucket tasks from the shards' counts, and each bucket's counts (rows x COUNTS):
        buckets within the memory bound, and at least one per worker where the corpus is more
        than MIN_SPLIT_BYTES a worker."""
        common = {"shuffle": self.config.shuffle, "eos": eos}
        if not self.config.shuffle:
            # Corpus order: each shard is a bucket, read whole.
            counts = [load_npy(work / "tokens" / f"{name}.counts.npy")[0] for name in names]
            tasks = [{"bucket": k, "shards": [[name, 0, int(c[0])]], **common} for k, (name, c) in
                     enumerate(zip(names, counts))]
            return tasks, np.stack(counts) if counts else np.zeros((0, len(COUNTS)), np.int64), {}
        # The shards' counts summed as they are read; of each shard only where each bin's rows
        # start is kept (a fifth of its counts): the driver's memory grows by 8 KB a shard.
        total = np.zeros((BINS, len(COUNTS)), np.int64)
        row_starts = []
        for name in names:
            c = load_npy(work / "tokens" / f"{name}.counts.npy")
            total += c
            row_starts.append(np.concatenate([[0], np.cumsum(c[:, 0])]))
        docs = total[:, 0]
        id_bytes = (total[:, 3] + total[:, 4] - docs) * 4
        memory = int(self.config.shuffle_memory_mb * 2**20)
        bin_bytes = id_bytes + ROW_OVERHEAD * docs
        limit = min(int(memory / BUCKET_SHARE), max(-(-int(bin_bytes.sum()) // workers), MIN_SPLIT_BYTES))
        buckets = plan_buckets(bin_bytes, limit)
        tasks = [{"bucket": k, "shards": [[name, int(r[lo]), int(r[hi])] for name, r in zip(names, row_starts)
                                          if r[hi] > r[lo]], **common} for k, (lo, hi) in enumerate(buckets)]
        bucket_counts = np.stack([total[lo:hi].sum(axis=0) for lo, hi in buckets])
        return tasks, bucket_counts, {"memory_bytes": memory, "buckets": len(buckets), "bins": BINS}

    def _write_datasets(self, inputs, offsets: dict, sequences: dict, n_buckets: int) -> dict:
        """final/<split> in datasets' save_to_disk layout, its shards written in parallel (the
        first shard of a split writes its state.json and dataset_info.json)."""
        seq_len = row_tokens(self.config)          # the width of a row
        tasks, num_shards = [], {}
        for split in SPLITS:
            n = sequences[split]
            nbytes = n * seq_len * 4
            # As save_to_disk cuts (about 500 MB per shard unless num_shards is set).
            k = min(self.config.num_shards or max(1, math.ceil(nbytes / 500e6)), max(1, n))
            num_shards[split] = k
            tasks += [{"split": split, "index": i, "of": k, "rows": [r0, r1], "seq_len": seq_len, "split_rows": n,
                       "buckets": n_buckets, "offsets": offsets[split].tolist(),
                       "writer_batch_size": hf_arrow.writer_batch_size(n, nbytes)}
                      for i, (r0, r1) in enumerate(contiguous_shards(n, k))]
        inputs.map_tasks(self.write_sequences, tasks)
        return num_shards

    def _write_token_files(self, work: RunPath, final: RunPath, n_buckets: int, vocab_size: int, eos: int) -> None:
        """Megatron and flat files: every token of each split in packing order, the buckets'
        streams appended in order by the driver (sequential reads and writes)."""
        cfg = self.config
        writers = {s: [] for s in SPLITS}
        if "megatron" in cfg.formats:
            for s in SPLITS:
                writers[s].append(MegatronWriter(final / "megatron" / f"{s}_text_document", megatron_dtype(vocab_size)))
        if "flat" in cfg.formats:
            for s in SPLITS:
                writers[s].append(FlatWriter(final / "flat" / s, flat_dtype(vocab_size, cfg.flat_dtype)))
        if not any(writers.values()):
            return
        for s in SPLITS:
            for k in range(n_buckets):
                stem = work / "stream" / s / f"{k:05d}"
                flat = np.frombuffer(stem.with_name(stem.name + ".bin").read_bytes(), np.int32)
                lengths = load_npy(stem.with_name(stem.name + ".len.npy"))
                for w in writers[s]:
                    w.add(flat, lengths)
            for w in writers[s]:
                w.close()
        if "flat" in cfg.formats:
            FlatWriter.write_meta(
                final / "flat",
                {s: w for s in SPLITS for w in writers[s] if isinstance(w, FlatWriter)},
                vocab_size=vocab_size,
                eos_id=eos,
                seq_len=cfg.seq_len,
            )


def _repeat_by_stats(w: dict, epochs: float, rules: list[dict]) -> dict:
    """A weighted source's repeats in the manifest: per factor (1 plus the adds a document
    matched), its train documents and their tokens before and after the mix, and the times each
    is there on average (epochs x factor); per rule, the documents it matched and their tokens."""
    lengths, factors, copies = w["lengths"], w["factors"], w["copies"]
    values = np.round(factors, 6)
    by_factor = []
    for v in np.unique(values):
        sel = values == v
        before = int(lengths[sel].sum())
        after = int(((copies[sel] + 1) * lengths[sel]).sum())
        by_factor.append({"factor": float(v), "documents": int(sel.sum()), "tokens_before": before,
                          "tokens_after": after, "repeated_tokens": after - before,
                          "times": round(after / before, 4) if before else 0.0,
                          "planned_times": round(epochs * float(v), 4)})
    by_rule = []
    for i, rule in enumerate(rules):
        sel = (w["rules"] >> np.int64(i)) & 1 == 1
        by_rule.append({"rule": rule["label"], "column": rule["column"], "add": rule["add"],
                        "documents": int(sel.sum()), "tokens_before": int(lengths[sel].sum())})
    return {"weighted_tokens": int(round(w["weighted"])), "factors": by_factor, "rules": by_rule}


def _write_tokens(folder: RunPath, name: str, docs: pa.Table, shuffle: bool) -> np.ndarray:
    """A shard's tokenized documents as work/tokens/NAME.arrow, in key-bin order, and
    NAME.counts.npy (per bin: rows, documents and tokens by split). Returns the order taken
    (the rows of `docs` as written)."""
    n_bins = BINS if shuffle else 1
    bins = (
        (docs["key"].to_numpy() >> np.uint64(64 - BIN_BITS)).astype(np.int64)
        if shuffle
        else np.zeros(docs.num_rows, np.int64)
    )
    order = np.argsort(bins, kind="stable")
    docs, bins = docs.take(pa.array(order)), bins[order]
    counts = np.zeros((n_bins, len(COUNTS)), np.int64)
    counts[:, 0] = np.bincount(bins, minlength=n_bins)
    lengths = pc.list_value_length(docs["ids"]).to_numpy(zero_copy_only=False).astype(np.int64) + 1
    split = docs["split"].to_numpy(zero_copy_only=False)
    for code in range(len(SPLITS)):
        sel = split == code
        counts[:, 1 + code] = np.bincount(bins[sel], minlength=n_bins)
        counts[:, 3 + code] = np.bincount(bins[sel], weights=lengths[sel], minlength=n_bins).astype(np.int64)
    sink = pa.BufferOutputStream()
    with pa.ipc.new_file(sink, BUCKET_SCHEMA) as writer:
        for batch in docs.combine_chunks().to_batches(max_chunksize=WRITE_CHUNK):
            writer.write_batch(batch)
    (folder / f"{name}.arrow").write_bytes(sink.getvalue().to_pybytes())
    save_npy(folder / f"{name}.counts.npy", counts)
    return order
