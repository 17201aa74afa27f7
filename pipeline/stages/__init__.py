"""Stage registry: the chain order, each stage's class, named groups, and the stages other
packages add.

A stage in another package is registered under the entry point group `medprep.stages`
(pyproject: `[project.entry-points."medprep.stages"] NAME = "module:Class"`), used in a YAML chain
by NAME like ours and validated the same way. Its place in the chain order is the built-in stage
its class names in `after`: it comes right after that stage and before the next built-in one
(several stages after the same one keep the order the config gives them). examples/ holds one.
"""
from __future__ import annotations

import importlib

from pipeline.errors import ConfigError

# The built-in stages in chain order (a config lists stages in this order): each one's name, its
# module and class under pipeline/stages/ (imported on first use, so a run loads only the engines
# it needs) and the groups it belongs to (`python -m pipeline.stage filters`). One line per stage.
STAGES = [
    ("normalize", "normalize.Normalize", ()),
    ("metadata", "metadata.Metadata", ("filters",)),
    ("langid", "langid.LanguageId", ("filters",)),
    ("perplexity", "perplexity.Perplexity", ("filters",)),
    ("heuristics", "heuristics.Heuristics", ("filters",)),
    ("toxicity", "toxicity.Toxicity", ("filters",)),
    ("phi", "phi.PhiDeidentify", ()),
    ("dedup_exact", "dedup_exact.ExactDedup", ("dedup",)),
    ("dedup_minhash", "dedup_minhash.MinHashDedup", ("dedup",)),
    ("decontaminate", "decontaminate.Decontaminate", ()),
    ("split", "split.Split", ()),
    ("tokenizer", "tokenizer.TrainTokenizer", ()),
    ("pack", "pack.Pack", ()),
]
CHAIN_ORDER = [name for name, _, _ in STAGES]
_MODULES = {name: where for name, where, _ in STAGES}
GROUPS = {group: [name for name, _, groups in STAGES if group in groups]
          for group in dict.fromkeys(g for _, _, groups in STAGES for g in groups)}
ENTRY_POINT_GROUP = "medprep.stages"
_PLUGINS = None


def plugins() -> dict:
    """The entry points of the `medprep.stages` group, by stage name (built-in names excluded:
    a plugin cannot replace a built-in stage)."""
    global _PLUGINS
    if _PLUGINS is None:
        from importlib.metadata import entry_points
        _PLUGINS = {ep.name: ep for ep in entry_points(group=ENTRY_POINT_GROUP) if ep.name not in _MODULES}
    return _PLUGINS


def _load_plugin(name: str):
    from pipeline.stages.base import Stage
    ep = plugins()[name]
    where = f"stage '{name}' (entry point {ENTRY_POINT_GROUP}: {ep.value})"
    try:
        stage = ep.load()
    except Exception as exc:
        first = (str(exc).strip().splitlines() or [""])[0]
        raise ConfigError(f"{where}: cannot be loaded: {type(exc).__name__}: {first}") from None
    if not (isinstance(stage, type) and issubclass(stage, Stage)):
        raise ConfigError(f"{where}: is not a Stage subclass (pipeline.stages.base)")
    if getattr(stage, "name", None) != name:
        raise ConfigError(f"{where}: the class's name is {getattr(stage, 'name', None)!r}, not {name!r}")
    if stage.placement.after not in CHAIN_ORDER:
        raise ConfigError(f"{where}: `placement = Placement(after=...)` must name the built-in stage it follows "
                          f"({', '.join(CHAIN_ORDER)}), not {stage.placement.after!r}")
    return stage


class _Registry(dict):
    """Imports a stage module on first use, so a run only loads the engines it needs."""

    def __missing__(self, name):
        if name in _MODULES:
            module, cls = _MODULES[name].split(".")
            stage = getattr(importlib.import_module(f"pipeline.stages.{module}"), cls)
        elif name in plugins():
            stage = _load_plugin(name)
        else:
            raise KeyError(name)
        self[name] = stage
        return stage

    def __contains__(self, name):
        return name in _MODULES or name in plugins()

    def names(self) -> list[str]:
        """Every stage, in chain order (a plugin after the stage it follows; one that cannot be
        loaded last: using it says why)."""
        def rank(name):
            try:
                return self.rank(name)
            except ConfigError:
                return float("inf")
        return sorted([*_MODULES, *plugins()], key=rank)

    def rank(self, name: str) -> float:
        """A stage's place in the chain order: the built-in stages' index, a plugin's stage's
        `after` plus one half."""
        if name in _MODULES:
            return float(CHAIN_ORDER.index(name))
        return CHAIN_ORDER.index(self[name].placement.after) + 0.5


REGISTRY = _Registry()
