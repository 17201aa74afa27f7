"""The phi stage reruns, and its cache starts a new namespace, when a file its engine reads
changes content: the detector models (the committed defaults, the word-free one too, and a
`detector_path` one), the
name and word lists of data/phi, the hospital list behind the detector's features. The engine
is not loaded: fingerprints come from the stage's declarations (pipeline/stages/base.py)."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from conftest import write_config
from pipeline.config import load_config
from pipeline.phi import detector, lexicon
from pipeline.runner import bare_stage, stage_fingerprint


@pytest.fixture
def copies(tmp_path, monkeypatch) -> dict[str, Path]:
    """Copies of the files phi reads by default, put where the stage looks for them."""
    data = tmp_path / "phi-data"
    shutil.copytree(lexicon.DATA, data)
    hospitals = tmp_path / "hospitals.csv"
    shutil.copy(detector.HOSPITALS, hospitals)
    monkeypatch.setattr(lexicon, "DATA", data)
    monkeypatch.setattr(detector, "DEFAULT_MODEL", data / "phi_detector.crfsuite")
    monkeypatch.setattr(detector, "DEFAULT_WORD_FREE_MODEL", data / "phi_detector_word_free.crfsuite")
    monkeypatch.setattr(detector, "HOSPITALS", hospitals)
    custom = tmp_path / "custom.crfsuite"
    shutil.copy(data / "phi_detector.crfsuite", custom)
    return {"default model": data / "phi_detector.crfsuite",
            "word-free model": data / "phi_detector_word_free.crfsuite", "given names": data / "given_names.txt.gz",
            "surnames": data / "surnames.txt.gz", "hospitals": hospitals, "custom model": custom}


def _fingerprints(tmp_path: Path, phi_options: str) -> tuple[str, str]:
    cfg = load_config(write_config(tmp_path / "c.yaml", f"""
input: {{paths: [{tmp_path / 'in.jsonl'}]}}
output_dir: {tmp_path / 'run'}
report: false
stages:
  - phi: {phi_options}
"""))
    spec = cfg.stage("phi")
    stage = bare_stage(spec)
    return stage_fingerprint(stage, spec, "input", cfg), stage.dependencies().cache_namespace


@pytest.mark.parametrize("changed", ["default model", "word-free model", "given names", "surnames", "hospitals"])
def test_default_files_changing_content_change_fingerprint_and_namespace(tmp_path, copies, changed):
    (tmp_path / "in.jsonl").write_text('{"id": "a", "text": "x"}\n')
    before = _fingerprints(tmp_path, "{profile: clinical}")
    assert _fingerprints(tmp_path, "{profile: clinical}") == before       # stable when nothing changes
    with open(copies[changed], "ab") as fh:
        fh.write(b"\0")
    after = _fingerprints(tmp_path, "{profile: clinical}")
    assert after[0] != before[0], f"{changed}: stage fingerprint unchanged"
    assert after[1] != before[1], f"{changed}: cache namespace unchanged"


def test_a_retrained_model_at_the_same_detector_path_changes_both(tmp_path, copies):
    (tmp_path / "in.jsonl").write_text('{"id": "a", "text": "x"}\n')
    options = f"{{profile: clinical, detector_path: {copies['custom model']}}}"
    before = _fingerprints(tmp_path, options)
    with open(copies["custom model"], "ab") as fh:
        fh.write(b"\0")
    after = _fingerprints(tmp_path, options)
    assert after[0] != before[0] and after[1] != before[1]
    # The default model is not what this configuration reads: its change is not a rerun.
    with open(copies["default model"], "ab") as fh:
        fh.write(b"\0")
    assert _fingerprints(tmp_path, options) == after


def test_the_word_free_model_left_out_is_not_read(tmp_path, copies):
    (tmp_path / "in.jsonl").write_text('{"id": "a", "text": "x"}\n')
    options = "{profile: clinical, word_free_detector: false}"
    before = _fingerprints(tmp_path, options)
    assert before != _fingerprints(tmp_path, "{profile: clinical}")
    with open(copies["word-free model"], "ab") as fh:
        fh.write(b"\0")
    assert _fingerprints(tmp_path, options) == before
