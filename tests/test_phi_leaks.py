"""The other ways out for PHI in a clinical run (issue 9, item 3): ids, meta fields, the stage
folders before phi, the report's removed examples, the crosswalk, logs and console. Real
engines on a handful of notes; the text values planted here are ones the engine catches, so
what these tests measure is every path besides the text redaction itself."""
import csv
import json
import os
import re
import stat
from pathlib import Path

import pyarrow as pa
import pytest

from conftest import read_arrow_dir, run_cli, run_in_process, write_config, write_jsonl
from pipeline.stages.phi.identifiers import pseudonymize

KEY = "9f2c4e1a7b3d5c6e8f0a1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f6a"
OTHER_KEY = "0" * 63 + "1"

FILLER = ("The patient rested comfortably through the evening and the nursing team reviewed the medication list "
          "with pharmacy. Breakfast was tolerated, ambulation improved with physical therapy, and the incision "
          "remained clean. ")
# A note removed before phi (too many words) with a phone number across the report's 1,500-character cut.
LONG_HEAD = (FILLER * 12)[:1484]
LONG = LONG_HEAD + " Call 312-774-0198 today. " + FILLER * 8

NOTES = [
    {"id": "Vasquez-Hale_Eleanor_MRN0012345", "patient_name": "Eleanor Vasquez-Hale", "ssn": "536-22-8914",
     "ward": "cardiology",
     "text": "Mr. John Smith is a 93 year old man admitted for chest pain. MRN: 4417325. He was seen on 03/14/2019 "
             "and the family can be reached at 617-555-0143. Plan is to continue aspirin and monitor telemetry "
             "overnight with repeat troponin in the morning."},
    {"id": "Okafor_Chinedu_MRN0099881", "patient_name": "Chinedu Okafor", "ssn": "471-38-2265", "ward": "surgery",
     "text": "Spoke with Mr. Harold Quimby about the discharge plan on 04/02/2020. His daughter asked for a call at "
             "617-555-0199 before noon. The wound looks clean and dry, dressing changed, no signs of infection, "
             "and the drain output is minimal."},
    {"id": "Lindqvist_Maren_MRN0054321", "patient_name": "Maren Lindqvist", "ssn": "602-71-4438", "ward": "icu",
     "text": "Dr. Priya Raman reviewed the chart, MRN: 8812034. The patient tolerated the procedure well, vital "
             "signs remain stable, and pain is controlled with oral medication. Follow up in the clinic in two "
             "weeks with a repeat chest film and basic labs."},
    {"id": "Brennan_Tobias_MRN0033310", "patient_name": "Tobias Brennan", "ssn": "318-45-9012", "ward": "renal",
     "text": "Dialysis session completed without complications and ultrafiltration reached the target volume. "
             "Potassium was rechecked after the run and remained within the normal range. Access site without "
             "bleeding, thrill and bruit present, dressing applied."},
    {"id": "Castellanos_Ines_MRN0088120", "patient_name": "Ines Castellanos", "ssn": "229-63-5581", "ward": "neuro",
     "text": "Neurological checks every four hours remain unchanged with pupils equal and reactive. Speech is "
             "fluent, strength is symmetric in all extremities, and the headache has improved after hydration "
             "and rest in a dark room."},
    # An exact copy of the second note's text under another id: dedup_exact removes it after phi.
    {"id": "Quimby_Harold_MRN0077001", "patient_name": "Harold Quimby", "ssn": "540-12-7783", "ward": "surgery",
     "text": "Spoke with Mr. Harold Quimby about the discharge plan on 04/02/2020. His daughter asked for a call at "
             "617-555-0199 before noon. The wound looks clean and dry, dressing changed, no signs of infection, "
             "and the drain output is minimal."},
    # Removed before phi: too few words, and too many words (the long note).
    {"id": "Fairweather_Odile_MRN0061111", "patient_name": "Odile Fairweather", "ssn": "415-90-3372",
     "ward": "er", "text": "Seen by Dr. Priya Raman today."},
    {"id": "Thistlewood_Amos_MRN0072222", "patient_name": "Amos Thistlewood", "ssn": "377-20-6645",
     "ward": "er", "text": LONG},
]
BAD_LINE = '{"id": "Ortega_Luis_MRN0045454", "text": 12345}'
# Every value planted in ids, meta fields and text (the text ones in their context).
PLANTED = ["Vasquez", "Eleanor", "0012345", "Okafor", "Chinedu", "0099881", "Lindqvist", "Maren", "0054321",
           "Brennan", "Tobias", "0033310", "Castellanos", "0088120", "Quimby", "0077001", "Fairweather", "Odile",
           "0061111", "Thistlewood", "0072222", "Ortega", "0045454",
           "536-22-8914", "471-38-2265", "602-71-4438", "318-45-9012", "229-63-5581", "540-12-7783", "415-90-3372",
           "377-20-6645",
           "John Smith", "Harold", "Priya", "Raman", "4417325", "8812034", "617-555-0143", "617-555-0199",
           "03/14/2019", "04/02/2020", "93 year old", "312-774"]

STAGES = """
  - normalize: {}
  - heuristics: {min_words: 20, max_words: 200, min_alpha_words_ratio: 0.5, c4_curly_braces: false,
                 top_ngram_max_fraction: {2: 0.3, 3: 0.3, 4: 0.3}}
  - phi: %s
  - dedup_exact: {}
  - dedup_minhash: {}
  - split: {validation_fraction: 0.2}
  - tokenizer: {vocab_size: 300}
  - pack: {seq_len: 16, batch_size: 2}
"""


def _config(tmp: Path, name: str, src: Path, out: Path, phi: str = "{}", stages: str = STAGES, report=True) -> Path:
    return write_config(tmp / f"{name}.yaml", f"input: {{paths: [{src}]}}\noutput_dir: {out}\nseed: 3\nnum_proc: 1\n"
                                              f"batch_size: 4\nreport: {str(report).lower()}\nstages:"
                        + (stages % phi))


def _env(tmp: Path, key: str = KEY):
    # Never the user's own ~/.config: a test key, and a config home of the test's own.
    return {"MEDPREP_PHI_KEY": key, "XDG_CONFIG_HOME": str(tmp / "xdg")}


def _cli(env, *args, check=True):
    with pytest.MonkeyPatch.context() as mp:
        for k, v in env.items():
            mp.setenv(k, v)
        return run_cli(*args, check=check)


@pytest.fixture(scope="module")
def clinical(tmp_path_factory):
    """One clinical run (phi with its defaults) plus its console output."""
    tmp = tmp_path_factory.mktemp("clinical")
    src = tmp / "notes.jsonl"
    write_jsonl(src, NOTES[:6])
    with open(src, "a", encoding="utf-8") as fh:
        fh.write(BAD_LINE + "\n")
        for row in NOTES[6:]:
            fh.write(json.dumps(row) + "\n")
    out = tmp / "run"
    crosswalk = tmp / "private" / "crosswalk.csv"
    crosswalk.parent.mkdir()
    cfg = _config(tmp, "clinical", src, out, phi=f"{{crosswalk_file: {crosswalk}}}")
    proc = _cli(_env(tmp), "-m", "pipeline", "run", "--config", str(cfg))
    split = read_arrow_dir(out / "stages/06_split/data")
    # The report as the run wrote it, before the purge (a later report has no pre-phi texts).
    page = (out / "report.html").read_text()
    # The same run again, right away (a code change in between would rerun every stage).
    rerun = _cli(_env(tmp), "-m", "pipeline", "run", "--config", str(cfg))
    return {"tmp": tmp, "src": src, "out": out, "cfg": cfg, "crosswalk": crosswalk, "split": split, "page": page,
            "console": proc.stdout + proc.stderr + rerun.stdout + rerun.stderr, "rerun": rerun.stderr}


def _file_text(path: Path) -> str:
    """A file as text: Arrow files (stage shards and the caches, zstd-compressed) as their rows,
    decompressed; any other file as its bytes decoded."""
    import pyarrow as pa
    if path.suffix == ".arrow":
        for opener in (pa.ipc.open_stream, pa.ipc.open_file):
            try:
                with pa.OSFile(str(path), "rb") as src:
                    rows = opener(src).read_all().to_pylist()
                return "\n".join(str(value) for row in rows for value in row.values())
            except pa.ArrowInvalid:
                continue
    return path.read_bytes().decode("utf-8", errors="replace")


def _all_text(run: Path) -> dict[str, str]:
    """Every file of the run folder as text (Arrow files as their rows, PNGs as their bytes
    decoded), plus the packed sequences decoded back to text with the run's tokenizer."""
    from datasets import load_from_disk
    from tokenizers import Tokenizer

    files = {str(p.relative_to(run)): _file_text(p) for p in sorted(run.rglob("*")) if p.is_file()}
    # The report's plots are base64 PNGs of counts: random letters, left out of the search.
    files["report.html"] = re.sub(r"data:image/png;base64,[A-Za-z0-9+/=]+", "", files["report.html"])
    tok = Tokenizer.from_file(str(run / "tokenizer/tokenizer.json"))
    for split in ("train", "validation"):
        if (run / "final" / split).exists():
            ids = load_from_disk(str(run / "final" / split))["input_ids"]
            files[f"final/{split} (decoded)"] = "\n".join(tok.decode(row, skip_special_tokens=False) for row in ids)
    return files


@pytest.mark.slow
def test_clinical_run_leaves_no_planted_value_anywhere(clinical):
    files = _all_text(clinical["out"])
    assert "report.html" in files and "tokenizer/tokenizer.json" in files and "manifest.json" in files
    assert "final/README.md" in files and "tokenizer/tokenizer_config.json" in files
    assert any(name.startswith("final/train/") for name in files)
    sources = {**files, "console": clinical["console"]}
    leaks = [(name, value) for name, text in sources.items() for value in PLANTED if value in text]
    assert leaks == []
    # Compressed shards and cache files are searched as their rows: phi's output texts are there.
    phi_text = read_arrow_dir(clinical["out"] / "stages/03_phi/data")["text"][0].as_py()
    assert any(phi_text[:60] in text for name, text in files.items() if name.startswith("stages/03_phi/data/"))
    assert any(name.startswith("cache/phi/") for name in files)
    # The input itself holds every value: the search would find them.
    raw = clinical["src"].read_text()
    assert all(v in raw for v in PLANTED)


@pytest.mark.slow
def test_ids_are_pseudonyms_in_input_order_and_meta_is_dropped(clinical):
    key = bytes.fromhex(KEY)
    phi = read_arrow_dir(clinical["out"] / "stages/03_phi/data")
    reached_phi = [n["id"] for n in NOTES[:6]]
    assert phi["id"].to_pylist() == pseudonymize(reached_phi, key)
    assert all(i.startswith("doc-") and len(i) == 20 for i in phi["id"].to_pylist())
    heuristics = {"n_words", "punct_fraction", "alpha_words_ratio", "avg_word_length"}     # its columns here
    assert set(phi.column_names) == {"id", "text", "phi_entities", "phi_count"} | heuristics
    for later in ("04_dedup_exact", "05_dedup_minhash", "06_split"):
        data = read_arrow_dir(clinical["out"] / "stages" / later / "data")
        assert set(data["id"].to_pylist()) <= set(phi["id"].to_pylist())
        assert "meta" not in data.column_names
    removed = read_arrow_dir(clinical["out"] / "stages/04_dedup_exact/removed").to_pylist()
    assert removed == [{"id": pseudonymize([NOTES[5]["id"]], key)[0], "reason": "exact_duplicate",
                        "duplicate_of": pseudonymize([NOTES[1]["id"]], key)[0]}]


@pytest.mark.slow
def test_stages_before_phi_are_purged_and_the_manifest_says_so(clinical):
    out, key = clinical["out"], bytes.fromhex(KEY)
    for folder in ("01_normalize", "02_heuristics"):
        d = out / "stages" / folder
        assert (d / "_PURGED").exists() and not (d / "_SUCCESS").exists() and not (d / "data").exists()
        stats = json.loads((d / "stats.json").read_text())
        removed = read_arrow_dir(d / "removed")
        assert (removed.num_rows if removed else 0) == sum(stats["removed"].values())
    # They ran in memory in phi's task: never a data folder, not even while running (test_private_chain.py).
    assert "ran in memory in the task of 03_phi" in (out / "stages/01_normalize/_PURGED").read_text()
    normalize_removed = read_arrow_dir(out / "stages/01_normalize/removed").to_pylist()
    assert normalize_removed == [{"id": f"{clinical['src']}:7", "reason": "malformed_non_string_text",
                                  "duplicate_of": None, "text": None}]
    heuristics_removed = read_arrow_dir(out / "stages/02_heuristics/removed")
    assert heuristics_removed.column_names == ["id", "reason", "duplicate_of", "text"]
    assert heuristics_removed["id"].to_pylist() == pseudonymize([NOTES[6]["id"], NOTES[7]["id"]], key)
    assert heuristics_removed["reason"].to_pylist()[0] == "too_few_words"
    # The report's examples, kept redacted: the phone across the report's cut is gone.
    long_example = heuristics_removed["text"][1].as_py()
    assert long_example.startswith(LONG_HEAD[:200]) and "312-774-0198" not in long_example
    manifest = json.loads((out / "manifest.json").read_text())
    privacy = manifest["privacy"]
    assert privacy["raw_purged"] is True and privacy["stages"] == ["01_normalize", "02_heuristics"]
    assert privacy["id_mode"] == "pseudonymize" and privacy["meta_fields"] == "drop"
    assert privacy["key_source"] == "env:MEDPREP_PHI_KEY"
    assert KEY not in json.dumps(manifest)


@pytest.mark.slow
def test_report_redacts_before_the_cut_and_shows_pseudonyms(clinical):
    page = clinical["page"]
    key = bytes.fromhex(KEY)
    heuristics_removed = read_arrow_dir(clinical["out"] / "stages/02_heuristics/removed")
    long_reason = heuristics_removed["reason"].to_pylist()[1]
    # The long note's example is there, its phone (across character 1,500) replaced, not cut.
    assert long_reason in page and pseudonymize([NOTES[7]["id"]], key)[0] in page
    assert LONG_HEAD[-60:] in page and "312-7" not in page
    assert pseudonymize([NOTES[6]["id"]], key)[0] in page
    assert not any(v in page for v in PLANTED)
    # Rewritten after the run, the report shows the same examples: removed/ keeps them redacted.
    from pipeline.report import write_report
    write_report(clinical["out"])
    later = (clinical["out"] / "report.html").read_text()
    assert LONG_HEAD[-60:] in later and "312-7" not in later and not any(v in later for v in PLANTED)


@pytest.mark.slow
def test_card_counts_phi_by_type_and_inspect_refuses_the_stages_before_phi(clinical):
    from huggingface_hub import DatasetCard
    out = clinical["out"]
    card = str(DatasetCard.load(out / "final/README.md"))
    phi = json.loads((out / "stages/03_phi/stats.json").read_text())
    assert phi["entities"] and "profile `clinical`, mode `placeholder`" in card
    assert all(f"| {kind} | {n:,} |" in card for kind, n in phi["entities"].items())
    pseudonyms = read_arrow_dir(out / "stages/03_phi/data")["id"].to_pylist()
    assert not any(v in card for v in PLANTED + pseudonyms)
    # inspect: nothing of phi or the stages before it; the counts; what came after phi.
    for args in (["--stage", "heuristics"], ["--stage", "03_phi"], ["--reason", "too_few_words"]):
        code, listed, err = run_in_process("inspect", out, *args)
        assert code == 2 and not listed and len(err.strip().splitlines()) == 1
        assert "at or before its chain's clinical de-identification" in err and "--summary" in err
    code, summary, _ = run_in_process("inspect", out, "--summary", "--json")
    assert code == 0 and json.loads(summary)["stages"][1]["removed"] == {"gopher_too_many_words": 1, "too_few_words": 1}
    code, listed, err = run_in_process("inspect", out, "--json")
    docs = json.loads(listed)["documents"]
    assert code == 0 and [(d["stage"], d["reason"]) for d in docs] == [("dedup_exact", "exact_duplicate")]
    assert docs[0]["id"] in pseudonyms and "not shown: stage 'heuristics'" in err
    assert not any(v in listed + err for v in PLANTED)


@pytest.mark.slow
def test_crosswalk_only_outside_the_run_folder(clinical):
    with open(clinical["crosswalk"], newline="", encoding="utf-8") as fh:
        rows = list(csv.reader(fh))
    ids = [n["id"] for n in NOTES[:6]]
    assert rows == [["pseudonym", "id"]] + [[p, i] for p, i in zip(pseudonymize(ids, bytes.fromhex(KEY)), ids)]
    assert stat.S_IMODE(os.stat(clinical["crosswalk"]).st_mode) == 0o600
    inside = _config(clinical["tmp"], "inside", clinical["src"], clinical["tmp"] / "run2",
                     phi=f"{{crosswalk_file: {clinical['tmp'] / 'run2' / 'ids.csv'}}}")
    proc = _cli(_env(clinical["tmp"]), "-m", "pipeline", "run", "--config", str(inside), check=False)
    assert proc.returncode == 2 and "crosswalk_file" in proc.stderr and "inside the run folder" in proc.stderr
    assert not (clinical["tmp"] / "run2" / "stages").exists()


@pytest.mark.slow
def test_rerun_after_purge_and_single_stage_message(clinical):
    env = _env(clinical["tmp"])
    rerun = clinical["rerun"]
    assert "[01_normalize] skipped: purged" in rerun and "[03_phi] skipped" in rerun and "running" not in rerun
    assert read_arrow_dir(clinical["out"] / "stages/06_split/data").equals(clinical["split"])
    # A stage before phi alone would write text with PHI: one line saying what to do.
    proc = _cli(env, "-m", "pipeline.stage", "heuristics", "--config", str(clinical["cfg"]), "--force", check=False)
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1
    assert "runs in memory inside 'phi'" in proc.stderr and "keep_raw" in proc.stderr
    # phi alone reads the source again and runs the stages before it in memory, to the same bytes.
    before = read_arrow_dir(clinical["out"] / "stages/03_phi/data")
    proc = _cli(env, "-m", "pipeline.stage", "phi", "--config", str(clinical["cfg"]), "--force")
    assert "[01_normalize] running in memory in 03_phi's task" in proc.stderr
    assert read_arrow_dir(clinical["out"] / "stages/03_phi/data").equals(before)
    # A changed option before phi reruns the purged stages instead of failing.
    changed = write_config(clinical["tmp"] / "changed.yaml",
                           clinical["cfg"].read_text().replace("min_words: 20", "min_words: 21"))
    proc = _cli(env, "-m", "pipeline", "run", "--config", str(changed))
    assert "[01_normalize] running" in proc.stderr and "[02_heuristics] running" in proc.stderr
    assert (clinical["out"] / "stages/02_heuristics/_PURGED").exists()
    assert not (clinical["out"] / "stages/02_heuristics/data").exists()


@pytest.mark.slow
def test_same_key_same_pseudonyms_other_key_other_ones(clinical):
    tmp = clinical["tmp"]
    plain = _config(tmp, "plain", clinical["src"], clinical["out"])       # no crosswalk
    ids, said = {}, {}
    for name, key in (("same", KEY), ("other", OTHER_KEY)):
        said[name] = _cli(_env(tmp, key), "-m", "pipeline.stage", "phi", "--config", str(plain),
                          "--input", str(clinical["src"]), "--output", str(tmp / name)).stderr
        ids[name] = read_arrow_dir(tmp / name / "data")["id"].to_pylist()
    first_run = read_arrow_dir(clinical["out"] / "stages/03_phi/data")["id"].to_pylist()
    assert ids["same"][:6] == first_run
    assert not set(ids["other"]) & set(ids["same"])
    # Another key than the run folder's last run used is said, before any work; the same is not.
    changed = "the PHI key is not the one the last run of"
    assert changed in said["other"] and changed not in said["same"]
    assert said["other"].index(changed) < said["other"].index("running")


def test_literature_profile_keeps_pmids_and_metadata(tmp_path):
    rows = [{"id": f"pmid:{31000000 + i}", "journal": "BMC Cardiology",
             "text": f"Background: we studied {n} patients with heart failure in a randomized trial. Results: "
                     "mortality fell by a third with the new drug, and adverse events were rare."}
            for i, n in enumerate((120, 84, 310))]
    src = write_jsonl(tmp_path / "abstracts.jsonl", rows)
    cfg = _config(tmp_path, "lit", src, tmp_path / "run", phi="{profile: literature}",
                  stages="\n  - normalize: {}\n  - phi: %s\n", report=False)
    _cli(_env(tmp_path), "-m", "pipeline", "run", "--config", str(cfg))
    data = read_arrow_dir(tmp_path / "run/stages/02_phi/data")
    assert data["id"].to_pylist() == [r["id"] for r in rows]
    assert [json.loads(m) for m in data["meta"].to_pylist()] == [{"journal": "BMC Cardiology"}] * 3
    assert (tmp_path / "run/stages/01_normalize/_SUCCESS").exists()
    privacy = json.loads((tmp_path / "run/manifest.json").read_text())["privacy"]
    assert privacy["raw_purged"] is False and privacy["id_mode"] == "keep" and privacy["key_source"] is None
    assert not (tmp_path / "xdg").exists()          # no key needed, none created


def test_the_default_key_is_created_before_any_work_and_said_or_its_failure_is_one_line(tmp_path):
    rows = [{"id": f"n{i}", "text": f"Seen today by the team, patient {i} stable, plan unchanged."} for i in range(4)]
    src = write_jsonl(tmp_path / "notes.jsonl", rows)
    cfg = _config(tmp_path, "key", src, tmp_path / "run", stages="\n  - normalize: {}\n  - phi: %s\n",
                  report=False)
    env = {"XDG_CONFIG_HOME": str(tmp_path / "xdg")}
    with pytest.MonkeyPatch.context() as mp:
        mp.delenv("MEDPREP_PHI_KEY", raising=False)
        for k, v in env.items():
            mp.setenv(k, v)
        done = run_cli("-m", "pipeline", "run", "--config", str(cfg))
        (tmp_path / "ro").write_text("a file where the key's folder would go\n")
        mp.setenv("XDG_CONFIG_HOME", str(tmp_path / "ro"))
        failed = run_cli("-m", "pipeline", "run", "--config", str(cfg), "--output", str(tmp_path / "run2"),
                         check=False)
    key = tmp_path / "xdg/medprep/phi.key"
    assert key.is_file() and oct(key.stat().st_mode & 0o777) == "0o600"
    assert f"[phi] created the PHI key {key}" in done.stderr
    assert done.stderr.index("created the PHI key") < done.stderr.index("[01_normalize] running")
    assert failed.returncode == 2 and failed.stderr.count("\n") == 1
    assert "cannot create the PHI key" in failed.stderr and "MEDPREP_PHI_KEY" in failed.stderr
    assert not (tmp_path / "run2/stages").exists()           # refused before any work


def test_meta_redact_runs_each_value_through_the_engine(tmp_path, monkeypatch):
    from pipeline.stages.phi import PhiConfig, PhiDeidentify
    monkeypatch.setenv("MEDPREP_PHI_KEY", KEY)
    stage = PhiDeidentify(PhiConfig(meta_fields="redact"), None)
    stage.setup()
    # A "ward" field names a place (wards are PHI: "Quartermain 2"), which the clinical detector
    # may redact; a medical service is no place and stays.
    meta = json.dumps({"patient_name": "Eleanor Vasquez-Hale", "ssn": "536-22-8914", "service": "cardiology",
                       "visits": 3})
    table = pa.table({"id": ["Vasquez-Hale_Eleanor_MRN0012345"], "text": ["Chest pain resolved."], "meta": [meta],
                      "attending": ["Dr. Priya Raman"], "bed": [12]})
    out = stage.process(table).to_pylist()[0]
    redacted = json.loads(out["meta"])
    assert redacted["service"] == "cardiology" and redacted["visits"] == 3
    assert "Eleanor" not in out["meta"] and "536-22-8914" not in out["meta"]
    assert "Priya" not in out["attending"] and out["bed"] == 12
    assert out["id"] == pseudonymize(["Vasquez-Hale_Eleanor_MRN0012345"], bytes.fromhex(KEY))[0]


def test_the_columns_earlier_stages_add_are_kept_the_others_are_meta(tmp_path, monkeypatch):
    """phi keeps the columns the stages before it add (the runner gives it their output_fields)
    and drops every other column as a meta field, a source column named like a stage's too."""
    from pipeline.config import validate_config
    from pipeline.runner import make_stage, stage_dirs_for
    monkeypatch.setenv("MEDPREP_PHI_KEY", KEY)
    config = validate_config({"input": {"paths": ["x.jsonl"]}, "output_dir": str(tmp_path), "stages": [
        "normalize", "langid", {"heuristics": {"c4_lines": True}}, "phi", "split"]}, check_inputs=False)
    phi = make_stage(config, config.stage("phi"), stage_dirs_for(config))
    added = {"lang", "lang_score", "n_words", "punct_fraction", "alpha_words_ratio", "avg_word_length",
             "c4_sentences", "c4_lines_dropped"}
    assert set(phi.ctx.annotation_columns) == added
    table = pa.table({"id": ["a"], "text": ["x"], **{c: [1.0] for c in sorted(added)}, "ward": ["icu"],
                      "perplexity": [12.0], "phi_count": [0]})
    out = phi._ids_and_meta().apply(table)
    assert set(out.column_names) == {"id", "text", "phi_count"} | added       # perplexity: no stage here


def test_key_sources(tmp_path, monkeypatch):
    from pipeline.phi.secret import load_phi_key, phi_key_source
    monkeypatch.delenv("MEDPREP_PHI_KEY", raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    key = load_phi_key(None)
    path = tmp_path / "xdg/medprep/phi.key"
    assert len(key) == 32 and path.read_bytes() == key and stat.S_IMODE(path.stat().st_mode) == 0o600
    assert load_phi_key(None) == key and phi_key_source(None) == f"default:{path}"
    own = tmp_path / "own.key"
    own.write_text(KEY + "\n")
    assert load_phi_key(str(own)) == bytes.fromhex(KEY)
    monkeypatch.setenv("MEDPREP_PHI_KEY", "a passphrase, not hex")
    assert load_phi_key(str(own)) == b"a passphrase, not hex" and phi_key_source(str(own)) == "env:MEDPREP_PHI_KEY"


def test_a_type_clash_names_columns_not_values(tmp_path):
    from pipeline.errors import UserError
    from pipeline.shards import ShardWriter
    writer = ShardWriter(tmp_path, None, 10)
    writer.write(pa.table({"id": ["a"], "age": [93]}))
    with pytest.raises(UserError) as err:
        writer.write(pa.table({"id": ["b"], "age": ["Eleanor Vasquez-Hale"]}))
    assert "age (string vs int64)" in str(err.value) and "Eleanor" not in str(err.value)
    assert err.value.__suppress_context__
