"""The phi stage's privacy duties (pipeline/stages/base.py's Privacy), which the runner, the
report and `inspect` carry out: its key and crosswalk outside the run folder, the stages before it
purged after the run, the report's pseudonyms and redaction, its documents never listed."""
from __future__ import annotations

from pipeline.stages.base import Privacy


class PhiPrivacy(Privacy):
    def __init__(self, config):
        self.config = config

    def check_private_files(self, where: str, run_dirs: list) -> None:
        from pipeline.stages.phi.identifiers import check_private_files
        check_private_files(self.config, where, run_dirs)

    def purges_earlier_stages(self) -> bool:
        return not self.config.keep_raw

    def after_chain(self, earlier: list) -> dict:
        from pipeline.stages.phi.identifiers import purge_before
        return {"privacy": purge_before(self.config, earlier)}

    def report_ids(self, stats: dict):
        from pipeline.stages.phi.identifiers import pseudonyms_of
        return pseudonyms_of(self.config, stats)

    def private_documents(self) -> bool:
        # Abstracts' identifiers are public (PMIDs, authors); notes' are not.
        return self.config.profile != "literature"

    def report_redactor(self):
        # The clinical profile whatever the run's: the report is read by people, recall first.
        from pipeline.phi.engine import PhiEngine
        engine = PhiEngine().setup()
        return lambda texts: engine.redact_batch(texts)[0]
