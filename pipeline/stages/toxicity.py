"""toxicity: alt-profanity-check's linear SVM (shipped in its wheel), batch predict_prob.
Column `toxicity`; removes documents above `max_score`."""
from __future__ import annotations

import warnings

import pyarrow as pa
import pyarrow.compute as pc
from pydantic import Field

from pipeline.documents import first_reason, set_column
from pipeline.stages.base import DocumentStage, StageConfig


class ToxicityConfig(StageConfig):
    # Picked from what the model flags on real abstracts: see docs/filters.md, "toxicity", "The threshold".
    max_score: float = Field(default=0.9, ge=0.0, le=1.0)


class Toxicity(DocumentStage):
    name = "toxicity"
    summary = "alt-profanity-check linear SVM score; removes documents above max_score"
    Config = ToxicityConfig
    threshold_options = ("max_score",)
    score_columns = ("toxicity",)

    @classmethod
    def model_files(cls, config: ToxicityConfig) -> dict[str, str]:
        from pipeline.preflight import package_file, reinstall
        return {str(package_file("profanity_check", "data", name) or f"profanity_check/data/{name}"):
                reinstall("alt-profanity-check") for name in ("model.joblib", "vectorizer.joblib")}

    def setup(self):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")     # sklearn version notes on unpickling
            from profanity_check import predict_prob
        self.predict_prob = predict_prob

    def output_fields(self):
        return [pa.field("toxicity", pa.float32())]

    def score(self, table: pa.Table) -> pa.Table:
        texts = table["text"].to_pylist()
        return set_column(table, "toxicity", pa.array(self.predict_prob(texts) if texts else [], pa.float32()))

    def decide(self, table: pa.Table) -> pa.Table:
        return first_reason(table, [("toxic", pc.greater(table["toxicity"], self.config.max_score))])
