"""The phi stage's privacy duties (pipeline/stages/base.py's Privacy), which the runner, the
report and `inspect` carry out: its key and crosswalk outside the run folder, the stages before it
purged after the run, the report's pseudonyms and redaction, its documents never listed."""
from __future__ import annotations

from pipeline.stages.base import Privacy

# (run folder, key id) pairs already warned about in this process: a run checks each stage twice.
_WARNED: set = set()


class PhiPrivacy(Privacy):
    def __init__(self, config):
        self.config = config

    def check_private_files(self, where: str, run_dirs: list) -> None:
        from pipeline.stages.phi.identifiers import check_private_files, uses_key
        check_private_files(self.config, where, run_dirs)
        if uses_key(self.config):
            self._check_key(run_dirs[0])

    def _check_key(self, run_dir) -> None:
        """Before any work: the key exists (the default one created now, said in one line, or a
        line saying why it cannot be), and a key other than the one the run folder's last run
        used is said (every pseudonym and surrogate changes, and phi reruns)."""
        import json

        from pipeline.errors import UserError
        from pipeline.phi.secret import default_key_file, key_id, load_phi_key, phi_key_source
        from pipeline.progress import stage_line
        created = phi_key_source(self.config.key_file).startswith("default:") and not default_key_file().exists()
        try:
            key = load_phi_key(self.config.key_file)
        except OSError as exc:
            raise UserError(f"{default_key_file()}: cannot create the PHI key ({exc.strerror}); set $MEDPREP_PHI_KEY "
                            "or phi.key_file to a key kept outside the run folder") from None
        if created:
            stage_line("phi", f"created the PHI key {default_key_file()} (32 random bytes, mode 0600): keep it and "
                       "back it up; pseudonyms and surrogates depend on it", event="phi_key_created")
        manifest = run_dir / "manifest.json"
        now = key_id(key)
        if (str(run_dir), now) in _WARNED or not manifest.exists():
            return
        try:
            before = [p.get("key_id") for p in _privacy_entries(json.loads(manifest.read_text()))]
        except ValueError:
            return
        if any(b and b != now for b in before):
            _WARNED.add((str(run_dir), now))
            stage_line("phi", f"the PHI key is not the one the last run of {run_dir} used: every pseudonym and "
                       "surrogate changes and phi reruns (the key's source: "
                       f"{phi_key_source(self.config.key_file)})", event="warning")

    def purges_earlier_stages(self) -> bool:
        return not self.config.keep_raw

    def private_removed(self, removed):
        from pipeline.stages.phi.identifiers import private_removed
        if not hasattr(self, "_removed_key"):
            self._removed_key = self.key() if self.renames_ids() else None
        return private_removed(removed, self._removed_key)

    def after_chain(self, earlier: list) -> dict:
        from pipeline.stages.phi.identifiers import purge_before
        return {"privacy": purge_before(self.config, earlier)}

    def report_ids(self, stats: dict):
        from pipeline.stages.phi.identifiers import pseudonyms_of
        return pseudonyms_of(self.config, stats)

    def private_documents(self) -> bool:
        # Abstracts' identifiers are public (PMIDs, authors); notes' are not.
        return self.config.profile != "literature"

    def key(self) -> bytes:
        from pipeline.phi.secret import load_phi_key
        return load_phi_key(self.config.key_file)

    def renames_ids(self) -> bool:
        return self.config.id_mode == "pseudonymize"

    def crosswalk_file(self) -> str | None:
        return self.config.crosswalk_file

    def report_redactor(self):
        # The clinical profile whatever the run's: the report is read by people, recall first.
        from pipeline.phi.engine import PhiEngine
        engine = PhiEngine().setup()
        return lambda texts: engine.redact_batch(texts)[0]


def _privacy_entries(manifest: dict) -> list[dict]:
    """The manifest's privacy entries: the run's, or each source's in a multi-source run."""
    entries = [manifest.get("privacy")] + [s.get("privacy") for s in (manifest.get("sources") or {}).values()]
    return [e for e in entries if isinstance(e, dict)]
