"""Installed, not checked out: the wheel carries what a run reads (pipeline/resources.py), shipped
configs run by name from any folder, `medprep init` writes a config that runs, and `medprep
stage` is the single-stage command."""
import ast
import json
import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
import yaml

from conftest import ROOT, as_from_a_terminal, run_in_process, write_jsonl


def test_setup_ships_the_folders_resources_names():
    """setup.py copies into the wheel exactly the folders pipeline/resources.py resolves."""
    from pipeline.resources import SHIPPED, resource
    tree = ast.parse((ROOT / "setup.py").read_text())
    shipped = next(ast.literal_eval(n.value) for n in ast.walk(tree)
                   if isinstance(n, ast.Assign) and getattr(n.targets[0], "id", "") == "RESOURCES")
    assert tuple(shipped) == SHIPPED
    assert all(resource(folder).is_dir() for folder in SHIPPED)
    manifest = (ROOT / "MANIFEST.in").read_text().split()
    assert [manifest[i + 1] for i, w in enumerate(manifest) if w == "graft"] == list(SHIPPED)


def _final_bytes(run: Path) -> dict[str, bytes]:
    # The card (README.md) quotes the command and the config's path; the data and tokenizer do not.
    return {str(p.relative_to(run)): p.read_bytes() for sub in ("final", "tokenizer")
            for p in sorted((run / sub).rglob("*")) if p.is_file() and p.name != "README.md"}


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """The wheel, built and installed (no dependencies: they come from this virtualenv's
    site-packages, behind the new one's own; Ray not importable, as without the [ray] extra) in
    a fresh virtualenv: (its bin folder, the environment a user's shell would give it)."""
    tmp_path = tmp_path_factory.mktemp("wheel")
    dist, venv = tmp_path / "dist", tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(dist),
                    str(ROOT)], check=True, capture_output=True)
    wheel, = dist.glob("medprep-*.whl")
    import zipfile
    names = zipfile.ZipFile(wheel).namelist()
    # The detector ships; the corpora it was trained and judged on do not.
    assert any(n.endswith("data/phi/phi_detector.crfsuite") for n in names)
    assert any(n.endswith("data/phi/phi_detector_word_free.crfsuite") for n in names)
    corpora = ("uner-ewt", "web-ner", "litbank", "news")
    assert not [n for n in names if any(f"/phi/{corpus}/" in n for corpus in corpora)]
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    site = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               check=True, capture_output=True, text=True).stdout.strip())
    # This virtualenv's packages, after the new one's own (a path line, not a site dir: its
    # .pth files, the checkout's editable install among them, are not run).
    (site / "zz_medprep_deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    # As `pip install medprep` without the [ray] extra: Ray cannot be imported.
    (site / "ray").mkdir()
    (site / "ray" / "__init__.py").write_text('raise ImportError("not installed: medprep without its [ray] extra")\n')
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "--no-index", "-q",
                    str(wheel)], check=True, capture_output=True)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    work = tmp_path / "empty"
    work.mkdir()
    where = subprocess.run([str(python), "-c", "import pipeline, pipeline.resources as r; "
                            "print(pipeline.__file__); print(r.resource_root())"],
                           cwd=work, env=env, check=True, capture_output=True, text=True).stdout.split()
    assert all(Path(p).is_relative_to(venv) for p in where), where     # not the checkout's files
    return venv / "bin", env


@pytest.mark.slow
def test_the_wheel_runs_the_tiny_config_in_an_empty_folder(tmp_path, tiny_run, installed):
    """`medprep run --config tiny` in an empty folder with the installed wheel: the same data
    and tokenizer as the checkout's run."""
    bin_dir, env = installed
    work = tmp_path / "empty"
    work.mkdir()
    missing = subprocess.run([str(bin_dir / "medprep"), "run", "--config", "pubmed"], cwd=work, env=env,
                             capture_output=True, text=True)
    assert missing.returncode == 2
    line, = missing.stderr.strip().splitlines()
    assert "data/raw/pubmed21n1298.xml.gz" in line and "medprep fetch" in line

    done = subprocess.run([str(bin_dir / "medprep"), "run", "--config", "tiny", "--log-format", "json"],
                          cwd=work, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    assert _final_bytes(work / "runs" / "tiny") == _final_bytes(tiny_run)
    ends = [json.loads(line) for line in done.stderr.splitlines() if line.startswith("{") and '"stage_end"' in line]
    assert [e["stage"] for e in ends][-1] == "11_pack"


@pytest.mark.slow
def test_a_newcomers_day_with_the_wheel(tmp_path, installed):
    """A user's own files with the installed wheel, outside the checkout: abstracts as a JSON
    array get the literature profile and notes as CSV the clinical one, each said; 200 notes
    run with JSON logs, Ctrl-C mid-run ends in one line and exit 130, the same command resumes
    and finishes; every log line is JSON with a time, and no traceback anywhere."""
    import csv
    import signal
    import time

    from pipeline.config import InputConfig
    from pipeline.readers import read_documents
    bin_dir, env = installed
    medprep = str(bin_dir / "medprep")
    rows = next(iter(read_documents(InputConfig(paths=[str(ROOT / "data/samples/pubmed21n1298_tiny.xml.gz")]), 100)))
    abstracts = [{"pmid": r["pmid"], "journal": r["journal"], "abstract": r["text"]}
                 for r in rows.table.to_pylist()]
    (tmp_path / "abstracts.json").write_text(json.dumps(abstracts), encoding="utf-8")
    notes = [json.loads(line) for line in (ROOT / "data/deid-dev/notes.jsonl").read_text().splitlines()[:200]]
    with open(tmp_path / "notes.csv", "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(["note_id", "patient_id", "text"])
        writer.writerows([n["id"], n["id"].split("-")[0], n["text"]] for n in notes)

    def medprep_run(*args):
        return subprocess.run([medprep, *args], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)

    said = medprep_run("init", "--input", "abstracts.json", "--config", "abstracts.yaml")
    assert said.returncode == 0 and "profile literature chosen" in said.stderr, said.stderr
    said = medprep_run("init", "--input", "notes.csv", "--config", "notes.yaml")
    assert said.returncode == 0 and "profile clinical chosen" in said.stderr, said.stderr
    command = [medprep, "run", "--config", "notes.yaml", "--log-format", "json", "--no-progress"]
    proc = subprocess.Popen(command, cwd=tmp_path, env=env, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, preexec_fn=as_from_a_terminal)
    lines = []
    for line in proc.stderr:
        lines.append(line)
        if '"stage_start"' in line and "phi" in line:
            break
    deadline = time.monotonic() + 300           # a phi shard finished: the rerun has one to resume
    while not list(tmp_path.glob("runs/*/stages/*phi.tmp/shards/*.json")) and time.monotonic() < deadline:
        time.sleep(0.1)
    os.killpg(proc.pid, signal.SIGINT)
    lines += proc.stderr.readlines()
    assert proc.wait(timeout=120) == 130
    again = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
    assert again.returncode == 0, again.stderr[-3000:]
    for text in ("".join(lines), again.stderr):
        assert "Traceback" not in text and "KeyboardInterrupt" not in text, text[-2000:]
        events = [json.loads(line) for line in text.splitlines()]          # every line is JSON
        assert all("time" in e for e in events)
    assert json.loads(lines[-1])["event"] == "interrupted"
    assert "resuming" in again.stderr
    final = next((tmp_path / "runs").glob("*/final/train"))
    assert any(final.iterdir())


def test_init_writes_a_config_that_fits_the_file(tmp_path, monkeypatch):
    notes = write_jsonl(tmp_path / "notes.jsonl", [
        {"note_id": f"n{i}", "subject": "x", "body": f"Patient seen today number {i}, doing well."} for i in range(30)])
    monkeypatch.chdir(tmp_path)
    code, out, err = run_in_process("init", "--input", "notes.jsonl", "--config", "cfg/notes.yaml")
    assert code in (0, None), err
    cfg = yaml.safe_load((tmp_path / "cfg/notes.yaml").read_text())
    assert cfg["input"] == {"paths": ["../notes.jsonl"], "format": "jsonl", "id_field": "note_id",
                            "text_field": "body"}
    assert [next(iter(s)) for s in cfg["stages"]][:3] == ["normalize", "heuristics", "phi"]
    assert cfg["stages"][2]["phi"]["profile"] == "clinical"
    assert "text_field: body" in err and "doing well" not in err          # field names, never values
    from pipeline.config import load_config
    assert load_config(tmp_path / "cfg/notes.yaml").run.input.paths == [str(tmp_path / "notes.jsonl")]  # made absolute
    # Not over an existing file without --force; the web profile has no phi stage.
    code, _, err = run_in_process("init", "--input", str(notes), "--config", "cfg/notes.yaml")
    assert code == 2 and "--force" in err
    code, _, err = run_in_process("init", "--input", str(notes), "--config", "cfg/notes.yaml", "--force",
                                  "--profile", "web")
    cfg = yaml.safe_load((tmp_path / "cfg/notes.yaml").read_text())
    assert "phi" not in [next(iter(s)) for s in cfg["stages"]] and "no phi stage" in err


def test_init_chooses_the_profile_from_the_fields_or_asks(tmp_path, monkeypatch):
    """Abstracts (pmid, journal) get the literature profile and notes (patient_id) the clinical
    one, each saying why; a file that says neither is refused with one line asking for --profile."""
    monkeypatch.chdir(tmp_path)
    write_jsonl(tmp_path / "abstracts.jsonl", [{"pmid": str(i), "journal": "J", "abstract": f"miR-{i} in cells."}
                                               for i in range(5)])
    code, _, err = run_in_process("init", "--input", "abstracts.jsonl", "--config", "a.yaml")
    assert code in (0, None), err
    phi = next(s["phi"] for s in yaml.safe_load((tmp_path / "a.yaml").read_text())["stages"] if "phi" in s)
    assert phi["profile"] == "literature" and "profile literature chosen: fields pmid, journal, abstract" in err
    write_jsonl(tmp_path / "notes.csv.jsonl", [{"patient_id": "p", "text": "Seen today."}])
    code, _, err = run_in_process("init", "--input", "notes.csv.jsonl", "--config", "n.yaml")
    assert code in (0, None) and "profile clinical chosen: fields patient_id" in err
    write_jsonl(tmp_path / "plain.jsonl", [{"id": "1", "text": "Some words."}])
    code, _, err = run_in_process("init", "--input", "plain.jsonl", "--config", "p.yaml")
    assert code == 2 and not (tmp_path / "p.yaml").exists()
    assert err.count("\n") == 1 and "cannot tell clinical notes from literature" in err and "--profile" in err


def test_init_sizes_a_small_corpus_and_says_when_it_cannot_fill_a_sequence(tmp_path, monkeypatch):
    """200 real notes: shards for every core, a validation split with documents, a sequence the
    tokens fill eight times over, a vocabulary the corpus supports, each told; three short notes
    cannot fill one sequence: init says the run would end at pack."""
    import os
    monkeypatch.chdir(tmp_path)
    notes = [json.loads(line) for line in (ROOT / "data/deid-dev/notes.jsonl").read_text().splitlines()[:200]]
    write_jsonl(tmp_path / "notes.jsonl", [{"note_id": n["id"], "text": n["text"]} for n in notes])
    code, _, err = run_in_process("init", "--input", "notes.jsonl", "--config", "n.yaml")
    assert code in (0, None), err
    cfg = yaml.safe_load((tmp_path / "n.yaml").read_text())
    options = {name: opts for entry in cfg["stages"] for name, opts in entry.items()}
    assert cfg["shard_size"] * 2 * (os.cpu_count() or 1) <= 200 and "sized for 200 documents" in err
    assert 200 * options["split"]["validation_fraction"] >= 10
    tokens = sum(len(n["text"]) for n in notes) // 4
    assert tokens >= 8 * options["pack"]["seq_len"] and options["tokenizer"]["vocab_size"] == 4000
    write_jsonl(tmp_path / "few.jsonl", [{"note_id": f"n{i}", "text": "Seen today, stable."} for i in range(3)])
    code, _, err = run_in_process("init", "--input", "few.jsonl", "--config", "few.yaml")
    assert code in (0, None) and "do not fill one sequence of 128: the run would end at pack" in err


def test_stage_subcommand_is_the_single_stage_command(tmp_path):
    docs = write_jsonl(tmp_path / "d.jsonl", [{"id": str(i), "text": f"word {i} " * 30} for i in range(12)])
    code, _, err = run_in_process("stage", "normalize", "--config", "tiny", "--input", docs,
                                  "--output", tmp_path / "out", "--no-progress")
    assert code in (0, None), err
    stats = json.loads((tmp_path / "out/stats.json").read_text())
    assert stats["stage"] == "normalize" and stats["docs_in"] == 12


def test_a_local_run_needs_no_ray(tmp_path):
    """Ray is an extra (medprep[ray]): the local executor, runner and stages never import it. A
    process where `import ray` fails runs a stage to the end."""
    docs = write_jsonl(tmp_path / "d.jsonl", [{"id": str(i), "text": f"word {i} " * 30} for i in range(12)])
    code = ("import sys, runpy; sys.modules['ray'] = None; "
            f"sys.argv = ['pipeline', 'stage', 'normalize', '--config', 'tiny', '--input', '{docs}', "
            f"'--output', '{tmp_path / 'out'}', '--no-progress']; runpy.run_module('pipeline', run_name='__main__')")
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads((tmp_path / "out/stats.json").read_text())["docs_in"] == 12
