"""digits: an example of a medprep stage that lives in its own package.

It removes documents made mostly of digits (tables of lab values, lists of numbers) or of
capital letters (text in all caps), each with its own reason, `too_many_digits` or
`mostly_capitals`. It is a filter stage: `score` computes two columns, stored for every
input row, and `decide` applies the thresholds, so changing only `max_digit_fraction` or
`max_capital_fraction` decides again from the stored scores without scoring.

How medprep finds it: pyproject.toml registers the class under the entry point group
`medprep.stages` with the name `digits`; `placement = Placement(after="heuristics")` puts it right after the
heuristics stage in the chain order (the config is checked against that order). Install it
(`pip install -e examples/digits-filter`) and use it in a chain like any built-in stage:

    stages:
      - normalize: {}
      - heuristics: {min_words: 20}
      - digits: {max_digit_fraction: 0.25}
      - phi: {profile: clinical}

Everything the run needs to know is declared on the class: its Config (validated with the
rest of the config, before any work), its score columns and threshold options, and its report
section. It runs unchanged under both executors (local processes and Ray actors)."""
from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc
from pydantic import Field

from pipeline.documents import first_reason, set_column
from pipeline.stages.base import DocumentStage, Placement, StageConfig


class DigitsConfig(StageConfig):
    # Digits among a document's characters that are not white space.
    max_digit_fraction: float = Field(default=0.25, ge=0.0, le=1.0)
    # Capital letters among its letters.
    max_capital_fraction: float = Field(default=0.6, ge=0.0, le=1.0)
    # Documents shorter than this (characters that are not white space) are never removed.
    min_chars: int = Field(default=20, ge=0)


class DigitsFilter(DocumentStage):
    name = "digits"
    summary = "example plugin: removes documents made mostly of digits or capitals"
    Config = DigitsConfig
    placement = Placement(after="heuristics")
    threshold_options = ("max_digit_fraction", "max_capital_fraction")
    score_columns = ("digit_fraction", "capital_fraction")

    def output_fields(self):
        return [pa.field("digit_fraction", pa.float32()), pa.field("capital_fraction", pa.float32())]

    def score(self, table: pa.Table) -> pa.Table:
        text = table["text"]
        chars = pc.utf8_length(pc.replace_substring_regex(text, r"\s+", ""))
        letters = pc.count_substring_regex(text, r"\p{L}")
        digits = pc.divide(pc.cast(pc.count_substring_regex(text, r"\p{Nd}"), pa.float64()),
                           pc.max_element_wise(chars, 1))
        capitals = pc.divide(pc.cast(pc.count_substring_regex(text, r"\p{Lu}"), pa.float64()),
                             pc.max_element_wise(letters, 1))
        # Too short to judge: scored 0, never removed.
        short = pc.less(chars, self.config.min_chars)
        table = set_column(table, "digit_fraction", pc.if_else(short, 0.0, digits).cast(pa.float32()))
        return set_column(table, "capital_fraction", pc.if_else(short, 0.0, capitals).cast(pa.float32()))

    def decide(self, table: pa.Table) -> pa.Table:
        return first_reason(table, [
            ("too_many_digits", pc.greater(table["digit_fraction"], self.config.max_digit_fraction)),
            ("mostly_capitals", pc.greater(table["capital_fraction"], self.config.max_capital_fraction)),
        ])

    def manifest_fields(self, stats: dict) -> dict:
        return {"digits_removed": stats["removed"]}

    def report_section(self, stats: dict, run):
        from pipeline.sections import Section, column, hist, table
        plots = []
        fractions = column(run.sample(), "digit_fraction")
        if fractions is not None:
            plots.append(hist(fractions, "digits among characters (kept)", "digit fraction",
                              line=self.config.max_digit_fraction))
        rows = [[reason, n] for reason, n in sorted(stats["removed"].items())]
        body = (f"<p>At most {self.config.max_digit_fraction:.0%} digits and {self.config.max_capital_fraction:.0%} "
                f"capital letters kept.</p>" + table(["reason", "documents"], rows or [["-", 0]]))
        return Section("Digits and capitals", body, figures={"digits_removed": stats["removed"]}, plots=plots)
