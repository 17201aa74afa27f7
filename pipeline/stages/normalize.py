"""normalize: Unicode NFC, HTML tags and entities out, control characters out, whitespace
runs and line endings normalized. Case, punctuation and stop words are kept (the transform:
pipeline/engines/text_normalize.py)."""
from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from pipeline.documents import first_reason, set_column
from pipeline.engines.text_normalize import NormalizeOptions, normalize_text
from pipeline.stages.base import DocumentStage, StageConfig


class NormalizeConfig(NormalizeOptions, StageConfig):
    """The transform's options (NormalizeOptions), as the stage's config."""


class Normalize(DocumentStage):
    name = "normalize"
    summary = "Unicode NFC, HTML and control characters out, whitespace normalized"
    Config = NormalizeConfig
    rewrites_text = True

    def process(self, table: pa.Table) -> pa.Table:
        text = normalize_text(table["text"], self.config)
        table = set_column(table, "text", text)
        return first_reason(table, [("empty_text", pc.equal(pc.utf8_length(text), 0))])
