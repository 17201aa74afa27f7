"""Known identifiers (`phi.known_phi`): the hospital's registry of its patients, looked up in their
notes in the forms notes write them, checked up front, and never written anywhere."""
from __future__ import annotations

import json

import pytest

from conftest import ROOT, read_arrow_dir, run_in_process, write_config, write_jsonl
from pipeline.phi.known import KnownIdentifiers, RegistryError, read_registry

REGISTRY = """patient_id,name,mrn,dob,address,phone,email
p1,Dana Whitcombe,4412345,1961-03-07,"12 Birch Lane, Vestby",(617) 555-0142,dana.w@example.org
p1,"Hu, Leo",,,,,
p2,Oluwaseun Adeyemi,AB-99817,2/29/1944,,,
"""
# Planted in forms the detector and the rules alone miss: a lower-case name with no cue, a bare
# MRN, a date of birth written another way, a name that is also a word.
PLANTED = {"p1": "spoke w dana whitcombe re plan, then hu. 4412345 on band. dob 7 Mar 61. dana.w@example.org",
           "p2": "family (dana whitcombe) called; 441-2345 was not his. adeyemi stable. born february 29th, 1944"}
VALUES = ["whitcombe", "4412345", "441-2345", "7 Mar 61", "adeyemi", "february 29th, 1944", "dana.w@example.org"]


def _registry(tmp_path, text=REGISTRY):
    path = tmp_path / "registry.csv"
    path.write_text(text, encoding="utf-8")
    return path


def _found(known: KnownIdentifiers, text: str, patient) -> list[str]:
    return [text[s:e] for s, e, _ in known.spans(text, patient)]


def test_a_patients_values_in_the_forms_notes_write_them(tmp_path):
    known = KnownIdentifiers(read_registry(_registry(tmp_path)), frozenset({"rose", "bell"}))
    text = ("WHITCOMBE, DANA seen. D. Whitcombe signed; mrn 441 2345; DOB 03/07/1961 (3-7-61, 1961-03-07, "
            "March 7, 1961). Lives 12 birch lane, VESTBY. call 617.555.0142. Leo Hu and hu.")
    found = _found(known, text, "p1")
    for value in ("WHITCOMBE, DANA", "D. Whitcombe", "441 2345", "03/07/1961", "3-7-61", "1961-03-07",
                  "March 7, 1961", "12 birch lane", "617.555.0142", "Leo Hu", "hu"):
        assert value in found, value
    # Another patient's document: only full names and MRNs of the registry, not the surname alone.
    other = _found(known, text, "p2")
    assert "WHITCOMBE, DANA" in other and "441 2345" in other and "Leo Hu" in other
    assert "hu" not in other and "03/07/1961" not in other and "617.555.0142" not in other


def test_a_listed_name_that_is_a_word_is_found_only_capitalized(tmp_path):
    known = KnownIdentifiers(read_registry(_registry(tmp_path, "patient_id,name\np9,Rose Bell\n")),
                             frozenset({"rose", "bell"}))
    text = "Rose called. the bell rang; a rose. ROSE ok. rose bell came."
    assert _found(known, text, "p9") == ["Rose", "ROSE", "rose bell"]


@pytest.mark.parametrize("text, says", [
    ("name,mrn\nDana Whitcombe,4412345\n", "line 1: no patient_id column"),
    ("patient_id,name,ssn\np1,Dana Whitcombe,123\n", "line 1: unknown column 'ssn'"),
    ("patient_id,name,dob\np1,Dana Whitcombe,1961-03-07\np2,Leo Hu,7th of March\n", "line 3: dob is not a date"),
    ("patient_id,mrn\np1,12\n", "line 2: mrn has fewer than 4"),
])
def test_a_bad_registry_is_refused_naming_line_and_column_never_a_value(tmp_path, text, says):
    with pytest.raises(RegistryError) as err:
        read_registry(_registry(tmp_path, text))
    assert says in str(err.value)
    for value in ("Dana", "Whitcombe", "Leo", "7th of March", "4412345"):
        assert value not in str(err.value)


def _notes(tmp_path):
    dev = [json.loads(line) for line in (ROOT / "data/deid-dev/notes.jsonl").read_text().splitlines()[:6]]
    notes = [{"id": f"n{i}", "patient_id": "p1" if i % 2 else "p2", "text": d["text"]} for i, d in enumerate(dev)]
    for note in notes:
        note["text"] += "\n" + PLANTED[note["patient_id"]]
    return write_jsonl(tmp_path / "notes.jsonl", notes)


def _run(tmp_path, name: str, phi: str):
    cfg = write_config(tmp_path / f"{name}.yaml", f"""
input: {{paths: [{tmp_path / 'notes.jsonl'}], columns: [patient_id]}}
output_dir: {tmp_path / name}
num_proc: 1
progress: false
report: false
stages:
  - normalize: {{}}
  - phi: {phi}
""")
    return run_in_process("run", "--config", cfg)


def test_registered_values_leave_the_notes_and_never_reach_the_run_folder(tmp_path, monkeypatch):
    monkeypatch.setenv("MEDPREP_PHI_KEY", "known-test-key")
    _notes(tmp_path)
    registry = _registry(tmp_path)
    code, _, err = _run(tmp_path, "with", f"{{profile: clinical, known_phi: {registry}, patient_field: patient_id}}")
    assert code == 0, err[-3000:]
    code, _, err = _run(tmp_path, "without", "{profile: clinical, group_field: patient_id}")
    assert code == 0, err[-3000:]
    with_text = "\n".join(read_arrow_dir(tmp_path / "with/stages/02_phi/data")["text"].to_pylist())
    without_text = "\n".join(read_arrow_dir(tmp_path / "without/stages/02_phi/data")["text"].to_pylist())
    left = [v for v in VALUES if v.lower() in with_text.lower()]
    assert not left, left
    # The planted forms are ones the stage alone leaves: the registry is what removed them.
    assert [v for v in VALUES if v.lower() in without_text.lower()]
    # Nothing of the registry anywhere in the run folder (stats, manifest, logs, removed, report).
    for f in (tmp_path / "with").rglob("*"):
        if f.is_file():
            data = f.read_bytes().lower()
            for value in ("whitcombe", "adeyemi", "4412345", "ab-99817", "dana.w@example.org"):
                assert value.encode() not in data, (f, value)


def test_registry_content_is_in_the_fingerprint_as_a_keyed_digest(tmp_path, monkeypatch):
    from pipeline.config import load_config
    from pipeline.runner import bare_stage, stage_fingerprint
    monkeypatch.setenv("MEDPREP_PHI_KEY", "known-test-key")
    registry = _registry(tmp_path)
    write_jsonl(tmp_path / "in.jsonl", [{"id": "a", "patient_id": "p1", "text": "x"}])

    def prints():
        cfg = load_config(write_config(tmp_path / "c.yaml", f"""
input: {{paths: [{tmp_path / 'in.jsonl'}], columns: [patient_id]}}
output_dir: {tmp_path / 'run'}
report: false
stages:
  - phi: {{known_phi: {registry}, patient_field: patient_id}}
"""))
        spec = cfg.stage("phi")
        stage = bare_stage(spec)
        deps = stage.dependencies()
        return stage_fingerprint(stage, spec, "input", cfg), deps.cache_namespace, deps.values

    first = prints()
    registry.write_text(REGISTRY + "p3,Ann Lee,,,,,\n", encoding="utf-8")
    second = prints()
    assert first[0] != second[0] and first[1] != second[1]
    assert all("Lee" not in item and "Whitcombe" not in item for item in second[2])


def test_known_phi_without_a_patient_column_is_refused_before_any_work(tmp_path):
    registry = _registry(tmp_path)
    write_jsonl(tmp_path / "notes.jsonl", [{"id": "a", "text": "x"}])
    cfg = write_config(tmp_path / "c.yaml", f"""
input: {{paths: [{tmp_path / 'notes.jsonl'}]}}
output_dir: {tmp_path / 'run'}
progress: false
stages:
  - phi: {{known_phi: {registry}}}
""")
    code, _, err = run_in_process("run", "--config", cfg)
    assert code == 2 and "known_phi needs patient_field" in err
    assert not (tmp_path / "run/stages").exists()
