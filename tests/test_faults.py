"""Faults a user meets: workers that cannot set up or are killed, removed/ across num_proc,
fingerprints of the files a stage reads, truncated and unreadable input, runs that produce
nothing, duplicate ids, a vocabulary smaller than asked, columns that appear late, and paths
relative to the config file. Each ends in one clear line, or is stated in stats and manifest."""
import gzip
import json
import os
import subprocess
import sys
import textwrap

import pyarrow as pa
import pyarrow.parquet as pq

from conftest import ROOT, as_from_a_terminal, read_arrow_dir, run_cli, write_config, write_jsonl

SENTENCES = ["The patient was admitted with chest pain and treated in the cardiology unit.",
             "Blood pressure was controlled with two drugs over the following weeks.",
             "A follow-up visit showed that the symptoms had resolved without further treatment.",
             "The study enrolled adults with type 2 diabetes from three regional hospitals."]


def _error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("error: ")]


def _notes(n: int, prefix: str = "d") -> list[dict]:
    return [{"id": f"{prefix}{i}", "text": f"{SENTENCES[i % 4]} Case {i}: {SENTENCES[(i + 1) % 4]}"} for i in range(n)]


# ---- 7: workers that fail -----------------------------------------------------------------

def test_worker_setup_failure_ends_the_run_with_one_line(tmp_path):
    src = write_jsonl(tmp_path / "in.jsonl", _notes(6))
    (tmp_path / "notamodel.binary").write_text("this file exists but is not a KenLM model\n")
    cfg = write_config(
        tmp_path / "c.yaml",
        f"input: {{paths: [{src}]}}\noutput_dir: {tmp_path / 'run'}\n"
        "num_proc: 2\nbatch_size: 2\n"
        f"stages: [normalize, {{perplexity: {{model_path: {tmp_path / 'notamodel.binary'}}}}}]\n",
    )
    # multiprocessing.Pool respawned a worker whose setup failed forever: the timeout catches that.
    proc = run_cli("-m", "pipeline", "run", "--config", str(cfg), check=False, timeout=300)
    assert proc.returncode == 2, proc.stderr[-2000:]
    errors = _error_lines(proc.stderr)
    assert len(errors) == 1 and "stage 'perplexity': setup failed" in errors[0] and "notamodel.binary" in errors[0]
    assert "Traceback" not in proc.stderr
    assert (tmp_path / "run/stages/01_normalize/_SUCCESS").exists()
    assert not (tmp_path / "run/stages/02_perplexity").exists()


KILLER = '''
import os
import signal

from pipeline.stages.normalize import Normalize


class KilledNormalize(Normalize):
    """normalize, except that the worker given document d7 dies as the OOM killer ends it."""

    def runs_without_models(self, method, task):
        # Every task goes to a worker: the driver runs tasks that load no model while its
        # workers start, and on a slow machine it was given d7 and killed itself.
        return False

    def process(self, table):
        if "d7" in table["id"].to_pylist():        # shard 3 of 6, in a worker process
            os.kill(os.getpid(), signal.SIGKILL)
        return super().process(table)


def main(config_path):
    from pipeline.cli import user_errors
    from pipeline.config import load_config
    from pipeline.runner import run_chain
    from pipeline.stages import REGISTRY

    REGISTRY["normalize"] = KilledNormalize       # workers get the class itself, from this module
    with user_errors():
        run_chain(load_config(config_path))
'''


def test_killed_worker_ends_the_run_with_the_memory_hint(tmp_path):
    (tmp_path / "killer.py").write_text(KILLER)
    src = write_jsonl(tmp_path / "in.jsonl", _notes(12))
    cfg = write_config(
        tmp_path / "c.yaml",
        f"input: {{paths: [{src}]}}\noutput_dir: {tmp_path / 'run'}\n"
        "num_proc: 2\nbatch_size: 2\nshard_size: 2\nstages: [normalize]\n",
    )
    env = {**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{ROOT}"}
    proc = subprocess.run(
        [sys.executable, "-c", f"import killer; killer.main({str(cfg)!r})"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 2, proc.stderr[-2000:]
    errors = _error_lines(proc.stderr)
    assert len(errors) == 1 and "stage 'normalize'" in errors[0] and "SIGKILL" in errors[0], proc.stderr
    assert "out-of-memory" in errors[0] and "Traceback" not in proc.stderr
    assert not (tmp_path / "run/stages/01_normalize").exists()


DRIVER_KILLED = """
import os
import signal
import time


def main():
    from pipeline.executor import LocalExecutor
    executor = LocalExecutor(2)
    executor.prestart(None)
    while not executor.ready():
        time.sleep(0.05)
    print(" ".join(str(pid) for pid in executor._pool.processes), flush=True)
    os.kill(os.getpid(), signal.SIGKILL)
"""


def _running(pid: int) -> bool:
    """Whether the process exists and has not exited (a zombie has: this container's init
    does not reap orphans)."""
    try:
        status = open(f"/proc/{pid}/status").read()
    except FileNotFoundError:
        return False
    return "State:\tZ" not in status


def test_workers_leave_when_the_driver_is_killed(tmp_path):
    import time

    (tmp_path / "driver_killed.py").write_text(DRIVER_KILLED)
    env = {**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{ROOT}"}
    proc = subprocess.Popen(
        [sys.executable, "-c", "import driver_killed; driver_killed.main()"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    pids = [int(p) for p in proc.stdout.readline().split()]
    proc.wait(timeout=60)
    assert proc.returncode == -9 and len(pids) == 2
    deadline = time.monotonic() + 30
    while any(_running(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    left = [p for p in pids if _running(p)]
    for p in left:
        os.kill(p, 9)
    assert not left, f"workers {left} outlived their driver"


def test_ctrl_c_is_one_line_and_the_rerun_resumes(tmp_path):
    """Ctrl-C (SIGINT to the whole process group, as a terminal sends it) while two workers run
    a clinical phi: one line that says what a rerun does, no traceback from the driver or a
    worker, exit 130, and no raw note left (the stage before phi ran in memory); the same command
    then finishes the run, normalize again and phi resumed from its finished shards."""
    import signal
    import time
    notes = [json.loads(line) for line in (ROOT / "data/deid-dev/notes.jsonl").read_text().splitlines()[:200]]
    write_jsonl(tmp_path / "notes.jsonl", notes)
    cfg = write_config(tmp_path / "c.yaml", f"input: {{paths: [{tmp_path / 'notes.jsonl'}]}}\n"
                                            f"output_dir: {tmp_path / 'run'}\nnum_proc: 2\nshard_size: 10\n"
                                            "batch_size: 10\nprogress: false\n"
                                            "stages: [normalize, {phi: {profile: clinical}}]\n")
    command = [sys.executable, "-m", "pipeline", "run", "--config", str(cfg)]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(command, cwd=ROOT, env=env, stderr=subprocess.PIPE, text=True, start_new_session=True,
                            preexec_fn=as_from_a_terminal)
    lines = []
    for line in proc.stderr:
        lines.append(line)
        if "[02_phi] running" in line:
            break
    # A second command on the same folder meanwhile is refused in one line, naming the first.
    second = run_cli(*command[1:], cwd=ROOT, check=False)
    assert second.returncode == 2 and second.stderr.count("\n") == 1
    assert f"another medprep command is writing this folder (pid {proc.pid})" in second.stderr
    markers = tmp_path / "run/stages/02_phi.tmp/shards"
    deadline = time.monotonic() + 120
    while not (markers.is_dir() and any(markers.glob("*.json"))) and time.monotonic() < deadline:
        time.sleep(0.1)
    os.killpg(proc.pid, signal.SIGINT)
    lines += proc.stderr.readlines()
    assert proc.wait(timeout=60) == 130
    text = "".join(lines)
    assert "Traceback" not in text and "KeyboardInterrupt" not in text, text[-2000:]
    assert lines[-1].startswith("interrupted: the same command again skips the finished stages, resumes")
    # No raw note is left behind: the stage before the clinical phi ran in memory in phi's tasks,
    # and the source was never cut into input shards on disk.
    stages = tmp_path / "run/stages"
    assert not list(stages.glob("01_normalize*/data")) and not list(stages.glob("*/input"))
    assert not any(n["text"][:60] in p.read_bytes().decode("utf-8", "ignore") for n in notes[:20]
                   for p in stages.glob("01_normalize*/**/*") if p.is_file())
    again = run_cli(*command[1:], cwd=ROOT)
    assert "[01_normalize] running" in again.stderr and "[02_phi] resuming:" in again.stderr
    stats = json.loads((tmp_path / "run/stages/02_phi/stats.json").read_text())
    assert stats["docs_in"] == 200 == stats["docs_out"] + sum(stats["removed"].values())


def test_a_stage_that_removes_most_documents_and_an_empty_validation_split_are_said(tmp_path):
    """A small corpus: heuristics removes 15 of 20 (over warn_removed_share), and 5 documents at
    validation_fraction 0.01 give no validation document: one line each, naming what to change."""
    rows = [{"id": f"d{i}", "text": "Too short." if i < 15 else
             f"The patient in bed {i} was seen by the team and is to be followed up with the results."}
            for i in range(20)]
    write_jsonl(tmp_path / "docs.jsonl", rows)
    cfg = write_config(tmp_path / "c.yaml", f"input: {{paths: [{tmp_path / 'docs.jsonl'}]}}\n"
                                            f"output_dir: {tmp_path / 'run'}\nprogress: false\nreport: false\n"
                                            "stages: [normalize, {heuristics: {min_words: 5, top_ngram_max_fraction: "
                                            "{}}}, {split: {validation_fraction: 0.01}}]\n")
    proc = run_cli("-m", "pipeline", "run", "--config", str(cfg))
    warnings = [line for line in proc.stderr.splitlines() if "warning:" in line]
    assert len(warnings) == 2, proc.stderr
    assert warnings[0].startswith("[02_heuristics] warning: removed 15 of 20 documents (too_few_words: 15)")
    assert "stages[1].heuristics" in warnings[0] and "--stage heuristics" in warnings[0]
    assert warnings[1].startswith("[03_split] warning: the validation split is empty (5 documents")
    assert "split.validation_fraction" in warnings[1]


# ---- 8: removed/ does not depend on num_proc ------------------------------------------------


def test_removed_is_byte_identical_across_num_proc(tmp_path):
    lines = []
    for i, doc in enumerate(_notes(40)):
        if i % 5 == 1:
            lines.append('{"id": "broken%d", "text": ' % i)  # bad JSON: set aside by the reader
        elif i % 7 == 2:
            lines.append(json.dumps({"id": doc["id"], "text": "  \t "}))  # empty: removed by normalize
        elif i % 11 == 3:
            lines.append(json.dumps(["not", "an", "object"]))
        else:
            lines.append(json.dumps(doc))
    src = tmp_path / "in.jsonl"
    src.write_text("\n".join(lines) + "\n")
    outs = {}
    for num_proc in (1, 2):
        cfg = write_config(
            tmp_path / f"c{num_proc}.yaml",
            f"input: {{paths: [{src}]}}\noutput_dir: {tmp_path / str(num_proc)}\n"
            f"num_proc: {num_proc}\nbatch_size: 3\nshard_size: 7\nstages: [normalize]\n",
        )
        run_cli("-m", "pipeline", "run", "--config", str(cfg), timeout=300)
        stage = tmp_path / str(num_proc) / "stages/01_normalize"
        outs[num_proc] = {str(p.relative_to(stage)): p.read_bytes() for p in sorted(stage.rglob("*.arrow"))}
    removed = read_arrow_dir(tmp_path / "1/stages/01_normalize/removed")
    assert {"malformed_bad_json", "malformed_not_an_object", "empty_text"} <= set(removed["reason"].to_pylist())
    assert len([k for k in outs[1] if k.startswith("removed/")]) > 1  # several shards
    assert outs[1] == outs[2]


# ---- 9: fingerprints follow the content of the files a stage reads --------------------------


def _tokenizer_file(path, texts, vocab_size):
    from pipeline.stages.tokenizer import TokenizerConfig, build_trainer

    tok, trainer = build_trainer(TokenizerConfig(vocab_size=vocab_size, min_frequency=1))
    tok.train_from_iterator(texts, trainer=trainer)
    tok.save(str(path))


def test_changed_file_content_reruns_the_stage(tmp_path):
    from datasets import Dataset

    texts = [d["text"] for d in _notes(20)]
    tok = tmp_path / "tok.json"
    _tokenizer_file(tok, texts, 300)
    src = write_jsonl(tmp_path / "in.jsonl", _notes(20))
    cfg = write_config(
        tmp_path / "c.yaml",
        f"input: {{paths: [{src}]}}\noutput_dir: {tmp_path / 'run'}\n"
        f"stages: [{{tokenizer: {{tokenizer_path: {tok}}}}}]\n",
    )
    assert "[01_tokenizer] running" in run_cli("-m", "pipeline.stage", "tokenizer", "--config", str(cfg)).stderr
    assert "[01_tokenizer] skipped" in run_cli("-m", "pipeline.stage", "tokenizer", "--config", str(cfg)).stderr
    _tokenizer_file(tok, texts, 400)  # same path, other content
    assert "[01_tokenizer] running" in run_cli("-m", "pipeline.stage", "tokenizer", "--config", str(cfg)).stderr
    copied = tmp_path / "run/stages/01_tokenizer/tokenizer.json"
    assert copied.read_bytes() == tok.read_bytes()

    # A datasets save_to_disk folder: its files' content counts, not the folder's mtime.
    hf = tmp_path / "hf"
    Dataset.from_list(_notes(5)).save_to_disk(str(hf))
    cfg = write_config(
        tmp_path / "h.yaml", f"input: {{paths: [{hf}]}}\noutput_dir: {tmp_path / 'hfrun'}\nstages: [normalize]\n"
    )
    assert "[01_normalize] running" in run_cli("-m", "pipeline.stage", "normalize", "--config", str(cfg)).stderr
    assert "[01_normalize] skipped" in run_cli("-m", "pipeline.stage", "normalize", "--config", str(cfg)).stderr
    data = next(hf.glob("*.arrow"))
    with pa.OSFile(str(data), "rb") as source:  # read into memory, not mapped
        table = pa.ipc.open_stream(source).read_all()
    edited = table.set_column(
        table.column_names.index("text"), "text", pa.array([t.upper() for t in table["text"].to_pylist()])
    )
    mtime = hf.stat().st_mtime_ns
    with pa.OSFile(str(data), "wb") as sink, pa.ipc.new_stream(sink, edited.schema) as writer:
        writer.write_table(edited)
    os.utime(hf, ns=(mtime, mtime))  # the folder looks untouched
    assert "[01_normalize] running" in run_cli("-m", "pipeline.stage", "normalize", "--config", str(cfg)).stderr


# ---- 10: truncated and unreadable input, an output folder that cannot be made ----------------


def test_truncated_gzip_keeps_what_was_read_and_counts_the_cut(tmp_path):
    rows = _notes(3000)
    body = "".join(json.dumps(r) + "\n" for r in rows).encode()
    whole = gzip.compress(body)
    src = tmp_path / "cut.jsonl.gz"
    src.write_bytes(whole[: len(whole) // 2])
    cfg = write_config(
        tmp_path / "c.yaml", f"input: {{paths: [{src}]}}\noutput_dir: {tmp_path / 'run'}\nstages: [normalize]\n"
    )
    proc = run_cli("-m", "pipeline", "run", "--config", str(cfg))
    assert "Traceback" not in proc.stderr
    stats = json.loads((tmp_path / "run/stages/01_normalize/stats.json").read_text())
    assert stats["removed"] == {"malformed_truncated": 1}
    kept = read_arrow_dir(tmp_path / "run/stages/01_normalize/data")["id"].to_pylist()
    assert 0 < len(kept) < len(rows) and kept == [r["id"] for r in rows[: len(kept)]]
    removed = read_arrow_dir(tmp_path / "run/stages/01_normalize/removed").to_pylist()
    assert removed == [{"id": f"{src}:{len(kept) + 1}", "reason": "malformed_truncated", "duplicate_of": None}]


def test_unreadable_input_and_output_folder_are_one_line(tmp_path):
    src = write_jsonl(tmp_path / "in.jsonl", _notes(3))
    (tmp_path / "afile").write_text("a file, not a folder")
    cfg = write_config(
        tmp_path / "c.yaml", f"input: {{paths: [{src}]}}\noutput_dir: {tmp_path / 'afile/run'}\nstages: [normalize]\n"
    )
    proc = run_cli("-m", "pipeline", "run", "--config", str(cfg), check=False)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert _error_lines(proc.stderr) == [
        f"error: {tmp_path / 'afile/run'}: cannot create the output folder (Not a directory)"
    ]
    (tmp_path / "fake.jsonl.gz").write_bytes(b"plain bytes, not gzip")
    cfg = write_config(
        tmp_path / "d.yaml",
        f"input: {{paths: [{tmp_path / 'fake.jsonl.gz'}]}}\noutput_dir: {tmp_path / 'run'}\nstages: [normalize]\n",
    )
    proc = run_cli("-m", "pipeline", "run", "--config", str(cfg), check=False)
    errors = _error_lines(proc.stderr)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert len(errors) == 1 and errors[0].startswith(f"error: {tmp_path / 'fake.jsonl.gz'}: cannot read as jsonl")


# ---- 11: a run that produces nothing fails ---------------------------------------------------


def test_run_that_produces_nothing_exits_nonzero_and_names_the_stage(tmp_path):
    (tmp_path / "empty.jsonl").write_text("")
    cfg = write_config(
        tmp_path / "e.yaml",
        f"input: {{paths: [{tmp_path / 'empty.jsonl'}]}}\noutput_dir: {tmp_path / 'e'}\n"
        "stages: [normalize, dedup_exact]\n",
    )
    proc = run_cli("-m", "pipeline", "run", "--config", str(cfg), check=False)
    assert proc.returncode == 2 and _error_lines(proc.stderr) == [
        f"error: the input ({tmp_path / 'empty.jsonl'}) holds no documents"
    ]

    # One note per line, read as one document (text_unit: file) that is too long for max_words.
    notes = tmp_path / "notes.txt"
    notes.write_text("\n".join(" ".join([SENTENCES[i % 4], SENTENCES[(i + 2) % 4]]) for i in range(6)) + "\n")
    cfg = write_config(
        tmp_path / "t.yaml",
        f"input: {{paths: [{notes}]}}\noutput_dir: {tmp_path / 't'}\n"
        "stages: [normalize, {heuristics: {min_words: 5, max_words: 40, top_ngram_max_fraction: {4: 0.5}}}, "
        "dedup_exact]\n",
    )
    proc = run_cli("-m", "pipeline", "run", "--config", str(cfg), check=False)
    errors = _error_lines(proc.stderr)
    assert proc.returncode == 2 and len(errors) == 1, proc.stderr
    assert "stage 'heuristics' removed all 1 documents" in errors[0] and "--text-unit line" in errors[0]
    assert not (tmp_path / "t/stages/03_dedup_exact").exists()
    proc = run_cli(
        "-m", "pipeline", "run", "--config", str(cfg), "--output", str(tmp_path / "lines"), "--text-unit", "line"
    )
    stats = json.loads((tmp_path / "lines/stages/01_normalize/stats.json").read_text())
    assert stats["docs_in"] == 6
    assert json.loads((tmp_path / "lines/stages/02_heuristics/stats.json").read_text())["docs_out"] > 0


# ---- 12: never silent ----------------------------------------------------------------------


def test_duplicate_ids_are_counted_in_stats_and_manifest(tmp_path):
    rows = _notes(8)
    for i, j in ((1, 0), (2, 0), (5, 4)):
        rows[i]["id"] = rows[j]["id"]
    src = write_jsonl(tmp_path / "in.jsonl", rows)
    cfg = write_config(
        tmp_path / "c.yaml", f"input: {{paths: [{src}]}}\noutput_dir: {tmp_path / 'run'}\nstages: [normalize]\n"
    )
    proc = run_cli("-m", "pipeline", "run", "--config", str(cfg))
    assert "warning: 3 documents reuse the id of an earlier document (2 distinct ids)" in proc.stderr
    stats = json.loads((tmp_path / "run/stages/01_normalize/stats.json").read_text())
    manifest = json.loads((tmp_path / "run/manifest.json").read_text())
    assert stats["duplicate_ids"] == manifest["duplicate_ids"] == {"documents": 3, "ids": 2}


def test_smaller_vocabulary_than_requested_is_stated(tmp_path):
    src = write_jsonl(tmp_path / "in.jsonl", _notes(30))
    cfg = write_config(
        tmp_path / "c.yaml",
        f"input: {{paths: [{src}]}}\noutput_dir: {tmp_path / 'run'}\nstages: [{{tokenizer: {{vocab_size: 5000}}}}]\n",
    )
    proc = run_cli("-m", "pipeline.stage", "tokenizer", "--config", str(cfg))
    stats = json.loads((tmp_path / "run/stages/01_tokenizer/stats.json").read_text())
    assert stats["vocab_size_requested"] == 5000 and 256 < stats["vocab_size_trained"] < 5000
    warning = next(line for line in proc.stderr.splitlines() if "vocab_size 5000 requested" in line)
    assert str(stats["vocab_size_trained"]) in warning


def test_column_missing_from_the_first_batch_is_not_dropped(tmp_path):
    pq.write_table(
        pa.table({"id": ["a", "b"], "text": [SENTENCES[0], SENTENCES[1]], "year": [2001, 2002]}), tmp_path / "a.parquet"
    )
    pq.write_table(
        pa.table({"id": ["c"], "text": [SENTENCES[2]], "year": [2003], "source": ["ward 4"]}), tmp_path / "b.parquet"
    )
    cfg = write_config(
        tmp_path / "c.yaml",
        f"input: {{paths: [{tmp_path / 'a.parquet'}, {tmp_path / 'b.parquet'}]}}\n"
        f"output_dir: {tmp_path / 'run'}\nstages: [normalize]\n",
    )
    proc = run_cli("-m", "pipeline", "run", "--config", str(cfg), check=False)
    errors = _error_lines(proc.stderr)
    assert proc.returncode == 2 and len(errors) == 1 and "column 'source'" in errors[0], proc.stderr
    # A column the first batch has and a later one lacks is null there, not an error.
    (tmp_path / "b.parquet").unlink()
    pq.write_table(pa.table({"id": ["c"], "text": [SENTENCES[2]]}), tmp_path / "b.parquet")
    run_cli("-m", "pipeline", "run", "--config", str(cfg))
    kept = read_arrow_dir(tmp_path / "run/stages/01_normalize/data")
    assert kept["year"].to_pylist() == [2001, 2002, None]


# ---- 15: paths relative to the config file -------------------------------------------------


def test_relative_paths_resolve_beside_the_config_then_the_current_directory(tmp_path):
    folder = tmp_path / "project"
    folder.mkdir()
    write_jsonl(folder / "notes.jsonl", _notes(4))
    cfg = write_config(
        folder / "c.yaml",
        textwrap.dedent(f"""\
        input: {{paths: [notes.jsonl]}}
        output_dir: {tmp_path / "run"}
        stages: [normalize, {{perplexity: {{model_path: data/models/pubmed_lm.binary}}}}]
        """),
    )
    run_cli("-m", "pipeline", "run", "--config", str(cfg))  # cwd is the repo root: the model is found there
    assert json.loads((tmp_path / "run/stages/02_perplexity/stats.json").read_text())["docs_in"] == 4
    cfg = write_config(folder / "m.yaml", cfg.read_text().replace("notes.jsonl", "missing.jsonl"))
    proc = run_cli("-m", "pipeline", "run", "--config", str(cfg), check=False)
    assert proc.returncode == 2
    assert f"input.paths: not found: missing.jsonl (looked in {folder}/ and {ROOT}/)" in proc.stderr


def test_help_explains_config_and_the_stage_command():
    assert "pipeline.stage" in run_cli("-m", "pipeline", "--help").stdout
    text = " ".join(run_cli("-m", "pipeline", "run", "--help").stdout.split())
    assert (
        "--config YAML the run's YAML file" in text and "beside the file first, then in the current directory" in text
    )
    assert "--text-unit {file,line}" in text
