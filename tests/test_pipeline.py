"""End to end on real MEDLINE abstracts (configs/tiny.yaml): accounting, resumability,
byte-identical reruns, the packed round trip, and the single-stage command."""
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from conftest import ROOT, read_arrow_dir, run_cli, write_config, write_jsonl
from pipeline.stages.pack import shuffle_keys, steps_per_epoch

TINY = ROOT / "configs/tiny.yaml"
# Hold timings; the dataset card (final/README.md), like the manifest, quotes the config file and options.
VOLATILE = {"stats.json", "manifest.json", "report.html", "README.md"}


def _files(run: Path) -> dict[str, bytes]:
    return {str(p.relative_to(run)): p.read_bytes() for p in sorted(run.rglob("*"))
            if p.is_file() and p.name not in VOLATILE and not p.suffix == ".png"}


@pytest.fixture(scope="module")
def reference_run(tiny_run):
    return tiny_run


@pytest.mark.slow
def test_accounting_holds_for_every_stage(reference_run):
    stats = [json.loads(p.read_text()) for p in sorted((reference_run / "stages").glob("*/stats.json"))]
    assert [s["stage"] for s in stats] == ["normalize", "langid", "perplexity", "heuristics", "toxicity", "phi",
                                           "dedup_exact", "dedup_minhash", "split", "tokenizer", "pack"]
    for prev, s in zip([None] + stats, stats):
        assert s["docs_in"] == s["docs_out"] + sum(s["removed"].values()), s["stage"]
        if prev:
            assert s["docs_in"] == prev["docs_out"]
        removed = read_arrow_dir(reference_run / "stages" / f"{s['position']:02d}_{s['stage']}" / "removed")
        assert (removed.num_rows if removed else 0) == sum(s["removed"].values())
        kept = read_arrow_dir(reference_run / "stages" / f"{s['position']:02d}_{s['stage']}" / "data")
        assert (kept.num_rows if kept else 0) == s["docs_out"]
    assert stats[0]["removed"].get("no_abstract", 0) > 0
    manifest = json.loads((reference_run / "manifest.json").read_text())
    assert manifest["sequences"] == sum(v["sequences"] for v in manifest["splits"].values())
    assert manifest["steps_per_epoch"] == steps_per_epoch(manifest["splits"]["train"]["sequences"] * 512, 8, 512)
    assert manifest["validation_near_train"] == 0
    assert manifest["tokens"] == manifest["splits"]["train"]["tokens"] + manifest["splits"]["validation"]["tokens"]


def test_steps_per_epoch_seed_check():
    assert steps_per_epoch(50_000_000_000, 1024, 2048) == 23_842


@pytest.mark.slow
def test_packed_sequences_round_trip_to_the_documents(reference_run):
    from datasets import load_from_disk
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(reference_run / "tokenizer/tokenizer.json"))
    eos = tok.token_to_id("<|endoftext|>")
    docs = read_arrow_dir(reference_run / "stages/09_split/data")
    for split in ("train", "validation"):
        ds = load_from_disk(str(reference_run / "final" / split))
        ids = np.array(ds["input_ids"], dtype=np.int64)
        assert ids.shape[1] == 512 and ds.features["input_ids"].feature.dtype == "int32"
        flat = ids.ravel()
        pieces = np.split(flat, np.flatnonzero(flat == eos) + 1)
        decoded = [tok.decode(p[:-1].tolist(), skip_special_tokens=False) for p in pieces[:-1]]
        expected = [(k, t) for k, t, s in zip(shuffle_keys(docs["id"].to_pylist(), 7), docs["text"].to_pylist(),
                                               docs["split"].to_pylist()) if s == split]
        # Packed in the seeded shuffle order (tiny.yaml: seed 7): the keyed hash of each id.
        expected = [t for _, t in sorted(expected, key=lambda kt: kt[0])]
        assert decoded and decoded == expected[:len(decoded)]
        assert len(decoded) in (len(expected), len(expected) - 1)       # the last may be in the leftover


@pytest.mark.slow
def test_a_killed_run_on_two_workers_resumes_to_the_reference_bytes(reference_run, tmp_path):
    """One run checks two promises: num_proc 2 gives num_proc 1's bytes, and a run killed midway
    resumes to them (the reference is tiny.yaml's own run, num_proc 1, never interrupted)."""
    cfg = write_config(tmp_path / "np2.yaml", TINY.read_text().replace("num_proc: 1", "num_proc: 2"))
    out = tmp_path / "run"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "-m", "pipeline", "run", "--config", str(cfg), "--output", str(out)],
                            cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    deadline = time.time() + 300
    while not (out / "stages/06_phi.tmp").exists() and time.time() < deadline and proc.poll() is None:
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)          # the driver and its worker processes at once
    proc.wait()
    assert (out / "stages/05_toxicity/_SUCCESS").exists() and not (out / "stages/06_phi/_SUCCESS").exists()
    done = run_cli("-m", "pipeline", "run", "--config", str(cfg), "--output", str(out))
    assert "[05_toxicity] skipped" in done.stderr and "[06_phi] running" in done.stderr
    assert not list(out.glob("stages/*.tmp"))
    assert _files(out) == _files(reference_run)


@pytest.mark.slow
def test_single_stage_group_and_any_file(reference_run, tmp_path):
    import shutil
    run = tmp_path / "run"
    shutil.copytree(reference_run, run)
    cfg = write_config(tmp_path / "c.yaml", TINY.read_text().replace("output_dir: runs/tiny", f"output_dir: {run}"))
    proc = run_cli("-m", "pipeline.stage", "dedup", "--config", str(cfg))
    assert "[07_dedup_exact] skipped" in proc.stderr and "[08_dedup_minhash] skipped" in proc.stderr
    proc = run_cli("-m", "pipeline.stage", "dedup", "--config", str(cfg), "--force")
    assert "[07_dedup_exact] running" in proc.stderr and "[08_dedup_minhash] running" in proc.stderr
    assert _files(run) == _files(reference_run)
    # Retuned threshold: the stage reruns (its config changed), nothing else is touched.
    retuned = write_config(
        tmp_path / "r.yaml", cfg.read_text().replace("dedup_minhash: {}", "dedup_minhash: {threshold: 0.5}")
    )
    proc = run_cli("-m", "pipeline.stage", "dedup_minhash", "--config", str(retuned))
    assert "[08_dedup_minhash] running" in proc.stderr
    # Any .jsonl of {"id", "text"} rows, written to any folder.
    src = write_jsonl(
        tmp_path / "x.jsonl",
        [{"id": "a", "text": "same text here"}, {"id": "b", "text": "same text here"}, {"id": "c", "text": "other"}],
    )
    run_cli(
        "-m",
        "pipeline.stage",
        "dedup_exact",
        "--config",
        str(cfg),
        "--input",
        str(src),
        "--output",
        str(tmp_path / "one"),
    )
    stats = json.loads((tmp_path / "one/stats.json").read_text())
    assert stats["removed"] == {"exact_duplicate": 1} and (tmp_path / "one/_SUCCESS").exists()
    removed = read_arrow_dir(tmp_path / "one/removed").to_pylist()
    assert removed == [{"id": "b", "reason": "exact_duplicate", "duplicate_of": "a"}]


def test_stage_needs_its_previous_stage(tmp_path):
    cfg = write_config(
        tmp_path / "c.yaml", TINY.read_text().replace("output_dir: runs/tiny", f"output_dir: {tmp_path / 'empty'}")
    )
    proc = run_cli("-m", "pipeline.stage", "pack", "--config", str(cfg), check=False)
    assert proc.returncode == 2 and "has not finished" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


def test_stages_command_lists_every_stage_and_group():
    listed = run_cli("-m", "pipeline", "stages").stdout.splitlines()
    lines = {line.split()[0]: line.split(None, 1)[1] for line in listed}
    stages = [
        "normalize",
        "metadata",
        "langid",
        "perplexity",
        "heuristics",
        "toxicity",
        "phi",
        "dedup_exact",
        "dedup_minhash",
        "split",
        "tokenizer",
        "pack",
    ]
    assert [name for name in lines if name in stages] == stages  # in chain order, one line each
    assert all(lines[name] and not lines[name].startswith("group:") for name in stages)
    assert lines["dedup"] == "group: dedup_exact -> dedup_minhash"
    assert lines["filters"] == "group: metadata -> langid -> perplexity -> heuristics -> toxicity"


def test_exit_handlers_run_after_the_command(tmp_path):
    """A plugin's or a library's atexit handler runs when the command has succeeded."""
    mark = tmp_path / "handler-ran"
    code = (
        "import atexit, sys\n"
        f"atexit.register(lambda: open({str(mark)!r}, 'w').write('ran'))\n"
        "sys.argv = ['medprep', 'stages']\n"
        "from pipeline.cli import entry\n"
        "entry()\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and "normalize" in proc.stdout
    assert mark.read_text() == "ran"


def test_output_into_a_closed_pipe_ends_without_a_traceback():
    """`medprep stages | head -1`: the reader has gone before the listing is written."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "pipeline", "stages"],
            stdout=write_end,
            stderr=subprocess.PIPE,
            cwd=ROOT,
            text=True,
            timeout=120,
        )
    finally:
        os.close(write_end)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr and "BrokenPipe" not in proc.stderr


@pytest.mark.slow
def test_keep_final_leaves_the_outputs_and_the_record_and_states_the_size(reference_run, tmp_path):
    cfg = write_config(tmp_path / "final.yaml", TINY.read_text() + "keep: final\n")
    out = tmp_path / "run"
    run_cli("-m", "pipeline", "run", "--config", str(cfg), "--output", str(out))
    kept = {k: v for k, v in _files(out).items() if k.startswith(("final/", "tokenizer/"))}
    assert kept and kept == {k: v for k, v in _files(reference_run).items() if k.startswith(("final/", "tokenizer/"))}
    for stage in (out / "stages").iterdir():
        assert sorted(p.name for p in stage.iterdir()) == ["_PURGED", "removed", "stats.json"], stage
    size = json.loads((out / "manifest.json").read_text())["run_folder"]
    full = json.loads((reference_run / "manifest.json").read_text())["run_folder"]
    on_disk = sum(p.stat().st_size for p in out.rglob("*") if p.is_file() and p.name != "manifest.json")
    assert size["keep"] == "final" and size["bytes"] == on_disk < full["bytes"]
    assert size["input_text_bytes"] == full["input_text_bytes"] > 0
    assert size["times_input_text"] == round(on_disk / size["input_text_bytes"], 2)
    # The stages' documents are gone: one stage alone says so; the chain recomputes them.
    proc = run_cli("-m", "pipeline.stage", "split", "--config", str(cfg), check=False)
    again = run_cli("-m", "pipeline", "run", "--config", str(cfg), "--output", str(out))
    assert "[01_normalize] running" in again.stderr and "[11_pack] running" in again.stderr
    assert {k: v for k, v in _files(out).items() if k.startswith("final/")} == {
        k: v for k, v in kept.items() if k.startswith("final/")
    }
    assert proc.returncode != 0
