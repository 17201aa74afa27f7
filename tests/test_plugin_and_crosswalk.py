"""A stage from another package (examples/digits-filter, installed by `make setup` and found
through the `medprep.stages` entry point) in a chain of real nursing notes with phi and its id
crosswalk, under the local executor with 2 workers and under Ray, 5 shards each: the same
bytes, the plugin's removals counted by reason and shown in the report, the crosswalk whole;
and the plugin retuned from its stored scores. (One pair of runs serves both: a Ray run is the
expensive part.)"""
import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT, read_arrow_dir, write_config, write_jsonl

KEY = "5e1f0c2b9a8d7e6f5a4b3c2d1e0f9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c4d3e2f"
NOTES = 40
# The plugin reads the notes (5 shards of 8), phi the plugin's output.
CHAIN = """input: {{paths: [{src}]}}
output_dir: {out}
seed: 3
num_proc: {num_proc}
batch_size: 4
shard_size: 8
report: {report}
executor: {{kind: {kind}, num_cpus: 2}}
stages:
  - digits: {{max_digit_fraction: 0.1, max_capital_fraction: 0.6}}
  - phi: {{profile: clinical, crosswalk_file: {crosswalk}}}
"""


def _notes() -> list[dict]:
    rows = [json.loads(line) for line in (ROOT / "data/deid-dev/notes.jsonl").open()][:NOTES]
    return [{"id": r["id"], "text": r["text"]} for r in rows]


def _reasons() -> list:
    """The plugin's decision on each note, recomputed here with the stage's own functions."""
    import pyarrow as pa
    from medprep_digits import DigitsConfig, DigitsFilter
    notes = _notes()
    stage = DigitsFilter(DigitsConfig(max_digit_fraction=0.1, max_capital_fraction=0.6), None)
    table = pa.table({"id": [n["id"] for n in notes], "text": [n["text"] for n in notes]})
    return stage.decide(stage.score(table))["_reason"].to_pylist()


def _files(run: Path) -> dict[str, bytes]:
    return {p.relative_to(run).as_posix(): p.read_bytes() for p in sorted((run / "stages").rglob("*.arrow"))}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("plugin")
    src = write_jsonl(tmp / "notes.jsonl", _notes())
    env = {**os.environ, "PYTHONPATH": str(ROOT), "MEDPREP_PHI_KEY": KEY, "XDG_CONFIG_HOME": str(tmp / "xdg")}
    out = {}
    for kind, num_proc in (("local", 2), ("ray", 1)):
        cfg = write_config(tmp / f"{kind}.yaml", CHAIN.format(src=src, out=tmp / kind, num_proc=num_proc, kind=kind,
                                                              report=str(kind == "local").lower(),
                                                              crosswalk=tmp / f"{kind}.csv"))
        proc = subprocess.run([sys.executable, "-m", "pipeline", "run", "--config", str(cfg)], cwd=ROOT, env=env,
                              capture_output=True, text=True, timeout=900)
        assert proc.returncode == 0, proc.stderr[-3000:]
        out[kind] = tmp / kind
    out["tmp"] = tmp
    return out


def test_the_plugin_is_listed_after_the_stage_it_names():
    from conftest import run_cli
    listed = run_cli("-m", "pipeline", "stages").stdout.splitlines()
    names = [line.split()[0] for line in listed]
    assert names.index("digits") == names.index("heuristics") + 1
    assert "(from medprep_digits:DigitsFilter, after heuristics)" in listed[names.index("digits")]


@pytest.mark.slow
@pytest.mark.ray
def test_plugin_and_phi_write_the_same_bytes_under_both_executors(runs):
    local, ray = _files(runs["local"]), _files(runs["ray"])
    assert sorted(local) == sorted(ray) and [name for name in local if local[name] != ray[name]] == []
    assert {f"stages/{stage}/{sub}/{i:05d}.arrow" for i in range(5) for stage, sub in
            (("01_digits", "removed"), ("02_phi", "data"), ("02_phi", "removed"))} <= set(local)
    for kind in ("local", "ray"):
        stats = json.loads((runs[kind] / "stages/01_digits/stats.json").read_text())
        assert stats["executor"] == kind and stats["shards"] == 5


@pytest.mark.slow
@pytest.mark.ray
def test_the_plugin_counts_its_removals_by_reason_and_shows_them(runs):
    stats = json.loads((runs["local"] / "stages/01_digits/stats.json").read_text())
    reasons = _reasons()
    expected = {r: reasons.count(r) for r in set(reasons) if r}
    assert stats["removed"] == expected and set(expected) == {"too_many_digits", "mostly_capitals"}
    assert stats["docs_in"] == NOTES == stats["docs_out"] + sum(expected.values())
    # phi purged the plugin's documents after the run; its removed/ keeps the reasons.
    removed = read_arrow_dir(runs["local"] / "stages/01_digits/removed")
    assert removed["reason"].to_pylist() == [r for r in reasons if r]
    assert (runs["local"] / "stages/01_digits/_PURGED").exists()
    # Its score columns are annotations: phi keeps them.
    phi_columns = read_arrow_dir(runs["local"] / "stages/02_phi/data").column_names
    assert {"digit_fraction", "capital_fraction"} <= set(phi_columns)
    manifest = json.loads((runs["local"] / "manifest.json").read_text())
    assert manifest["digits_removed"] == expected
    page = (runs["local"] / "report.html").read_text()
    assert "<h2>Digits and capitals</h2>" in page and "<td>mostly_capitals</td>" in page
    assert f"<td>too_many_digits</td><td>{expected['too_many_digits']}</td>" in page
    figures = page.split('id="figures">', 1)[1]
    assert "digits_removed" in figures and page.count("<img") == 3     # funnel, digit fractions, PHI types


@pytest.mark.slow
@pytest.mark.ray
def test_the_crosswalk_holds_every_note_with_two_workers_and_five_shards(runs):
    from pipeline.stages.phi.identifiers import pseudonymize
    kept = [note["id"] for note, reason in zip(_notes(), _reasons()) if reason is None]
    assert len(kept) > 15
    expected = [["pseudonym", "id"]] + [[p, i] for p, i in zip(pseudonymize(kept, bytes.fromhex(KEY)), kept)]
    for kind in ("local", "ray"):
        with open(runs["tmp"] / f"{kind}.csv", newline="", encoding="utf-8") as fh:
            assert list(csv.reader(fh)) == expected, kind
    phi = read_arrow_dir(runs["local"] / "stages/02_phi/data")["id"].to_pylist()
    assert phi == [p for p, _ in expected[1:]]


def test_the_plugin_retunes_from_its_stored_scores(tmp_path, monkeypatch):
    """A threshold-only change decides again from the stored score columns (score() is never
    called), to the bytes of a fresh run with the new threshold."""
    from medprep_digits import DigitsFilter

    from pipeline.config import load_config
    from pipeline.runner import run_chain
    src = write_jsonl(tmp_path / "notes.jsonl", _notes()[:30])

    def config(out, digits):
        text = (f"input: {{paths: [{src}]}}\noutput_dir: {out}\nshard_size: 10\nreport: false\n"
                f"stages: [{{digits: {{max_digit_fraction: {digits}}}}}]\n")
        return load_config(write_config(tmp_path / f"{out.name}-{digits}.yaml", text))
    run_chain(config(tmp_path / "run", 0.1))

    def refuse(self, table):
        raise AssertionError("scored again for a threshold-only change")
    monkeypatch.setattr(DigitsFilter, "score", refuse)
    run_chain(config(tmp_path / "run", 0.05))
    stats = json.loads((tmp_path / "run/stages/01_digits/stats.json").read_text())
    assert stats["decided_from_stored_scores"] is True and stats["removed"]["too_many_digits"] > 0
    monkeypatch.undo()
    run_chain(config(tmp_path / "fresh", 0.05))
    assert _files(tmp_path / "run") == _files(tmp_path / "fresh")
