"""The pack stage on real abstracts: seeded shuffle in bounded memory, and the Megatron-LM and
flat token outputs round-tripping to the same token ids as the datasets output. The Megatron
files are read here by pipeline.stages.pack.writers.read_megatron, written from the format's specification
(megatron-core itself needs torch; scripts/evaluation/verify_megatron.py reads them with it)."""
import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from conftest import shard_inputs
from pipeline.shards import StageOutput
from pipeline.stages.base import RunContext
from pipeline.stages.pack import BUCKET_SHARE, Pack, PackConfig, shuffle_keys
from pipeline.stages.pack.writers import read_megatron
from pipeline.stages.tokenizer import TOKENIZER_FILE, TokenizerConfig, build_trainer

SEQ_LEN = 256


@pytest.fixture(scope="module")
def corpus(english_texts, tmp_path_factory):
    """1,600 documents (400 real abstracts, each under 4 ids; every 8th in validation) and a
    byte-level BPE trained on the abstracts."""
    texts = english_texts[:400] * 4
    table = pa.table({"id": [f"pmid{i:04d}" for i in range(len(texts))], "text": texts,
                      "split": ["validation" if i % 8 == 0 else "train" for i in range(len(texts))]})
    run_dir = tmp_path_factory.mktemp("packrun")
    tok, trainer = build_trainer(TokenizerConfig(vocab_size=1500))
    tok.train_from_iterator([english_texts[:400]], trainer=trainer)
    (run_dir / "tokenizer").mkdir()
    tok.save(str(run_dir / "tokenizer" / TOKENIZER_FILE))
    return table, run_dir, tok


def run_pack(corpus, folder: Path, seed: int = 5, **options) -> tuple[dict, Path]:
    table, run_dir, _ = corpus
    inputs = shard_inputs(table, folder.with_name(folder.name + "-input"), batch_size=64)
    ctx = RunContext(run_dir=run_dir, seed=seed, read_paths={TOKENIZER_FILE: run_dir / "tokenizer" / TOKENIZER_FILE})
    output = StageOutput(folder, keep_removed_text=False)
    inputs.bind(output)
    stats = Pack(PackConfig(seq_len=SEQ_LEN, **options), ctx).run(inputs, output)
    output.commit({"stage": "pack"}, input_shards=inputs.names())
    return stats, folder / "final"


def packed_documents(final: Path, split: str, tok) -> list[str]:
    """The documents of final/<split> (datasets) in the order they were packed."""
    from datasets import load_from_disk
    ids = np.array(load_from_disk(str(final / split))["input_ids"], np.int64).ravel()
    eos = tok.token_to_id("<|endoftext|>")
    pieces = np.split(ids, np.flatnonzero(ids == eos) + 1)[:-1]
    return [tok.decode(p[:-1].tolist()) for p in pieces]


def files_of(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_shuffle_is_seeded_deterministic_and_bounded_in_memory(corpus, tmp_path):
    table, _, tok = corpus
    bound_mb = 0.07                                              # 73,400 bytes
    stats, final = run_pack(corpus, tmp_path / "a", shuffle_memory_mb=bound_mb)
    shuffle = stats["shuffle"]
    # The documents' token ids alone are more than the bound: an in-memory shuffle would not fit.
    assert stats["tokens"] * 4 > 10 * shuffle["memory_bytes"]
    # The bins were cut into buckets that each order within the bound (a bucket is read, one
    # split's rows are taken in order, and its token stream written: BUCKET_SHARE buckets).
    share = int(shuffle["memory_bytes"] / BUCKET_SHARE)
    assert shuffle["buckets"] >= stats["tokens"] * 4 // share
    assert 0 < shuffle["max_bucket_bytes"] <= share
    # The order is the keyed hash order of the ids: the same as a full in-memory sort.
    for split in ("train", "validation"):
        part = table.filter(pa.compute.equal(table["split"], split))
        keys = shuffle_keys(part["id"].to_pylist(), 5)
        expected = [part["text"][int(i)].as_py() for i in np.argsort(keys, kind="stable")]
        got = packed_documents(final, split, tok)
        assert got == expected[:len(got)] and len(got) >= len(expected) - 1
        assert got[:20] != part["text"].to_pylist()[:20]
    again, final_again = run_pack(corpus, tmp_path / "b", shuffle_memory_mb=bound_mb)
    assert files_of(final_again) == files_of(final)
    # The bound changes how the work is cut, never the result.
    _, final_roomy = run_pack(corpus, tmp_path / "c", shuffle_memory_mb=64)
    assert files_of(final_roomy) == files_of(final)
    _, final_seed = run_pack(corpus, tmp_path / "d", seed=6, shuffle_memory_mb=bound_mb)
    assert packed_documents(final_seed, "train", tok) != packed_documents(final, "train", tok)


def test_shuffle_false_keeps_corpus_order(corpus, tmp_path):
    table, _, tok = corpus
    stats, final = run_pack(corpus, tmp_path / "a", shuffle=False)
    assert stats["shuffle"] == {"enabled": False}
    expected = [t for t, s in zip(table["text"].to_pylist(), table["split"].to_pylist()) if s == "train"]
    got = packed_documents(final, "train", tok)
    assert got == expected[:len(got)] and len(got) >= len(expected) - 1


def test_megatron_and_flat_outputs_round_trip_to_the_datasets_output(corpus, tmp_path):
    from datasets import load_from_disk

    table, _, tok = corpus
    stats, final = run_pack(corpus, tmp_path / "a", formats=["datasets", "megatron", "flat"], shuffle_memory_mb=0.04)
    eos = tok.token_to_id("<|endoftext|>")
    meta = json.loads((final / "flat/meta.json").read_text())
    assert meta["dtype"] == "uint16" and meta["eos_id"] == eos and meta["seq_len"] == SEQ_LEN
    for split in ("train", "validation"):
        rows = np.array(load_from_disk(str(final / split))["input_ids"], np.int64)
        packed = rows.ravel()
        meg = read_megatron(final / "megatron" / f"{split}_text_document")
        assert meg["dtype"] == np.uint16
        tokens = np.asarray(meg["tokens"], np.int64)
        flat = np.fromfile(final / "flat" / f"{split}.bin", np.uint16).astype(np.int64)
        # Every token in packing order; the datasets rows are the same stream cut at SEQ_LEN.
        split_stats = stats["splits"][split]
        assert len(tokens) == len(flat) == split_stats["tokens"] == meta["splits"][split]["tokens"]
        assert np.array_equal(tokens[:len(packed)], packed) and np.array_equal(flat, tokens)
        assert len(tokens) - len(packed) == split_stats["leftover_tokens"]
        # Document boundaries: one Megatron sequence per document, each ending in EOS.
        lengths, pointers, docs = meg["sequence_lengths"], meg["sequence_pointers"], meg["document_indices"]
        assert len(lengths) == split_stats["documents"] and np.array_equal(docs, np.arange(len(lengths) + 1))
        assert np.array_equal(pointers, np.concatenate([[0], np.cumsum(lengths[:-1].astype(np.int64) * 2)]))
        offsets = np.load(final / "flat" / f"{split}.doc_offsets.npy")
        assert np.array_equal(np.diff(offsets), lengths) and offsets[-1] == len(flat)
        ends = offsets[1:] - 1
        assert (tokens[ends] == eos).all() and (np.delete(tokens, ends) != eos).all()
        docs_text = [tok.decode(tokens[s:e - 1].tolist()) for s, e in zip(offsets[:-1], offsets[1:])]
        part = table.filter(pa.compute.equal(table["split"], split))
        assert sorted(docs_text) == sorted(part["text"].to_pylist())
        # The documents' texts in their shuffled order, read back from the Megatron sequences.
        keys = shuffle_keys(part["id"].to_pylist(), 5)
        assert docs_text == [part["text"][int(i)].as_py() for i in np.argsort(keys, kind="stable")]


def test_formats_without_datasets_and_wide_ids(corpus, tmp_path):
    from pipeline.errors import UserError
    from pipeline.stages.pack.writers import flat_dtype, megatron_dtype

    _, final = run_pack(corpus, tmp_path / "a", formats=["flat"], flat_dtype="uint32")
    assert not (final / "train").exists() and (final / "flat/train.bin").exists()
    meta = json.loads((final / "flat/meta.json").read_text())
    assert meta["dtype"] == "uint32"
    assert megatron_dtype(50257) == np.uint16 and megatron_dtype(100277) == np.int32
    assert flat_dtype(65536) == np.uint16 and flat_dtype(65537) == np.uint32
    with pytest.raises(UserError, match="flat_dtype"):
        flat_dtype(100277, "uint16")


def test_a_bucket_ordered_piece_by_piece_is_the_same_bytes(corpus, tmp_path, monkeypatch):
    """order_bucket takes a split's rows in key order a piece of ORDER_PIECE_TOKENS at a time and
    appends each piece's stream: pieces of a few documents give the bytes of one piece per split,
    in every format."""
    import pipeline.stages.pack as pack
    formats = ["datasets", "megatron", "flat"]
    _, whole = run_pack(corpus, tmp_path / "a", formats=formats)
    monkeypatch.setattr(pack, "ORDER_PIECE_TOKENS", 5000)
    _, pieces = run_pack(corpus, tmp_path / "b", formats=formats)
    assert files_of(pieces) == files_of(whole)
    cut = [r.tolist() for r in pack.order_pieces(np.array([2, 0, 3, 1]), np.array([3, 1, 1, 5]), 4)]
    assert cut == [[2, 0], [3], [1]]         # tokens 1+3, then 5 (past 8), then 1
    assert [r.tolist() for r in pack.order_pieces(np.zeros(0, np.int64), np.zeros(0), 4)] == [[]]


@pytest.mark.parametrize("rows,seq_len", [(0, 8), (7, 8), (2500, 8), (300, 2049)])
def test_sequence_shards_are_the_bytes_datasets_writes(rows, seq_len, tmp_path):
    """pipeline/stages/pack/hf_arrow.py writes without importing datasets: the shard file, its record
    batches (save_to_disk's writer batch size), state.json and dataset_info.json are compared
    with the installed datasets' ArrowWriter, DatasetInfo and save_to_disk."""
    from datasets import Dataset, DatasetInfo, Features, Sequence, Value
    from datasets import config as ds_config
    from datasets.arrow_writer import ArrowWriter, get_writer_batch_size_from_data_size
    from datasets.utils.py_utils import asdict

    from pipeline.stages.pack import hf_arrow

    features = Features({"input_ids": Sequence(Value("int32"), length=seq_len)})
    assert hf_arrow.sequence_features(seq_len) == features.to_dict()
    values = np.arange(rows * seq_len, dtype=np.int32) % 50_000
    nbytes = rows * seq_len * 4
    expected_batch = ds_config.DEFAULT_MAX_BATCH_SIZE
    if nbytes > 0:
        expected_batch = min(expected_batch, get_writer_batch_size_from_data_size(rows, nbytes))
    batch = hf_arrow.writer_batch_size(rows, nbytes)
    assert batch == expected_batch
    for big_rows in (1, 10**5, 10**7):      # past the 100 MB row group too
        assert hf_arrow.writer_batch_size(big_rows, big_rows * 8196) == min(
            ds_config.DEFAULT_MAX_BATCH_SIZE, get_writer_batch_size_from_data_size(big_rows, big_rows * 8196))

    def chunks():
        for c0 in range(0, rows, batch):
            yield pa.array(values[c0 * seq_len:min(c0 + batch, rows) * seq_len], pa.int32())

    ours = hf_arrow.SequenceShardWriter(pa.OSFile(str(tmp_path / "ours.arrow"), "wb"), seq_len)
    for part in chunks():
        ours.write(part)
    ours.close()
    theirs = ArrowWriter(features=features, path=str(tmp_path / "theirs.arrow"), embed_local_files=True)
    for part in chunks():
        theirs.write_table(pa.table({"input_ids": pa.FixedSizeListArray.from_arrays(part, seq_len)}))
    theirs.finalize()
    theirs.close()
    assert (tmp_path / "ours.arrow").read_bytes() == (tmp_path / "theirs.arrow").read_bytes()

    info = asdict(DatasetInfo(features=features))
    assert hf_arrow.dataset_info(seq_len) == json.dumps({k: info[k] for k in sorted(info)}, indent=2)
    # save_to_disk itself: one shard, the same record batches and dataset_info.json.
    Dataset.from_dict({"input_ids": values.reshape(rows, seq_len).tolist()}, features=features) \
        .save_to_disk(str(tmp_path / "saved"), num_shards=1)
    saved = tmp_path / "saved" / "data-00000-of-00001.arrow"
    with pa.ipc.open_stream(saved.read_bytes()) as a, pa.ipc.open_stream((tmp_path / "ours.arrow").read_bytes()) as b:
        assert a.schema.equals(b.schema, check_metadata=True)
        assert [x.num_rows for x in a] == [y.num_rows for y in b]
    assert json.loads((tmp_path / "saved" / "dataset_info.json").read_text())["features"] == features.to_dict()
    state = json.loads((tmp_path / "saved" / "state.json").read_text())
    assert sorted(json.loads(hf_arrow.dataset_state("train", rows, seq_len, 1))) == sorted(state)
