"""Stage registry: the chain order, each stage's class, and named groups."""
from __future__ import annotations

import importlib

CHAIN_ORDER = ["normalize", "langid", "perplexity", "heuristics", "toxicity", "phi",
               "dedup_exact", "dedup_minhash", "split", "tokenizer", "pack"]
GROUPS = {
    "dedup": ["dedup_exact", "dedup_minhash"],
    "filters": ["langid", "perplexity", "heuristics", "toxicity"],
}
_MODULES = {
    "normalize": "normalize.Normalize", "langid": "langid.LanguageId",
    "perplexity": "perplexity.Perplexity", "heuristics": "heuristics.Heuristics",
    "toxicity": "toxicity.Toxicity", "phi": "phi.PhiDeidentify",
    "dedup_exact": "dedup_exact.ExactDedup", "dedup_minhash": "dedup_minhash.MinHashDedup",
    "split": "split.Split", "tokenizer": "tokenizer.TrainTokenizer", "pack": "pack.Pack",
}


class _Registry(dict):
    """Imports a stage module on first use, so a run only loads the engines it needs."""

    def __missing__(self, name):
        if name not in _MODULES:
            raise KeyError(name)
        module, cls = _MODULES[name].split(".")
        stage = getattr(importlib.import_module(f"pipeline.stages.{module}"), cls)
        self[name] = stage
        return stage

    def __contains__(self, name):
        return name in _MODULES


REGISTRY = _Registry()
