"""`medprep erase`: documents (by id, or by patient) out of a finished run folder. final/ must be
byte for byte what a fresh run on the input without them writes (the dataset card aside), no
file of the run folder may hold their text or their id, and the receipt names no value."""
import json
from pathlib import Path

import pyarrow as pa
import pytest

from conftest import notes_by_patient, run_in_process, write_config, write_jsonl

KEY = "erase-test-key-not-secret"


@pytest.fixture(autouse=True)
def _phi_key(monkeypatch):
    monkeypatch.setenv("MEDPREP_PHI_KEY", KEY)


def _final_files(run: Path) -> dict[str, bytes]:
    final = run / "final"
    return {p.relative_to(final).as_posix(): p.read_bytes() for p in sorted(final.rglob("*"))
            if p.is_file() and p.relative_to(final).as_posix() != "README.md"}


def _arrow_tables(path: Path):
    """An Arrow file of the run folder (a stream shard, or an IPC file: cache entries, final/)."""
    data = path.read_bytes()
    for open_ in (pa.ipc.open_stream, pa.ipc.open_file):
        try:
            return [open_(pa.BufferReader(data)).read_all()]
        except pa.ArrowInvalid:
            continue
    raise AssertionError(f"{path}: not Arrow")


def _run_folder_text(run: Path) -> tuple[str, set[str]]:
    """Every text of the run folder, decoded: files as UTF-8, Arrow files' string columns value
    by value (zstd-compressed buffers decompressed); and every value of their id-like columns."""
    chunks, ids = [], set()
    for f in sorted(run.rglob("*")):
        if not f.is_file():
            continue
        if f.suffix == ".arrow":
            for table in _arrow_tables(f):
                for name in table.column_names:
                    col = table[name]
                    if pa.types.is_string(col.type) or pa.types.is_large_string(col.type):
                        values = [v for v in col.to_pylist() if v is not None]
                        chunks.extend(values)
                        if name in ("id", "duplicate_of", "patient_id"):
                            ids.update(values)
        else:
            chunks.append(f.read_bytes().decode("utf-8", "replace"))
    return "\n\x00\n".join(chunks), ids


def _probes(texts: list[str], others: list[str]) -> list[str]:
    """A 60-character piece of each text that no other document holds."""
    rest = "\n\x00\n".join(others)
    out = []
    for text in texts:
        for start in range(0, max(1, len(text) - 60), 30):
            piece = text[start:start + 60]
            if len(piece) >= 40 and piece not in rest:
                out.append(piece)
                break
    return out


def _stage_texts(run: Path, folder_suffix: str) -> dict[str, str]:
    from pipeline.shards import read_table
    folder = next(p for p in sorted((run / "stages").iterdir()) if p.name.endswith(folder_suffix))
    table = read_table(folder, columns=["id", "text"])
    return dict(zip(table["id"].to_pylist(), table["text"].to_pylist()))


def _abstracts_config(path: Path, data: Path, out: Path) -> Path:
    return write_config(path, f"""
input: {{paths: [{data}]}}
output_dir: {out}
seed: 11
num_proc: 1
batch_size: 40
shard_size: 40
keep_removed_text: true
progress: false
report: false
stages:
  - normalize: {{}}
  - langid: {{}}
  - heuristics: {{min_words: 30}}
  - phi: {{profile: literature}}
  - dedup_exact: {{}}
  - dedup_minhash: {{}}
  - split: {{validation_fraction: 0.1}}
  - tokenizer: {{vocab_size: 1200}}
  - pack: {{seq_len: 256, batch_size: 4, formats: [datasets, megatron, flat]}}
""")


def test_erasing_documents_gives_the_fresh_runs_final_and_leaves_no_trace(tmp_path, real_docs):
    english = [d for d in real_docs if d["language"] == "eng"][:200]
    foreign = [d for d in real_docs if d["language"] != "eng"][:10]
    docs = [{"id": d["id"], "text": d["text"]} for d in english[:100] + foreign + english[100:]]
    # A copy of document 5 under another id, later: dedup keeps document 5 until it is erased.
    docs.insert(150, {"id": "copy-of-5", "text": docs[5]["text"]})
    write_jsonl(tmp_path / "all.jsonl", docs)
    run = tmp_path / "run"
    config = _abstracts_config(tmp_path / "a.yaml", tmp_path / "all.jsonl", run)
    code, _, err = run_in_process("run", "--config", config)
    assert code == 0, err[-3000:]
    normalized, redacted = _stage_texts(run, "_normalize"), _stage_texts(run, "_phi")
    # 20 documents: document 5 (a duplicate stays behind), two that langid removes, and 17 more,
    # across the shards.
    erased = [docs[5]["id"], docs[100]["id"], docs[101]["id"]] + [docs[i]["id"] for i in range(7, 200, 12)][:17]
    assert len(set(erased)) == 20
    (tmp_path / "ids.txt").write_text("\n".join(erased) + "\n\n")
    code, _, err = run_in_process("erase", str(run), "--ids", str(tmp_path / "ids.txt"))
    assert code == 0, err[-3000:]
    assert "erased: 20 documents" in err

    write_jsonl(tmp_path / "without.jsonl", [d for d in docs if d["id"] not in set(erased)])
    fresh = tmp_path / "fresh"
    code, _, err = run_in_process("run", "--config", _abstracts_config(tmp_path / "b.yaml", tmp_path / "without.jsonl",
                                                                        fresh))
    assert code == 0, err[-3000:]
    mine, theirs = _final_files(run), _final_files(fresh)
    assert sorted(mine) == sorted(theirs) and len(mine) > 5
    assert [k for k in mine if mine[k] != theirs[k]] == []
    # The stages' counts are the fresh run's too.
    for folder in sorted((run / "stages").iterdir()):
        a = json.loads((folder / "stats.json").read_text())
        b = json.loads((fresh / "stages" / folder.name / "stats.json").read_text())
        assert (a["docs_in"], a["docs_out"], a["removed"]) == (b["docs_in"], b["docs_out"], b["removed"]), folder.name
    # The copy of document 5 is kept now, as in the fresh run.
    split_ids = _stage_texts(run, "_split")
    assert "copy-of-5" in split_ids

    text, ids = _run_folder_text(run)
    others = [t for i, t in {**normalized, **redacted}.items() if i not in set(erased) and i != "copy-of-5"]
    gone = [normalized[i] for i in erased if i in normalized and i != docs[5]["id"]] + \
        [redacted[i] for i in erased if i in redacted and i != docs[5]["id"]]
    probes = _probes(gone, others)
    assert len(probes) >= 25
    assert [p for p in probes if p in text] == []
    assert not ids & set(erased)

    receipts = list((run / "erasures").glob("*.json"))
    assert len(receipts) == 1
    receipt = json.loads(receipts[0].read_text())
    raw = receipts[0].read_text()
    assert not [i for i in erased if i in raw]
    assert receipt["documents"] == 20 and receipt["values_matched"] == 20
    assert receipt["asked"] == {**receipt["asked"], "kind": "ids", "values": 20}
    assert len(receipt["asked"]["keyed_digests"]) == 20
    assert receipt["final_digest"]["before"] != receipt["final_digest"]["after"]
    from pipeline.erase import final_digest
    assert receipt["final_digest"]["after"] == final_digest(fresh)
    assert not list(run.rglob("*.tmp"))

    # A run afterwards skips every stage: the erasure stays (the input still holds them, so a
    # changed config would bring them back, which docs/cli.md says).
    code, _, err = run_in_process("run", "--config", config)
    assert code == 0 and err.count("skipped") == 9, err[-3000:]
    assert _final_files(run) == mine

    # A retune afterwards decides from the stored scores, which lost the erased rows with their
    # shards: the same final/ as the fresh run retuned.
    for folder, cfg in ((run, tmp_path / "a2.yaml"), (fresh, tmp_path / "b2.yaml")):
        data = tmp_path / ("all.jsonl" if folder == run else "without.jsonl")
        text = _abstracts_config(cfg, data, folder).read_text()
        cfg.write_text(text.replace("- langid: {}", "- langid: {min_score: 0.8}"))
        code, _, err = run_in_process("run", "--config", cfg)
        assert code == 0 and "deciding from the scores" in err, err[-3000:]
    assert _final_files(run) == _final_files(fresh) != mine

    # Refused in one line before any work: patients without a split by patient; a stage unfinished.
    (tmp_path / "p.txt").write_text("p1\n")
    code, _, err = run_in_process("erase", str(run), "--patients", str(tmp_path / "p.txt"))
    assert code == 2 and "no `by` field" in err and len(err.strip().splitlines()) == 1, err
    (run / "stages" / "09_pack" / "_SUCCESS").unlink()
    code, _, err = run_in_process("erase", str(run), "--ids", str(tmp_path / "ids.txt"))
    assert code == 2 and "has not finished" in err and len(err.strip().splitlines()) == 1, err
    # An erasure cut short (erasures/PENDING, a stage it reruns unfinished) is finished by the same command.
    retuned = _final_files(fresh)
    (run / "erasures" / "PENDING").write_text("")
    code, _, err = run_in_process("erase", str(run), "--ids", str(tmp_path / "ids.txt"))
    assert code == 0 and "erased: 0 documents" in err, err[-3000:]
    assert _final_files(run) == retuned and not (run / "erasures" / "PENDING").exists()


def test_an_erasure_cut_short_between_two_stages_is_finished_by_the_same_command(tmp_path, real_docs, monkeypatch):
    """Cut after normalize's shards are replaced (langid's refer to their old rows), then again
    after one of langid's: the same command finishes it, final/ and the stages' shards the
    uninterrupted erasure's. Without phi, dedup reads heuristics' references to normalize's texts."""
    import shutil

    import pipeline.erase as erase_module
    english = [d for d in real_docs if d["language"] == "eng"][:110]
    foreign = [d for d in real_docs if d["language"] != "eng"][:6]
    docs = [{"id": d["id"], "text": d["text"]} for d in english[:50] + foreign + english[50:]]
    write_jsonl(tmp_path / "all.jsonl", docs)
    run, cut = tmp_path / "run", tmp_path / "cut"
    config = _abstracts_config(tmp_path / "a.yaml", tmp_path / "all.jsonl", run)
    config.write_text(config.read_text().replace("  - phi: {profile: literature}\n", ""))
    code, _, err = run_in_process("run", "--config", config)
    assert code == 0, err[-3000:]
    shutil.copytree(run, cut)
    # Two in shards 0 and 2; in shard 1 two that langid removed, so that langid's shard 1 loses no
    # row of its own, only its references renumbered.
    erased = [docs[i]["id"] for i in (3, 30, 51, 53, 90, 100)]
    from pipeline.shards import read_table
    langid_removed = read_table(run / "stages" / "02_langid", "removed")["id"].to_pylist()
    assert {docs[51]["id"], docs[53]["id"]} <= set(langid_removed)
    (tmp_path / "ids.txt").write_text("\n".join(erased) + "\n")
    code, _, err = run_in_process("erase", str(run), "--ids", str(tmp_path / "ids.txt"))
    assert code == 0, err[-3000:]

    real_stage, real_write = erase_module.StageEraser.erase_stage, erase_module._write

    def cut_after_first_stage(self, folder):
        if self.counts:
            raise KeyboardInterrupt
        real_stage(self, folder)

    langid_writes = []

    def cut_in_langid(path, table, schema):
        if path.parent.parent.name.endswith("_langid") and path.parent.name == "data":
            langid_writes.append(path.name)
            if len(langid_writes) == 2:
                raise KeyboardInterrupt
        real_write(path, table, schema)

    for patch in ((erase_module.StageEraser, "erase_stage", cut_after_first_stage),
                  (erase_module, "_write", cut_in_langid)):
        with monkeypatch.context() as m:
            m.setattr(*patch)
            code, _, err = run_in_process("erase", str(cut), "--ids", str(tmp_path / "ids.txt"))
        assert code == 130, err[-3000:]
        assert (cut / "erasures" / "PENDING").exists() and list((cut / "erasures" / "PENDING.rows").rglob("*.json"))
    assert len(langid_writes) == 2
    code, _, err = run_in_process("erase", str(cut), "--ids", str(tmp_path / "ids.txt"))
    assert code == 0, err[-3000:]
    mine, theirs = _final_files(cut), _final_files(run)
    assert sorted(mine) == sorted(theirs) and len(mine) > 5
    assert [k for k in mine if mine[k] != theirs[k]] == []
    for folder in sorted((run / "stages").iterdir()):
        a = json.loads((folder / "stats.json").read_text())
        b = json.loads((cut / "stages" / folder.name / "stats.json").read_text())
        assert (a["docs_in"], a["docs_out"], a["removed"]) == (b["docs_in"], b["docs_out"], b["removed"]), folder.name
        for sub in ("data", "removed", "shards"):
            for f in sorted((folder / sub).glob("*")):
                assert f.read_bytes() == (cut / "stages" / folder.name / sub / f.name).read_bytes(), f
    assert sorted(p.name for p in (cut / "erasures").iterdir()) == [next((cut / "erasures").glob("*.json")).name]
    raw = next((cut / "erasures").glob("*.json")).read_text()
    assert not [i for i in erased if i in raw]


def _notes_config(path: Path, data: Path, out: Path, crosswalk: Path) -> Path:
    return write_config(path, f"""
input: {{paths: [{data}], columns: [patient_id]}}
output_dir: {out}
num_proc: 1
shard_size: 40
progress: false
report: false
stages:
  - normalize: {{}}
  - heuristics: {{min_words: 3, min_stop_words: 0, max_ellipsis_lines_ratio: 1.0, max_symbol_word_ratio: 0.5,
                  min_alpha_words_ratio: 0.3, min_avg_word_length: 2.0, max_avg_word_length: 15.0,
                  top_ngram_max_fraction: {{}}, c4_curly_braces: false}}
  - phi: {{profile: clinical, group_field: patient_id, crosswalk_file: {crosswalk}}}
  - dedup_exact: {{}}
  - split: {{validation_fraction: 0.2, by: patient_id}}
  - tokenizer: {{vocab_size: 800}}
  - pack: {{seq_len: 128, batch_size: 4, formats: [datasets, megatron]}}
""")


def test_erasing_patients_gives_the_fresh_runs_final_and_crosswalk(tmp_path):
    from pipeline.stages.phi.identifiers import pseudonymize
    notes = notes_by_patient(3)
    write_jsonl(tmp_path / "all.jsonl", notes)
    run, crosswalk = tmp_path / "run", tmp_path / "crosswalk.csv"
    code, _, err = run_in_process("run", "--config", _notes_config(tmp_path / "a.yaml", tmp_path / "all.jsonl", run,
                                                                   crosswalk))
    assert code == 0, err[-3000:]
    redacted = _stage_texts(run, "_phi")                      # by pseudonym
    patients = ["p3", "p17", "p51"]
    gone_ids = [n["id"] for n in notes if n["patient_id"] in patients]
    assert len(gone_ids) == 9
    (tmp_path / "patients.txt").write_text("\n".join(patients) + "\n")
    code, _, err = run_in_process("erase", str(run), "--patients", str(tmp_path / "patients.txt"))
    assert code == 0, err[-3000:]
    assert "erased: 9 documents" in err

    write_jsonl(tmp_path / "without.jsonl", [n for n in notes if n["patient_id"] not in patients])
    fresh, fresh_crosswalk = tmp_path / "fresh", tmp_path / "fresh-crosswalk.csv"
    code, _, err = run_in_process("run", "--config", _notes_config(tmp_path / "b.yaml", tmp_path / "without.jsonl",
                                                                   fresh, fresh_crosswalk))
    assert code == 0, err[-3000:]
    mine, theirs = _final_files(run), _final_files(fresh)
    assert sorted(mine) == sorted(theirs) and [k for k in mine if mine[k] != theirs[k]] == []
    assert crosswalk.read_bytes() == fresh_crosswalk.read_bytes()
    for folder in sorted((run / "stages").iterdir()):          # normalize and heuristics purged by phi
        a = json.loads((folder / "stats.json").read_text())
        b = json.loads((fresh / "stages" / folder.name / "stats.json").read_text())
        assert (a["docs_in"], a["docs_out"], a["removed"]) == (b["docs_in"], b["docs_out"], b["removed"]), folder.name

    key = KEY.encode()
    pseudonyms = set(pseudonymize(gone_ids, key)) | set(pseudonymize(patients, key))
    text, ids = _run_folder_text(run)
    others = [t for i, t in redacted.items() if i not in pseudonyms]
    probes = _probes([redacted[p] for p in pseudonymize(gone_ids, key) if p in redacted], others)
    assert len(probes) >= 6
    assert [p for p in probes if p in text] == []
    assert not ids & (pseudonyms | set(gone_ids))
    raw = next((run / "erasures").glob("*.json")).read_text()
    assert json.loads(raw)["documents"] == 9 and json.loads(raw)["values_matched"] == 3
    assert not [v for v in [*patients, *gone_ids, *pseudonyms] if f'"{v}"' in raw]


def test_erase_refuses_bad_requests_in_one_line(tmp_path):
    def refused(words, *args):
        code, _, err = run_in_process("erase", *map(str, args))
        lines = [line for line in err.splitlines() if line.strip()]
        assert code == 2 and len(lines) == 1 and words in lines[0], (args, err)

    (tmp_path / "empty.txt").write_text("\n \n")
    (tmp_path / "ids.txt").write_text("a\n")
    refused("not a run folder", tmp_path / "nope", "--ids", tmp_path / "ids.txt")
    refused("not a run folder", tmp_path, "--ids", tmp_path / "ids.txt")
    (tmp_path / "half" / "stages").mkdir(parents=True)
    refused("has not finished", tmp_path / "half", "--ids", tmp_path / "ids.txt")
    (tmp_path / "half" / "manifest.json").write_text("{}")
    refused("holds no value", tmp_path / "half", "--ids", tmp_path / "empty.txt")
    refused("file not found", tmp_path / "half", "--patients", tmp_path / "missing.txt")
    refused("holds no config", tmp_path / "half", "--ids", tmp_path / "ids.txt")
