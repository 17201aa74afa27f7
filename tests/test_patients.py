"""A clinical corpus by patient: the patient column read from the notes' JSON, carried through
phi as a keyed pseudonym, and split so that each patient's notes land whole in one split."""
import json
from collections import Counter, defaultdict

import numpy as np

from conftest import notes_by_patient, read_arrow_dir, run_in_process, write_config, write_jsonl


def test_each_patient_lands_whole_in_one_split_under_a_pseudonym(tmp_path):
    notes = notes_by_patient(4)
    write_jsonl(tmp_path / "notes.jsonl", notes)
    cfg = write_config(tmp_path / "c.yaml", f"""
input: {{paths: [{tmp_path / 'notes.jsonl'}], columns: [patient_id]}}
output_dir: {tmp_path / 'run'}
num_proc: 1
shard_size: 40
progress: false
report: false
stages:
  - normalize: {{}}
  - phi: {{profile: clinical, group_field: patient_id}}
  - split: {{validation_fraction: 0.2, by: patient_id}}
""")
    code, _, err = run_in_process("run", "--config", cfg)
    assert code == 0, err[-3000:]
    out = read_arrow_dir(tmp_path / "run/stages/03_split/data")
    raw = {n["patient_id"] for n in notes}
    # The patient column is a keyed pseudonym: no raw value is left in it.
    assert not set(out["patient_id"].to_pylist()) & raw
    assert all(p.startswith("doc-") for p in out["patient_id"].to_pylist())
    splits = defaultdict(set)
    for patient, split in zip(out["patient_id"].to_pylist(), out["split"].to_pylist()):
        splits[patient].add(split)
    assert all(len(s) == 1 for s in splits.values())                    # every patient whole
    # The same patients, with the same numbers of notes, under their pseudonyms.
    assert sorted(Counter(out["patient_id"].to_pylist()).values()) == sorted(
        Counter(n["patient_id"] for n in notes).values())
    stats = json.loads((tmp_path / "run/stages/03_split/stats.json").read_text())
    by = stats["by"]
    assert by["column"] == "patient_id" and sum(by["groups"].values()) == len(raw)
    validation = stats["splits"]["validation"]
    assert by["groups"]["validation"] == len({p for p, s in splits.items() if s == {"validation"}}) > 0
    # As close to the fraction as whole patients allow: within one patient's notes of it.
    assert abs(validation - 0.2 * len(notes)) <= max(Counter(n["patient_id"] for n in notes).values())
    assert by["validation_share"] == round(validation / len(notes), 5)


def test_validation_groups_come_closest_to_the_fraction():
    from pipeline.engines.splits import validation_groups
    keys = np.arange(5, dtype=np.uint64)
    sizes = np.array([30, 1, 50, 2, 17])
    assert validation_groups(keys, sizes, 0.3).tolist() == [0]               # 30 of 100
    assert validation_groups(keys, sizes, 0.32).tolist() == [0, 1]           # 31
    assert validation_groups(keys, sizes, 0.05).tolist() == []               # 0 is closer than 30
    assert validation_groups(keys, sizes, 0.9).tolist() == [0, 1, 2, 3]      # 83
