"""A private chain's stages before phi run in memory in phi's tasks (pipeline/private_chain.py,
issue 39 item 4): the same bytes as the stages run one by one and kept (phi.keep_raw: true);
one file read by both workers; nothing raw on disk while a run goes on or after it is killed."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT, run_cli, write_config, write_jsonl

KEY = "3c4e1a7b9f2d5c6e8f0a1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f6a"


def _chain(src: Path, out: Path, keep_raw: bool) -> str:
    return (f"input: {{paths: [{src}]}}\noutput_dir: {out}\nseed: 5\nnum_proc: 2\nshard_size: 7\nbatch_size: 4\n"
            "progress: false\nreport: false\nstages:\n  - normalize: {}\n"
            "  - heuristics: {min_words: 8, min_stop_words: 0, max_ellipsis_lines_ratio: 1.0, "
            "max_symbol_word_ratio: 0.5}\n"
            f"  - phi: {{profile: clinical, keep_raw: {str(keep_raw).lower()}}}\n"
            "  - dedup_exact: {}\n  - split: {validation_fraction: 0.2}\n  - tokenizer: {vocab_size: 400}\n"
            "  - pack: {seq_len: 32, batch_size: 2}\n")


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("private")
    notes = [json.loads(line) for line in (ROOT / "data/deid-dev/notes.jsonl").read_text().splitlines()[:40]]
    src = write_jsonl(tmp / "notes.jsonl", notes)
    out = {}
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MEDPREP_PHI_KEY", KEY)
        mp.setenv("XDG_CONFIG_HOME", str(tmp / "xdg"))
        for name, keep_raw in (("memory", False), ("kept", True)):
            cfg = write_config(tmp / f"{name}.yaml", _chain(src, tmp / name, keep_raw))
            run_cli("-m", "pipeline", "run", "--config", str(cfg))
            out[name] = tmp / name
    return out


def _files(run: Path, sub: str) -> dict[str, bytes]:
    return {p.relative_to(run).as_posix(): p.read_bytes() for p in sorted((run / sub).rglob("*"))
            if p.is_file() and p.name != "README.md"}


@pytest.mark.slow
def test_in_memory_gives_the_bytes_of_the_stages_run_one_by_one(runs):
    memory, kept = runs["memory"], runs["kept"]
    assert _files(memory, "final") == _files(kept, "final") and _files(memory, "final")
    assert _files(memory, "stages/03_phi/data") == _files(kept, "stages/03_phi/data")
    # The same counts and reasons stage by stage; only the kept run has the earlier stages' texts.
    for folder in ("01_normalize", "02_heuristics", "03_phi"):
        a, b = (json.loads((run / "stages" / folder / "stats.json").read_text()) for run in (memory, kept))
        assert (a["docs_in"], a["docs_out"], a["removed"]) == (b["docs_in"], b["docs_out"], b["removed"]), folder
    removed = json.loads((memory / "stages/02_heuristics/stats.json").read_text())["removed"]
    assert sum(removed.values()) > 0                    # the heuristics did remove notes here
    assert (kept / "stages/01_normalize/data").is_dir() and (kept / "stages/01_normalize/_SUCCESS").exists()
    assert not (memory / "stages/01_normalize/data").exists() and (memory / "stages/01_normalize/_PURGED").exists()


@pytest.mark.slow
def test_one_file_keeps_both_workers_busy(runs):
    stats = json.loads((runs["memory"] / "stages/03_phi/stats.json").read_text())
    assert stats["shards"] == 6 and stats["executor_workers"]["workers"] == 2
    assert json.loads((runs["memory"] / "stages/01_normalize/stats.json").read_text())["ran_in"] == "03_phi"


def test_a_stage_before_phi_alone_is_refused_in_one_line(tmp_path):
    src = write_jsonl(tmp_path / "notes.jsonl", [{"id": "a", "text": "Seen by Dr. Ortega today for follow up."}])
    cfg = write_config(tmp_path / "c.yaml", _chain(src, tmp_path / "run", keep_raw=False))
    proc = run_cli("-m", "pipeline.stage", "normalize", "--config", str(cfg), "--input", str(src),
                   "--output", str(tmp_path / "out"), check=False)
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1
    assert "runs in memory inside 'phi'" in proc.stderr and not (tmp_path / "out").exists()


@pytest.mark.slow
def test_killed_runs_leave_no_planted_value_readable_and_rerun_to_the_same_bytes(tmp_path):
    """scripts/benchmarks/kill_check.py with a worker SIGKILLed early in the run: the run folder and its
    temp folder scanned while the run goes on and after; the rerun's final/. (The whole process group
    SIGKILLed and resumed: tests/test_pipeline.py; Ctrl-C: tests/test_faults.py; every way in turn, 20 kills:
    the script's own default.)"""
    out = tmp_path / "kill.json"
    proc = subprocess.run([sys.executable, "scripts/benchmarks/kill_check.py", "--kills", "1", "--signals",
                           "SIGKILL-worker", "--seed", "1", "--notes", "12", "--work", str(tmp_path / "work"),
                           "--out", str(out)], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    result = json.loads(out.read_text())
    assert result["uninterrupted_planted_values_readable"] == 0 and result["kills"] == 1
    assert result["trials_with_planted_values_readable"] == 0 and result["reruns_identical_to_uninterrupted"] == 1
    assert all(t["scans_while_running"] > 0 for t in result["trials"])
    # seed 1 draws an early moment (a sixth of the run): the kill waits for a worker, then cuts the run short
    assert result["trials"][0]["killed"] == "worker" and result["cut_short"] == 1

