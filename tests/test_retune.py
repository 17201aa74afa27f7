"""Scores are columns, thresholds are config: a filter stage whose scoring options did not
change but whose thresholds did decides again from its stored score columns, without loading
its model, to the bytes a fresh run with the new threshold gives."""
import json
from pathlib import Path

import pytest

from conftest import RAW, write_config

# 200 real abstracts in 3 shards through the three model-scored filters.
CHAIN = """input: {{paths: [{raw}], limit: 200}}
output_dir: {out}
seed: 7
num_proc: 1
batch_size: 50
shard_size: 80
stages:
  - normalize: {{}}
  - langid: {{min_score: {langid_min_score}}}
  - perplexity: {{{perplexity}}}
  - toxicity: {{max_score: {toxicity_max_score}}}
"""
FIRST = {"langid_min_score": 0.65, "perplexity": "mode: max", "toxicity_max_score": 0.9}


def _config(tmp_path: Path, out: Path, name: str, **options):
    from pipeline.config import load_config
    text = CHAIN.format(raw=RAW, out=out, **{**FIRST, **options})
    return load_config(write_config(tmp_path / f"{name}.yaml", text))


def _stats(run: Path, folder: str) -> dict:
    return json.loads((run / "stages" / folder / "stats.json").read_text())


def _outputs(run: Path) -> dict[str, bytes]:
    """The documents and removal records of every stage, by run-relative name."""
    return {p.relative_to(run).as_posix(): p.read_bytes() for p in sorted((run / "stages").rglob("*.arrow"))
            if p.parent.name in ("data", "removed")}


@pytest.fixture(scope="module")
def first_run(tmp_path_factory) -> Path:
    """The first run (FIRST thresholds), made once: each test retunes a copy of it."""
    from pipeline.runner import run_chain
    tmp = tmp_path_factory.mktemp("retune")
    run_chain(_config(tmp, tmp / "run", "first"))
    return tmp / "run"


def _copy_of_first_run(first_run: Path, tmp_path: Path) -> Path:
    """A copy of the first run in tmp_path (and tmp_path/first.yaml naming it), as if run there."""
    import shutil
    run = tmp_path / "run"
    shutil.copytree(first_run, run)
    _config(tmp_path, run, "first")
    return run


def _refuse_setup(self):
    raise AssertionError(f"{self.name}: the model was loaded for a threshold-only rerun")


# (stage folder, stage class, retuned option and value, the stage after it that must rerun)
RETUNES = [
    ("04_toxicity", "pipeline.stages.toxicity:Toxicity", {"toxicity_max_score": 0.02}, None),
    ("02_langid", "pipeline.stages.langid:LanguageId", {"langid_min_score": 0.85}, "03_perplexity"),
    # Abstracts of another MEDLINE file than the model's are above its reference cutoffs: ours.
    ("03_perplexity", "pipeline.stages.perplexity:Perplexity",
     {"perplexity": "mode: buckets, bucket_cutoffs: [400.0, 600.0]"}, "04_toxicity"),
]


@pytest.mark.parametrize("folder, stage_class, retune, after", RETUNES, ids=[r[0] for r in RETUNES])
def test_threshold_only_reruns_do_not_load_the_model(first_run, tmp_path, monkeypatch, folder, stage_class, retune,
                                                     after):
    import importlib

    from pipeline.runner import run_chain

    module, cls = stage_class.split(":")
    stage_cls = getattr(importlib.import_module(module), cls)
    run, fresh = _copy_of_first_run(first_run, tmp_path), tmp_path / "fresh"
    first = _stats(run, folder)
    assert first["decided_from_stored_scores"] is False
    key = first["cache_keys"][0]
    assert key.startswith(f"cache/scores/{first['stage']}/")
    assert len(list((run / key).glob("*.arrow"))) == first["shards"] == 3
    first_outputs = _outputs(run)
    normalize = _stats(run, "01_normalize")

    # The retune, in this process (num_proc 1: the executor runs the tasks here): setup() raises.
    with monkeypatch.context() as patch:
        patch.setattr(stage_cls, "setup", _refuse_setup)
        run_chain(_config(tmp_path, run, "retuned", **retune))
    retuned = _stats(run, folder)
    assert retuned["decided_from_stored_scores"] is True
    assert retuned["cache_keys"] == [key]
    assert retuned["fingerprint"] != first["fingerprint"]
    assert retuned["docs_in"] == first["docs_in"]
    assert retuned["docs_in"] == retuned["docs_out"] + sum(retuned["removed"].values())
    # The new threshold removes documents the first one kept.
    assert retuned["docs_out"] < first["docs_out"]
    # The stages before it were skipped (their stats, timings included, unchanged); the one
    # after it ran again, on the new input, with its model.
    assert _stats(run, "01_normalize") == normalize
    if after:
        assert _stats(run, after)["decided_from_stored_scores"] is False
        assert _stats(run, after)["docs_in"] == retuned["docs_out"]

    # A fresh run with the new threshold, in another folder, scores with the model: same bytes.
    run_chain(_config(tmp_path, fresh, "fresh", **retune))
    assert _stats(fresh, folder)["decided_from_stored_scores"] is False
    assert _stats(fresh, folder)["removed"] == retuned["removed"]
    ours, theirs = _outputs(run), _outputs(fresh)
    assert sorted(ours) == sorted(theirs)
    assert [name for name in ours if ours[name] != theirs[name]] == []

    # Back to the first threshold: the scores outlived the stage folder, so again no model,
    # and the first run's bytes.
    with monkeypatch.context() as patch:
        patch.setattr(stage_cls, "setup", _refuse_setup)
        run_chain(_config(tmp_path, run, "back"))
    assert _stats(run, folder)["decided_from_stored_scores"] is True
    back = _outputs(run)
    assert [name for name in first_outputs if first_outputs[name] != back.get(name)] == []


def test_a_scoring_option_change_scores_again(first_run, tmp_path):
    """Only thresholds are left out of the score fingerprint: another scoring option (langid's
    model_path, here naming the bundled model itself) gives another score folder, and the
    stage scores with its model, to the same documents."""
    from pipeline.runner import run_chain
    from pipeline.stages.langid import bundled_lid_model

    run = _copy_of_first_run(first_run, tmp_path)
    first = _stats(run, "02_langid")
    text = (tmp_path / "first.yaml").read_text().replace(
        "langid: {min_score: 0.65}", f"langid: {{min_score: 0.85, model_path: {bundled_lid_model()}}}")
    from pipeline.config import load_config
    run_chain(load_config(write_config(tmp_path / "model.yaml", text)))
    again = _stats(run, "02_langid")
    assert again["decided_from_stored_scores"] is False
    assert again["cache_keys"] != first["cache_keys"]
    assert (run / first["cache_keys"][0]).is_dir() and (run / again["cache_keys"][0]).is_dir()
    assert again["docs_out"] < first["docs_out"]
