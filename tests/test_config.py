"""Bad configs are refused before any work starts, naming the key path."""
import pytest

from conftest import RAW, run_cli, write_config
from pipeline.config import load_config
from pipeline.errors import ConfigError

BASE = f"""
input: {{paths: [{RAW}]}}
output_dir: OUT
stages:
"""


@pytest.mark.parametrize("stages, expected", [
    ("  - dedup_exact: {hash: md5}\n", "stages[0].dedup_exact.hash"),
    ("  - normalize: {}\n  - langid: {min_score: 2}\n", "stages[1].langid.min_score"),
    ("  - heuristics: {min_wrods: 10}\n", "stages[0].heuristics.min_wrods: unknown key"),
    ("  - dedupe: {}\n", "stages[0]: unknown stage 'dedupe'"),
    ("  - split: {validation_fraction: 1.5}\n", "stages[0].split.validation_fraction"),
    ("  - dedup_minhash: {threshold: high}\n", "stages[0].dedup_minhash.threshold"),
    ("  - pack: {}\n  - normalize: {}\n", "out of order"),
    ("  - perplexity: {model_path: nowhere.binary}\n", "stages[0].perplexity.model_path: file not found"),
])
def test_bad_stage_options_are_refused_by_key(tmp_path, stages, expected):
    cfg = write_config(tmp_path / "c.yaml", BASE.replace("OUT", str(tmp_path / "run")) + stages)
    with pytest.raises(ConfigError) as err:
        load_config(cfg)
    assert expected in str(err.value)
    assert not (tmp_path / "run").exists()          # refused before any work


def test_top_level_errors(tmp_path):
    cfg = write_config(
        tmp_path / "c.yaml",
        "input: {paths: [missing.jsonl]}\noutput_dir: x\nnum_proc: 0\nstages: [normalize]\nextra: 1\n",
    )
    with pytest.raises(ConfigError) as err:
        load_config(cfg)
    assert "num_proc" in str(err.value) and "extra: unknown key" in str(err.value)
    cfg = write_config(tmp_path / "d.yaml", "input: {paths: [missing.jsonl]}\noutput_dir: x\nstages: [normalize]\n")
    with pytest.raises(ConfigError, match="input.paths: not found: missing.jsonl"):
        load_config(cfg)


def test_cli_prints_one_line_and_exits_nonzero(tmp_path):
    cfg = write_config(
        tmp_path / "c.yaml", BASE.replace("OUT", str(tmp_path / "run")) + "  - dedup_exact: {hash: md5}\n"
    )
    proc = run_cli("-m", "pipeline", "run", "--config", str(cfg), check=False)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "stages[0].dedup_exact.hash" in lines[0]
    proc = run_cli("-m", "pipeline", "run", "--config", str(tmp_path / "nope.yaml"), check=False)
    assert proc.returncode == 2 and "config file not found" in proc.stderr


def test_yaml_syntax_error_names_line(tmp_path):
    cfg = write_config(tmp_path / "c.yaml", "input: {paths: [a]\noutput_dir: x\n")
    with pytest.raises(ConfigError, match="line"):
        load_config(cfg)


def test_shipped_configs_validate():
    for name in ("pubmed", "tiny"):
        cfg = load_config(f"configs/{name}.yaml")
        assert cfg.stages[0].name == "normalize" and cfg.stages[-1].name == "pack"
    load_config("configs/clinical_notes.yaml", check_inputs=False)


def test_top_level_and_stage_errors_are_reported_together(tmp_path):
    cfg = write_config(
        tmp_path / "c.yaml",
        f"input: {{paths: [{RAW}]}}\noutput_dir: x\nnum_proc: 0\n"
        "stages: [normalize, {dedup_exact: {hash: md5}}, {langid: {min_score: 2}}, pack, split]\n",
    )
    with pytest.raises(ConfigError) as err:
        load_config(cfg)
    message = str(err.value)
    assert "num_proc" in message and "stages[1].dedup_exact.hash" in message and "stages[2].langid.min_score" in message
    assert "out of order" in message


def test_executor_options_are_validated_up_front(tmp_path):
    base = f"input: {{paths: [{RAW}]}}\noutput_dir: {tmp_path / 'run'}\nstages: [normalize]\n"
    cfg = load_config(write_config(tmp_path / "short.yaml", base + "executor: ray\n"))
    assert cfg.run.executor.kind == "ray" and cfg.run.executor.address is None
    # --executor overrides the file's kind and keeps its other options.
    cfg = load_config(
        write_config(tmp_path / "keep.yaml", base + "executor: {kind: ray, num_cpus: 2}\n"), executor="local"
    )
    assert cfg.run.executor.kind == "local" and cfg.run.executor.num_cpus == 2
    for bad, where in (
        ("executor: {kind: spark}", "executor.kind"),
        ("executor: {kind: ray, workers: {phy: 4}}", "executor.workers.phy: unknown stage"),
        ("executor: {kind: ray, cpus_per_worker: 0}", "executor.cpus_per_worker"),
    ):
        with pytest.raises(ConfigError) as err:
            load_config(write_config(tmp_path / "bad.yaml", base + bad + "\n"))
        assert where in str(err.value)


def test_a_shipped_config_is_found_by_its_repository_path_outside_the_checkout(tmp_path, monkeypatch):
    """`--config configs/pubmed.yaml`, as README and docs/ write it, works from any folder (after
    a pip install there is no configs/ here); a file of that name here wins; another is not found."""
    from pipeline.resources import find_config, shipped_configs
    monkeypatch.chdir(tmp_path)
    assert find_config("configs/tiny.yaml") == shipped_configs()["tiny"] == find_config("tiny")
    assert load_config("configs/tiny.yaml").stages[0].name == "normalize"
    (tmp_path / "configs").mkdir()
    (tmp_path / "configs/tiny.yaml").write_text("x: 1\n")
    assert find_config("configs/tiny.yaml").resolve() == (tmp_path / "configs/tiny.yaml").resolve()
    with pytest.raises(ConfigError, match="configs/nope.yaml: config file not found"):
        load_config("configs/nope.yaml")


def test_a_ray_config_without_ray_installed_is_one_line_saying_what_to_install(tmp_path, monkeypatch):
    import importlib.util
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "ray" else real(name, *a))
    path = write_config(tmp_path / "c.yaml", f"input: {{paths: [{RAW}]}}\noutput_dir: {tmp_path}/r\n"
                                             "executor: ray\nstages: [normalize]\n")
    with pytest.raises(ConfigError, match=r"executor.kind: ray needs Ray.*pip install 'medprep\[ray\]'"):
        load_config(path)
