"""perplexity: KenLM document perplexity as CCNet computes it (sum of line log10 scores over
words + one end-of-line per line), on CCNet-normalized text. Column `perplexity`; the config
keeps documents under `max_perplexity`, or keeps CCNet-style buckets (head/middle/tail)."""
from __future__ import annotations

import json
from functools import cached_property
from pathlib import Path
from typing import Literal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pydantic import Field, model_validator

from pipeline.documents import first_reason, set_column
from pipeline.engines.ccnet_norm import document_lines, scored_lines
from pipeline.resources import installed, resource
from pipeline.stages.base import DocumentStage, StageConfig

# The shipped model (pipeline/resources.py), by its repository path.
DEFAULT_MODEL = "data/models/pubmed_lm.binary"
BUCKETS = ("head", "middle", "tail")


class PerplexityConfig(StageConfig):
    model_path: str = Field(default_factory=lambda: str(resource(DEFAULT_MODEL)))
    mode: Literal["max", "buckets"] = "max"
    max_perplexity: float = Field(default=5000.0, gt=0)
    # Bucket edges (perplexity): head < cutoffs[0] <= middle < cutoffs[1] <= tail. Default:
    # the reference corpus' 30th and 60th percentiles, written beside the model by the build.
    bucket_cutoffs: tuple[float, float] | None = None
    keep_buckets: list[Literal["head", "middle", "tail"]] = ["head", "middle"]

    @model_validator(mode="after")
    def _cutoffs_ordered(self):
        if self.bucket_cutoffs and not self.bucket_cutoffs[0] < self.bucket_cutoffs[1]:
            raise ValueError("bucket_cutoffs must be increasing")
        return self


def document_perplexity(model, normalized: str) -> float:
    """One normalized document's perplexity (scripts/models/build_kenlm.py's reference percentiles)."""
    log_score, length = 0.0, 0
    for line in document_lines(normalized):
        log_score += model.score(line, bos=True, eos=True)
        length += line.count(" ") + 2       # words + end of line
    return round(10.0 ** (-log_score / length), 1) if length else float("inf")


def perplexities(model, texts: pa.Array | pa.ChunkedArray) -> list[float]:
    """document_perplexity of each text's normalization, for a whole batch: the batch's lines
    are normalized together and scored in one loop over KenLM (the only per-line work), and
    each document's sums are taken in line order, as document_perplexity adds them, so the
    results are the same floats."""
    lines, doc, tokens = scored_lines(texts)
    # model.score(line) with its defaults, bos=True and eos=True: a map, not a Python loop.
    log_scores = np.fromiter(map(model.score, lines), np.float64, len(lines))
    n = len(texts)
    log_sum = np.bincount(doc, weights=log_scores, minlength=n).tolist()
    length = np.bincount(doc, weights=tokens + 1, minlength=n).astype(np.int64).tolist()   # words + end of line
    return [round(10.0 ** (-s / m), 1) if m else float("inf") for s, m in zip(log_sum, length)]


class Perplexity(DocumentStage):
    name = "perplexity"
    summary = "KenLM perplexity (CCNet normalization); max threshold or head/middle/tail buckets"
    Config = PerplexityConfig
    engines = ("kenlm",)
    threshold_options = ("mode", "max_perplexity", "bucket_cutoffs", "keep_buckets")
    score_columns = ("perplexity",)

    @classmethod
    def model_files(cls, config: PerplexityConfig) -> dict[str, str]:
        if Path(config.model_path) != resource(DEFAULT_MODEL):
            return {}              # the config's own file: checked as a *_path option
        if installed():
            from pipeline.preflight import reinstall
            rebuild = f"the model medprep ships: {reinstall('medprep')}"
        else:
            rebuild = ("the committed model: restore it with 'git checkout data/models/', or rebuild it with "
                       "'make models' (scripts/models/build_kenlm.py)")
        files = {config.model_path: rebuild}
        if config.mode == "buckets" and config.bucket_cutoffs is None:
            files[str(Path(config.model_path).with_suffix(".json"))] = rebuild
        return files

    def setup(self):
        import kenlm
        self.model = kenlm.Model(self.config.model_path)
        if self.config.mode == "buckets":
            self.cutoffs            # a missing side file: a setup failure, before any batch

    @cached_property
    def cutoffs(self) -> tuple[float, float]:
        """Bucket edges: the config's, else those written beside the model (a small JSON file,
        read without loading the model)."""
        if self.config.bucket_cutoffs is not None:
            return self.config.bucket_cutoffs
        meta = Path(self.config.model_path).with_suffix(".json")
        return tuple(json.loads(meta.read_text())["bucket_cutoffs"])

    def output_fields(self):
        return [pa.field("perplexity", pa.float32()), pa.field("perplexity_bucket", pa.string())]

    def scores(self, texts) -> list[float]:
        return perplexities(self.model, texts)

    def score(self, table: pa.Table) -> pa.Table:
        return set_column(table, "perplexity", pa.array(self.scores(table["text"]), pa.float32()))

    def report_section(self, stats, run):
        from pipeline.sections import Section, column, hist
        values = column(run.sample(), "perplexity")
        if values is None:
            return None
        return Section(plots=[hist(values, "KenLM perplexity (kept)", "perplexity", line=self.config.max_perplexity,
                                   log=True)])

    def decide(self, table: pa.Table) -> pa.Table:
        ppl = table["perplexity"]
        if self.config.mode == "max":
            table = set_column(table, "perplexity_bucket", pa.nulls(len(ppl), pa.string()))
            return first_reason(table, [("perplexity_too_high", pc.greater(ppl, self.config.max_perplexity))])
        lo, hi = self.cutoffs
        bucket = pc.if_else(pc.less(ppl, lo), "head", pc.if_else(pc.less(ppl, hi), "middle", "tail"))
        table = set_column(table, "perplexity_bucket", bucket)
        return first_reason(table, [("perplexity_bucket_" + b, pc.equal(bucket, b))
                                    for b in BUCKETS if b not in self.config.keep_buckets])
