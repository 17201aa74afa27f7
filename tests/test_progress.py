"""Progress from shard tasks: documents done reach the driver from worker processes batch by batch;
off a terminal they are JSON lines (counts only), on one a bar that moves (under a pty)."""
import json
import os
import pty
import select
import subprocess
import sys
import time

import pytest

from conftest import ROOT, run_cli, run_in_process, write_config, write_jsonl


def _config(tmp_path, stages: str, num_proc: int = 1, shard_size: int = 60, batch_size: int = 20):
    return write_config(tmp_path / "c.yaml", f"""
input: {{paths: [docs.jsonl]}}
output_dir: {tmp_path / 'run'}
num_proc: {num_proc}
shard_size: {shard_size}
batch_size: {batch_size}
stages:
{stages}
""")


def test_json_lines_hold_counts_and_times_only(monkeypatch, capsys):
    from pipeline import progress
    monkeypatch.setattr(progress, "SETTINGS", progress.Settings(log_format="json", every=0.05, tty=False))
    with progress.stage_progress("03_example") as shown:
        phase = shown.phase("signatures", [30, 30], workers=2)
        shown.report((phase, 0), 10)
        shown.report((phase - 1, 1), 25)          # a late report of an earlier phase: not counted
        time.sleep(0.2)
        shown.task_done((phase, 0))
    lines = [json.loads(line) for line in capsys.readouterr().err.splitlines()]
    assert lines and all(set(line) == {"time", "event", "stage", "phase", "done", "total", "unit", "rate", "elapsed",
                                        "eta", "workers"} for line in lines)
    assert {(line["done"], line["total"], line["unit"], line["workers"]) for line in lines[:-1]} == {(10, 60, "doc", 2)}
    assert lines[-1]["done"] == 30                 # the last line, at the stage's end


def test_a_stage_ending_in_a_driver_step_ends_on_a_line_at_its_total(monkeypatch, capsys):
    """A global stage's last phase can be a driver step (no tasks) shorter than a tick: its
    last line must not be the previous phase's, printed while tasks were still running."""
    from pipeline import progress
    monkeypatch.setattr(progress, "SETTINGS", progress.Settings(log_format="json", every=0.05, tty=False))
    with progress.stage_progress("06_example") as shown:
        phase = shown.phase("signatures", [30, 30], workers=2)
        shown.report((phase, 0), 10)
        time.sleep(0.2)                            # ticker lines at 10 of 60
        shown.task_done((phase, 0))
        shown.task_done((phase, 1))
        shown.phase("clustering")                  # closed before the next tick
    lines = [json.loads(line) for line in capsys.readouterr().err.splitlines()]
    assert lines[0]["done"] == 10 and lines[0]["total"] == 60
    assert (lines[-1]["phase"], lines[-1]["done"], lines[-1]["total"]) == ("clustering", 0, 0)


def test_every_line_of_a_run_is_json_with_a_time_and_an_event(tmp_path):
    """--log-format json: the stage lines, a warning, a skipped stage, the last line and an
    error, each one JSON with a timestamp and its event (a separate process: its settings)."""
    from datetime import datetime
    rows = [{"id": str(i % 15), "text": f"The patient in bed {i} was seen by the team and is to be followed up with "
             "the results of the tests that were sent this morning."} for i in range(20)]
    write_jsonl(tmp_path / "docs.jsonl", rows)                   # 5 ids reused: a warning
    cfg = _config(tmp_path, "  - normalize: {}\n  - heuristics: {min_words: 5, top_ngram_max_fraction: {}}")
    runs = [run_cli("-m", "pipeline", "run", "--config", str(cfg), "--log-format", "json", cwd=tmp_path)
            for _ in range(2)]
    bad = run_cli("-m", "pipeline", "run", "--config", str(cfg), "--input", "missing.jsonl", "--log-format", "json",
                  cwd=tmp_path, check=False)
    assert bad.returncode == 2
    lines = [json.loads(line) for proc in (*runs, bad) for line in proc.stderr.splitlines()]
    assert all(datetime.fromisoformat(line["time"]) and line["event"] for line in lines)
    events = [line["event"] for line in lines]
    assert {"stage_start", "stage_end", "warning", "stage_skipped", "run_end", "error"} <= set(events)
    assert next(line for line in lines if line["event"] == "warning")["documents"] == 5


@pytest.mark.slow
def test_worker_processes_report_documents_batch_by_batch(tmp_path, monkeypatch):
    """Two local worker processes, two shards of 60, batches of 20: the driver hears of each
    batch (not only each shard) through the pool's queue."""
    from pipeline.progress import StageProgress
    heard = []
    original = StageProgress.report

    def record(self, key, n):
        heard.append((self.phase_name, n))
        original(self, key, n)
    monkeypatch.setattr(StageProgress, "report", record)
    write_jsonl(tmp_path / "docs.jsonl", [{"id": str(i), "text": f"plain words for document {i}. " * 12}
                                          for i in range(120)])
    cfg = _config(tmp_path, "  - heuristics: {min_words: 5}", num_proc=2)
    code, _, err = run_in_process("stage", "heuristics", "--config", cfg, "--input", tmp_path / "docs.jsonl",
                                  "--log-format", "json")
    assert code in (0, None), err
    assert heard and sum(n for _, n in heard) >= 120 and {n for _, n in heard} == {20}
    end = [json.loads(line) for line in err.splitlines() if '"stage_end"' in line][0]
    assert end["docs_in"] == 120
    # The stage's cost: CPU seconds of the driver and of the two workers' tasks, their peak memory.
    stats = json.loads(next((tmp_path / "run/stages").glob("*heuristics/stats.json")).read_text())
    assert stats["worker_cpu_seconds"] > 0 and stats["worker_peak_rss_mb"] > 50
    assert abs(stats["cpu_seconds"] - stats["driver_cpu_seconds"] - stats["worker_cpu_seconds"]) <= 0.002
    assert stats["driver_peak_rss_mb"] > 50


@pytest.mark.slow
def test_phi_on_dev_notes_shows_a_moving_bar_on_a_terminal(tmp_path):
    """Under a pseudo-terminal: the phi stage's bar counts documents within shards (batches of
    5 of 10-note shards), with the rate and the worker count. About 10 s, most of it loading spaCy."""
    notes = (ROOT / "data/deid-dev/notes.jsonl").read_text().splitlines()[:20]
    (tmp_path / "docs.jsonl").write_text("\n".join(notes) + "\n")
    cfg = _config(tmp_path, "  - phi: {profile: clinical}", shard_size=10, batch_size=5)
    master, slave = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "pipeline", "stage", "phi", "--config", str(cfg), "--input",
                             str(tmp_path / "docs.jsonl"), "--output", str(tmp_path / "phi")],
                            stdin=subprocess.DEVNULL, stdout=slave, stderr=slave, cwd=ROOT,
                            env={**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "160"})
    os.close(slave)
    out = b""
    while True:
        ready, _, _ = select.select([master], [], [], 1.0)
        if ready:
            try:
                chunk = os.read(master, 65536)
            except OSError:            # the child closed the terminal
                break
            if not chunk:
                break
            out += chunk
        elif proc.poll() is not None:
            break
    proc.wait(timeout=600)
    os.close(master)
    text = out.decode("utf-8", "replace")
    assert proc.returncode == 0, text[-2000:]
    counts = {int(c) for c in __import__("re").findall(r"\b(\d+)/20 \[", text)}
    assert {5, 10, 15, 20} <= counts, text[-2000:]          # moves batch by batch, not shard by shard
    assert "doc/s" in text and "1 worker" in text
    # No note text on the terminal: the notes' words are not in what the bar printed.
    assert "ADMITTED" not in text
