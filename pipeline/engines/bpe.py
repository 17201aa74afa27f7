"""HF tokenizers as the tokenizer and pack stages both use them: the file a tokenizer is saved
as, a tokenizer.json parsed once per process, and the library's own threads for a step."""
from __future__ import annotations

import os
from contextlib import contextmanager

TOKENIZER_FILE = "tokenizer.json"
# The tokenizer.json text parsed last in this process, and its Tokenizer (tokenizer_from_json).
_parsed: dict[bytes, object] = {}


def tokenizer_from_json(text: str):
    """The Tokenizer of a tokenizer.json text, parsed once per process: the driver's pack and
    the dataset card read the file the tokenizer stage has just written (28,000 merges take
    ~35 ms to parse, each time). Callers only read it (ids, vocabulary, encodings)."""
    from tokenizers import Tokenizer
    key = _json_key(text)
    if key not in _parsed:
        _parsed.clear()
        _parsed[key] = Tokenizer.from_str(text)
    return _parsed[key]


def remember_parsed(text: str, tok) -> None:
    """`tok` is what tokenizer_from_json(text) would parse (the stage wrote text from it)."""
    _parsed.clear()
    _parsed[_json_key(text)] = tok


def _json_key(text: str) -> bytes:
    import xxhash
    return xxhash.xxh3_128_digest(text.encode("utf-8"))


@contextmanager
def tokenizers_threads(n: int):
    """HF tokenizers' own threads (rayon) for what runs inside, n of them: the package is made
    serial at import (pipeline/__init__.py) so that worker processes do not each start a pool
    the size of the machine; the driver's training, while the workers wait, may use their
    cores (the same tokenizer.json). Rayon sizes its pool once per process, at first use."""
    if n <= 1:
        yield
        return
    before = {k: os.environ.get(k) for k in ("TOKENIZERS_PARALLELISM", "RAYON_NUM_THREADS")}
    os.environ["TOKENIZERS_PARALLELISM"] = "true"
    os.environ.setdefault("RAYON_NUM_THREADS", str(n))
    try:
        yield
    finally:
        # Serial again before anything forks: a child must not inherit "true" without rayon's threads.
        for key, value in before.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
