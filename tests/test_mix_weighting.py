"""Weighting by metadata (docs/sources.md, "Weighting by metadata"): a mix's source repeats its
documents by factors computed from their columns (`repeat_by`), the manifest counts the repeats
per factor and per rule, the source keeps its share of the train tokens, and validation holds
every document once."""
from __future__ import annotations

import hashlib
import json
from collections import Counter

import numpy as np
import pytest

from conftest import RAW, read_arrow_dir, run_in_process, write_config, write_jsonl
from pipeline.config import load_config
from pipeline.errors import ConfigError

WEIGHTED = """
output_dir: {out}
seed: 3
batch_size: 50
shard_size: 40
progress: false
sources:
  pubmed:
    input: {{paths: [{raw}], limit: 120}}
    stages: [normalize]
  reports:
    input: {{paths: [{reports}]}}
    stages: [normalize]
stages:
  - dedup_exact: {{priority: [reports, pubmed]}}
  - split: {{validation_fraction: 0.1}}
  - tokenizer: {{vocab_size: 600, compare: []}}
  - pack: {{seq_len: 128, batch_size: 4, formats: [datasets, megatron]}}
mix:
  pubmed:
    weight: 0.7
    repeat_by:
      - {{column: publication_types, any_of: [Review, Systematic Review, Meta-Analysis], add: 2}}
      - {{column: publication_types, any_of: ["Research Support, Non-U.S. Gov't"], add: 0.5, name: funded}}
      - {{column: year, min: 2021, add: 0.25}}
  reports: {{weight: 0.3, max_epochs: 8}}
"""


def _final_digests(run) -> dict:
    return {str(p.relative_to(run)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in (run / "final").rglob("*") if p.is_file() and p.name != "README.md"}


@pytest.fixture(scope="module")
def weighted(tmp_path_factory):
    """120 abstracts weighted by publication type and year (a review 3 times, a funded study 1.5
    times, ...) beside 25 other abstracts (`reports`) repeated to their share."""
    from test_sources import _abstracts
    tmp = tmp_path_factory.mktemp("weighted")
    docs = _abstracts(200)
    write_jsonl(tmp / "reports.jsonl", [{"id": f"r-{d['id']}", "text": d["text"]} for d in docs[150:175]])
    config = write_config(tmp / "w.yaml", WEIGHTED.format(out=tmp / "run", raw=RAW, reports=tmp / "reports.jsonl"))
    code, _, err = run_in_process("run", "--config", config)
    assert code == 0, err
    return {"run": tmp / "run", "config": config, "tmp": tmp}


def _documents(prefix) -> list[tuple]:
    from pipeline.stages.pack.writers import read_megatron
    meg = read_megatron(prefix)
    ends = np.cumsum(np.asarray(meg["sequence_lengths"], np.int64))
    return [tuple(np.asarray(meg["tokens"][e - n:e]).tolist()) for e, n in zip(ends, meg["sequence_lengths"])]


def test_manifest_counts_the_repeats_per_factor_and_rule(weighted):
    manifest = json.loads((weighted["run"] / "manifest.json").read_text())
    pubmed = manifest["mix"]["sources"]["pubmed"]
    rb = pubmed["repeat_by"]
    factors = {f["factor"]: f for f in rb["factors"]}
    # 1; 1.5 (funded); 3 (a review); 3.5 (both); 1.25 (2021 or later).
    assert {1.0, 1.5, 3.0, 3.5} <= set(factors)
    assert sum(f["documents"] for f in rb["factors"]) == manifest["sources"]["pubmed"]["stages"][-1]["docs_out"] \
        - sum(1 for r in read_arrow_dir(weighted["run"] / "stages/04_tokenizer/data").to_pylist()
              if r["source"] == "pubmed" and r["split"] == "validation")
    assert sum(f["tokens_before"] for f in rb["factors"]) == pubmed["train_tokens_before"]
    assert sum(f["tokens_after"] for f in rb["factors"]) == pubmed["train_tokens_after"]
    assert factors[1.0]["repeated_tokens"] == 0 and factors[3.0]["repeated_tokens"] > 0
    assert rb["weighted_tokens"] == round(sum(f["factor"] * f["tokens_before"] for f in rb["factors"]))
    assert [r["rule"] for r in rb["rules"]] == ["publication_types: Review, Systematic Review, Meta-Analysis",
                                                "funded", "year >= 2021"]
    assert all(r["documents"] > 0 for r in rb["rules"])
    # Each factor's documents are there epochs x factor times, the fractions to a document or so.
    for f in rb["factors"]:
        assert f["planned_times"] == pytest.approx(pubmed["epochs"] * f["factor"], abs=1e-3)
        whole = int(f["planned_times"] + 1e-9)
        assert whole <= f["times"] <= whole + 1
    report = (weighted["run"] / "report.html").read_text()
    assert "Repeats by metadata" in report and "funded" in report


def test_weighted_shares_hold_within_a_point(weighted):
    manifest = json.loads((weighted["run"] / "manifest.json").read_text())
    mix = manifest["mix"]
    for source, weight in (("pubmed", 0.7), ("reports", 0.3)):
        assert abs(mix["sources"][source]["share"] - weight) < 0.01
    assert mix["train_tokens"] == manifest["splits"]["train"]["tokens"]


def test_each_document_is_in_train_its_factor_times_and_in_validation_once(weighted):
    """From the packed mixture itself (the Megatron files, every document with its EOS): each
    train abstract as often as its factor says (epochs 1 here: 1, 1.5, 3 or 3.5 times, a
    fraction taking one more copy or not), each validation document once."""
    from tokenizers import Tokenizer

    from pipeline.engines.mixing import repeat_factors
    run = weighted["run"]
    manifest = json.loads((run / "manifest.json").read_text())
    rules = [{**r.model_dump(exclude_none=True), "label": r.label}
             for r in load_config(weighted["config"]).run.mix["pubmed"].repeat_by]
    tok = Tokenizer.from_file(str(run / "tokenizer/tokenizer.json"))
    eos = tok.token_to_id("<|endoftext|>")
    table = read_arrow_dir(run / "stages/04_tokenizer/data")
    train = Counter(_documents(run / "final/megatron/train_text_document"))
    validation = _documents(run / "final/megatron/validation_text_document")
    assert len(validation) == len(set(validation)) == manifest["splits"]["validation"]["documents"]
    pubmed = table.filter(np.array([s == "pubmed" for s in table["source"].to_pylist()]))
    factors, _ = repeat_factors(pubmed, rules)
    epochs = manifest["mix"]["sources"]["pubmed"]["epochs"]
    assert epochs == 1.0
    seen = Counter()
    for row, factor in zip(pubmed.to_pylist(), factors):
        doc = tuple(tok.encode(row["text"], add_special_tokens=False).ids + [eos])
        if row["split"] == "validation":
            assert doc not in train and doc in validation
            continue
        times = train[doc]
        assert int(factor) <= times <= int(np.ceil(factor)), (row["id"], factor, times)
        seen[factor, times] += 1
    assert seen[3.0, 3] > 0 and seen[1.0, 1] > 0 and seen[1.5, 1] > 0 and seen[1.5, 2] > 0


def test_same_config_same_bytes(weighted, tmp_path):
    config = write_config(tmp_path / "w.yaml", weighted["config"].read_text().replace(
        str(weighted["run"]), str(tmp_path / "again")))
    code, _, err = run_in_process("run", "--config", config)
    assert code == 0, err
    assert _final_digests(tmp_path / "again") == _final_digests(weighted["run"])


@pytest.mark.parametrize("rules, message", [
    ("[{column: pubtype, any_of: [Review], add: 1}]",
     r"mix.pubmed.repeat_by\[0\].column: 'pubtype' is not a column of MEDLINE XML \(columns: pmid"),
    ("[{column: year, any_of: ['2020'], add: 1}]", r"mix.pubmed.repeat_by\[0\].any_of: 'year' holds int32"),
    ("[{column: publication_types, min: 2, add: 1}]", r"mix.pubmed.repeat_by\[0\]: min:/max: need a number column"),
    ("[{column: year, min: 2020, any_of: [x], add: 1}]", "give either any_of"),
    ("[{column: year, min: 2020, add: 0}]", r"mix.pubmed.repeat_by\[0\].add: .*greater than 0"),
    ("[{column: year, min: 2020, max: 2010, add: 1}]", "min 2020 is above max 2010"),
    ("[{column: year, min: 2020, add: 1}, {column: year, min: 2020, add: 2}]", "two rules have the same name"),
    ("[{column: year, min: 2020, add: 1, weight: 2}]", r"repeat_by\[0\].weight"),
])
def test_a_bad_repeat_by_is_refused_up_front_in_one_line(tmp_path, rules, message):
    path = write_config(tmp_path / "c.yaml", WEIGHTED.format(out=tmp_path / "run", raw=RAW,
                                                             reports=tmp_path / "r.jsonl").split("mix:")[0]
                        + f"mix:\n  pubmed: {{weight: 0.7, repeat_by: {rules}}}\n  reports: {{weight: 0.3}}\n")
    write_jsonl(tmp_path / "r.jsonl", [{"id": "a", "text": "x"}])
    with pytest.raises(ConfigError, match=message):
        load_config(path)
    code, out, err = run_in_process("run", "--config", path)
    assert code != 0 and not (tmp_path / "run").exists()
    assert len([line for line in err.splitlines() if "repeat_by" in line]) == 1, err


def test_a_jsonl_source_weights_by_the_fields_it_reads_as_columns(tmp_path):
    base = WEIGHTED.format(out=tmp_path / "run", raw=RAW, reports=tmp_path / "r.jsonl").split("mix:")[0]
    write_jsonl(tmp_path / "r.jsonl", [{"id": "a", "text": "x", "kind": "guideline"}])
    mix = ("mix:\n  pubmed: {weight: 0.7}\n"
           "  reports: {weight: 0.3, repeat_by: [{column: kind, any_of: [guideline], add: 1}]}\n")
    with pytest.raises(ConfigError, match=r"mix.reports.repeat_by\[0\].column: 'kind' is not a column of this input"):
        load_config(write_config(tmp_path / "a.yaml", base + mix))
    with_columns = base.replace("input: {paths: [" + str(tmp_path / "r.jsonl") + "]}",
                                "input: {paths: [" + str(tmp_path / "r.jsonl") + "], columns: [kind]}")
    assert load_config(write_config(tmp_path / "b.yaml", with_columns + mix)).run.mix["reports"].repeat_by


@pytest.mark.parametrize("kind", ["parquet", "datasets"])
def test_a_parquet_or_datasets_source_is_checked_against_its_schema_up_front(tmp_path, kind):
    """The columns of a Parquet file or a datasets folder are read from their schema, before any
    work: a rule on a missing column or one of the wrong kind is refused in one line."""
    import pyarrow as pa
    table = pa.table({"id": ["a", "b"], "body": ["x y", "z"], "year": pa.array([2019, 2021], pa.int32()),
                      "kind": ["guideline", "note"]})
    if kind == "parquet":
        import pyarrow.parquet as pq
        path = tmp_path / "r.parquet"
        pq.write_table(table, path)
    else:
        from datasets import Dataset
        path = tmp_path / "r-dataset"
        Dataset(table).save_to_disk(str(path))
    base = WEIGHTED.format(out=tmp_path / "run", raw=RAW, reports=path).split("mix:")[0].replace(
        f"input: {{paths: [{path}]}}", f"input: {{paths: [{path}], text_field: body}}")
    for rule, message in (("{column: kinds, any_of: [guideline], add: 1}",
                           r"'kinds' is not a column of r\S* \(its columns\) \(columns: year, kind\)"),
                          ("{column: year, any_of: ['2021'], add: 1}", "'year' holds int32, not text"),
                          ("{column: kind, min: 1, add: 1}", "need a number column; 'kind' holds string")):
        mix = f"mix:\n  pubmed: {{weight: 0.7}}\n  reports: {{weight: 0.3, repeat_by: [{rule}]}}\n"
        with pytest.raises(ConfigError, match=message):
            load_config(write_config(tmp_path / "c.yaml", base + mix))
    good = "mix:\n  pubmed: {weight: 0.7}\n  reports: {weight: 0.3, repeat_by: [{column: year, min: 2020, add: 1}]}\n"
    assert load_config(write_config(tmp_path / "d.yaml", base + good)).run.mix["reports"].repeat_by


def test_weighted_copies_meet_the_tokens_to_a_document():
    from pipeline.engines.mixing import draw_cutoff, weighted_copies, weighted_parts
    rng = np.random.default_rng(0)
    n = 2000
    keys = rng.integers(0, 2**63, n, dtype=np.int64).astype(np.uint64)
    lengths = rng.integers(50, 400, n)
    factors = 1 + np.where(rng.random(n) < 0.3, 0.5, 0.0) + np.where(rng.random(n) < 0.1, 2.0, 0.0)
    epochs = 1.37
    whole, ranked = weighted_parts(factors, keys, epochs)
    part = np.isfinite(ranked)
    need = epochs * float(np.dot(factors, lengths)) - float(np.dot(whole, lengths))
    cutoff = draw_cutoff(ranked[part], lengths[part], need, past_end=2.0 ** 64)
    copies = weighted_copies(factors, keys, epochs, cutoff)
    assert copies.min() >= 0
    got = float(np.dot(copies + 1, lengths))
    assert abs(got - epochs * np.dot(factors, lengths)) <= lengths.max()
    # Every document at least its whole times, at most one more.
    times = epochs * factors
    assert np.all(copies + 1 >= np.floor(times + 1e-9)) and np.all(copies + 1 <= np.ceil(times - 1e-9))
    assert abs(cutoff - 1.0) < 0.2


def test_the_tokenizer_sample_repeats_by_the_factors_too(weighted):
    """The tokenizer learns from the weighted mix: the abstracts' bytes count their factors, and
    the sample holds the sources near their weights (in UTF-8 bytes, fractions by draw)."""
    stats = json.loads((weighted["run"] / "stages/04_tokenizer/stats.json").read_text())
    sample = stats["mix_sample"]
    pubmed = sample["pubmed"]
    assert pubmed["weighted_bytes"] > pubmed["bytes_before"]
    assert pubmed["bytes_after"] == pytest.approx(pubmed["epochs"] * pubmed["weighted_bytes"], rel=0.05)
    assert abs(pubmed["share"] - 0.7) < 0.03 and "weighted_bytes" not in sample["reports"]


def test_the_card_states_the_repeats_per_factor(weighted):
    card = (weighted["run"] / "final/README.md").read_text()
    assert "pubmed's train documents repeated by their metadata" in card and "funded: +0.5" in card
    assert "| 3 |" in card


@pytest.mark.ray
def test_a_weighted_mix_gives_the_same_bytes_under_ray(weighted, ray_instance, tmp_path):
    """The weighted run under the session's Ray instance: the same final/ as the local run's."""
    from pipeline.runner import run_chain
    text = weighted["config"].read_text().replace(str(weighted["run"]), str(tmp_path / "ray"))
    config = write_config(tmp_path / "ray.yaml", text.replace("progress: false\n",
                                                              "progress: false\nnum_proc: 1\n"
                                                              "executor: {kind: ray, num_cpus: 2}\n"))
    run_chain(load_config(config))
    manifest = json.loads((tmp_path / "ray/manifest.json").read_text())
    assert manifest["executor"]["kind"] == "ray"
    assert _final_digests(tmp_path / "ray") == _final_digests(weighted["run"])


def test_a_rule_on_a_column_of_the_wrong_kind_is_refused_at_pack_in_one_line():
    """Inputs whose columns the config check cannot know (files not there yet, mixed formats): pack names the rule."""
    import pyarrow as pa

    from pipeline.engines.mixing import repeat_factors
    from pipeline.errors import UserError
    table = pa.table({"year": pa.array([2019, 2021], pa.int32()), "kind": pa.array(["a", "b"])})
    with pytest.raises(UserError, match="rule 'recent': any_of needs a text column; 'year' holds int32"):
        repeat_factors(table, [{"column": "year", "any_of": ["2021"], "add": 1, "label": "recent"}])
    with pytest.raises(UserError, match="rule 'k': min:/max: need a number column; 'kind' holds string"):
        repeat_factors(table, [{"column": "kind", "min": 1, "add": 1, "label": "k"}])
    factors, _ = repeat_factors(table, [{"column": "year", "min": 2020, "add": 0.5, "label": "r"},
                                        {"column": "kind", "any_of": ["a"], "add": 1, "label": "a"}])
    assert factors.tolist() == [2.0, 1.5]
