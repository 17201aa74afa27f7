"""Several sources in one run (docs/sources.md): each source's chain, the shared tail, counts by
source, deduplication across sources by priority, and the checks of a multi-source config."""
from __future__ import annotations

import hashlib
import json

import numpy as np
import pytest

from conftest import RAW, ROOT, read_arrow_dir, run_in_process, write_config, write_jsonl
from pipeline.config import load_config
from pipeline.errors import ConfigError


def test_one_source_final_bytes_unchanged(tiny_run):
    """configs/tiny.yaml's final/ and tokenizer/ as they were before sources existed (the
    digests of a run of main at the commit before; final/README.md names the run folder, so
    it is left out). A deliberate change to tiny's output updates tests/data/tiny_final.sha256."""
    expected = dict(reversed(line.split()) for line in (ROOT / "tests/data/tiny_final.sha256").read_text().splitlines())
    got = {str(p.relative_to(tiny_run)): hashlib.sha256(p.read_bytes()).hexdigest()
           for sub in ("final", "tokenizer") for p in (tiny_run / sub).rglob("*")
           if p.is_file() and str(p.relative_to(tiny_run)) != "final/README.md"}
    assert got == expected


def _abstracts(n: int) -> list[dict]:
    from pipeline.config import InputConfig
    from pipeline.readers import read_documents
    rows = []
    for batch in read_documents(InputConfig(paths=[str(RAW)], limit=n), 1000):
        rows += batch.table.select(["id", "text"]).to_pylist()
    return rows


TWO_SOURCES = """
output_dir: {out}
seed: 3
batch_size: 50
shard_size: 25
progress: false
sources:
  pubmed:
    input: {{paths: [{raw}], limit: 60}}
    stages: [normalize]
  reports:
    input: {{paths: [{reports}]}}
    stages: [normalize, {{heuristics: {{min_words: 5, min_alpha_words_ratio: 0.5}}}}]
stages:
  - dedup_exact: {{priority: [reports, pubmed]}}
  - dedup_minhash: {{priority: [reports, pubmed]}}
  - split: {{validation_fraction: 0.1}}
  - tokenizer: {{vocab_size: 600, compare: []}}
  - pack: {{seq_len: 128, batch_size: 4, formats: [datasets, megatron]}}
mix: {{pubmed: {{weight: 0.6}}, reports: {{weight: 0.4, max_epochs: 4}}}}
"""


@pytest.fixture(scope="module")
def two_sources(tmp_path_factory):
    """A run of two small sources: 60 abstracts, and 20 other abstracts plus a verbatim copy of
    abstract 3 and a copy of abstract 5 with one word changed (the `reports` source)."""
    tmp = tmp_path_factory.mktemp("sources")
    docs = _abstracts(140)
    pubmed, others = docs[:60], docs[100:120]
    changed = pubmed[5]["text"].replace(" the ", " a ", 1)
    assert changed != pubmed[5]["text"]
    reports = [{"id": f"r-{d['id']}", "text": d["text"]} for d in others] + \
        [{"id": "r-copy", "text": pubmed[3]["text"]}, {"id": "r-near", "text": changed}]
    write_jsonl(tmp / "reports.jsonl", reports)
    config = write_config(tmp / "two.yaml", TWO_SOURCES.format(out=tmp / "run", raw=RAW, reports=tmp / "reports.jsonl"))
    code, _, err = run_in_process("run", "--config", config)
    assert code == 0, err
    return {"run": tmp / "run", "config": config, "pubmed": pubmed, "tmp": tmp}


@pytest.mark.slow            # the two-source run: ~30 s of chain on a quiet machine, shared
def test_each_source_has_its_chain_and_the_tail_counts_by_source(two_sources):
    run = two_sources["run"]
    stages = sorted(p.name for p in (run / "stages").iterdir())
    assert stages == ["01_pubmed.normalize", "01_reports.normalize", "02_reports.heuristics", "03_dedup_exact",
                      "04_dedup_minhash", "05_split", "06_tokenizer", "07_pack"]
    data = read_arrow_dir(run / "stages/01_reports.normalize/data")
    assert set(data["source"].to_pylist()) == {"reports"}
    tail = read_arrow_dir(run / "stages/05_split/data")
    assert sorted(set(tail["source"].to_pylist())) == ["pubmed", "reports"]
    manifest = json.loads((run / "manifest.json").read_text())
    funnel = manifest["sources"]
    # pubmed: 60 documents and the records without an abstract the reader set aside among them.
    assert funnel["reports"]["docs_read"] == 22 and funnel["pubmed"]["stages"][0]["docs_out"] == 60
    assert manifest["docs_read"] == funnel["pubmed"]["docs_read"] + 22
    assert [s["stage"] for s in funnel["reports"]["stages"]] == [
        "reports.normalize", "reports.heuristics", "dedup_exact", "dedup_minhash", "split", "tokenizer", "pack"]
    for name, f in funnel.items():
        for step in f["stages"]:
            assert step["docs_in"] == step["docs_out"] + sum(step["removed"].values()), (name, step)
        # Each stage's input is the previous stage's output, source by source.
        assert all(a["docs_out"] == b["docs_in"] for a, b in zip(f["stages"], f["stages"][1:]))
    exact = json.loads((run / "stages/03_dedup_exact/stats.json").read_text())
    assert sum(v["docs_in"] for v in exact["docs_by_source"].values()) == exact["docs_in"]
    assert exact["docs_by_source"]["pubmed"]["removed"] == {"exact_duplicate": 1}
    report = (run / "report.html").read_text()
    assert "Source reports" in report and "reports.heuristics" in report


@pytest.mark.slow            # the two-source run: ~30 s of chain on a quiet machine, shared
def test_priority_keeps_the_preferred_source_and_names_it(two_sources):
    """The pubmed copies are removed (reports first), duplicate_of naming the reports document
    and its source."""
    run, pubmed = two_sources["run"], two_sources["pubmed"]
    exact = read_arrow_dir(run / "stages/03_dedup_exact/removed").to_pylist()
    assert exact == [{"id": pubmed[3]["id"], "reason": "exact_duplicate", "duplicate_of": "r-copy",
                      "source": "pubmed", "duplicate_of_source": "reports"}]
    near = read_arrow_dir(run / "stages/04_dedup_minhash/removed").to_pylist()
    assert {"id": pubmed[5]["id"], "reason": "near_duplicate", "duplicate_of": "r-near",
            "source": "pubmed", "duplicate_of_source": "reports"} in near
    kept = read_arrow_dir(run / "stages/04_dedup_minhash/data")["id"].to_pylist()
    assert "r-copy" in kept and "r-near" in kept


def test_by_priority_chooses_within_each_group():
    from pipeline.documents import by_priority
    from pipeline.tasks import InputShard

    class Inputs:
        shards = [InputShard("a.00000", None, 3), InputShard("b.00000", None, 3)]
    # rows 0..2 from a, 3..5 from b; groups {0, 3}, {1, 4, 5}, {2}
    rep = np.array([0, 1, 2, 0, 1, 1])
    assert by_priority(Inputs, rep, None) is rep
    assert by_priority(Inputs, rep, ["b", "a"]).tolist() == [3, 4, 2, 3, 4, 4]
    assert by_priority(Inputs, rep, ["a"]).tolist() == [0, 1, 2, 0, 1, 1]


@pytest.mark.slow            # the two-source run: ~30 s of chain on a quiet machine, shared
def test_a_source_stage_runs_alone_by_its_name(two_sources, tmp_path):
    config = two_sources["config"]
    from pipeline.cli import stage_main
    stage_main(["reports.heuristics", "--config", str(config), "--output", str(tmp_path / "h"), "--force"])
    stats = json.loads((tmp_path / "h/stats.json").read_text())
    assert stats["source"] == "reports" and stats["docs_in"] == 22
    from pipeline.errors import UserError
    from pipeline.runner import expand_names
    cfg = load_config(config, check_inputs=False)
    assert [s.key for s in expand_names(cfg, ["normalize"])] == ["pubmed.normalize", "reports.normalize"]
    assert [s.key for s in expand_names(cfg, ["reports"])] == ["reports.normalize", "reports.heuristics"]
    assert [s.key for s in expand_names(cfg, ["dedup"])] == ["dedup_exact", "dedup_minhash"]
    with pytest.raises(UserError, match="no source 'web'"):
        expand_names(cfg, ["web.normalize"])
    # A shared tail's stage alone on given files (no source of its own: the input's defaults).
    stage_main(["dedup_exact", "--config", str(config), "--input", str(two_sources["tmp"] / "reports.jsonl"),
                "--output", str(tmp_path / "tail"), "--force"])
    tail = json.loads((tmp_path / "tail/stats.json").read_text())
    assert tail["docs_in"] == 22 and tail["removed"] == {}


BASE = """
output_dir: {out}
sources:
  pubmed: {{input: {{paths: [{raw}]}}, stages: [normalize, {{phi: {{profile: literature}}}}]}}
  notes: {{input: {{paths: [{notes}]}}, private: true, stages: {notes_stages}}}
stages: {tail}
{extra}
"""


@pytest.mark.parametrize("notes_stages, tail, extra, message", [
    ("[normalize, {phi: {profile: clinical}}]", "[dedup_exact, split]", "mix: {web: {weight: 1}}",
     "mix.web: unknown source"),
    ("[normalize]", "[dedup_exact, split]", "", "sources.notes: its documents carry PHI"),
    ("[normalize]", "[{phi: {profile: clinical}}, dedup_exact]", "", "stages[0].phi: a per-source stage"),
    ("[normalize, {phi: {profile: clinical}}, dedup_exact]", "[split]", "",
     "sources.notes.stages[2].dedup_exact: a stage over the whole corpus"),
    ("[normalize, {phi: {profile: clinical}}]", "[{dedup_exact: {priority: [notes, web]}}]", "",
     "stages[0].dedup_exact.priority: unknown source 'web'"),
    ("[{phi: {profile: clinical}}, normalize]", "[dedup_exact]", "", "sources.notes and stages: out of order"),
    ("[normalize, {phi: {profile: clinical}}]", "[dedup_exact]", "input: {paths: [x.jsonl]}", "not both"),
])
def test_multi_source_config_is_refused_naming_the_key(tmp_path, notes_stages, tail, extra, message):
    path = write_config(tmp_path / "c.yaml", BASE.format(out=tmp_path / "run", raw=RAW, notes_stages=notes_stages,
                                                         tail=tail, extra=extra,
                                                         notes=ROOT / "data/deid-dev/notes.jsonl"))
    with pytest.raises(ConfigError, match=message.replace("[", r"\[").replace("]", r"\]")):
        load_config(path)


def test_priority_needs_sources(tmp_path):
    path = write_config(tmp_path / "c.yaml", f"input: {{paths: [{RAW}]}}\noutput_dir: {tmp_path}/r\n"
                                             "stages: [{dedup_exact: {priority: [notes]}}]\n")
    with pytest.raises(ConfigError, match=r"stages\[0\].dedup_exact.priority: .*one input"):
        load_config(path)


def test_medbot_config_validates():
    config = load_config(ROOT / "configs/medbot.yaml")
    assert config.source_names == ["pubmed", "fulltexts", "notes"]
    assert [r.label for r in config.run.mix["pubmed"].repeat_by] == ["guidelines", "meta-analyses", "trials",
                                                                     "recent"]
    assert [s.key for s in config.stages if s.source is None][:2] == ["dedup_exact", "dedup_minhash"]


@pytest.mark.slow            # the two-source run: ~30 s of chain on a quiet machine, shared
def test_mix_repeats_the_smaller_source_to_its_share(two_sources):
    """reports (22 documents against 60) is repeated to 40 % of the packed train tokens; the
    validation split holds each source's documents once."""
    manifest = json.loads((two_sources["run"] / "manifest.json").read_text())
    mix = manifest["mix"]
    pubmed, reports = mix["sources"]["pubmed"], mix["sources"]["reports"]
    assert pubmed["epochs"] == 1 and pubmed["repeated_tokens"] == 0
    assert 1 < reports["epochs"] <= 4 and reports["repeated_tokens"] > 0
    # The partial epoch is filled to the nearest document (about 700 tokens here).
    assert abs(reports["share"] - 0.4) < 0.01
    assert mix["train_tokens"] == manifest["splits"]["train"]["tokens"]
    assert manifest["splits"]["validation"]["tokens"] == pubmed["validation_tokens"] + reports["validation_tokens"]
    assert "Mix of sources" in (two_sources["run"] / "report.html").read_text()
    assert "## Sources" in (two_sources["run"] / "final/README.md").read_text()


def test_mix_epochs_and_impossible_mixes():
    from pipeline.engines.mixing import plan_epochs
    from pipeline.errors import UserError
    epochs = plan_epochs({"pubmed": 8_000, "notes": 500}, {"pubmed": {"weight": 0.8, "max_epochs": 1},
                                                           "notes": {"weight": 0.2, "max_epochs": 4}})
    assert epochs == {"pubmed": 1.0, "notes": pytest.approx(4.0)}
    with pytest.raises(UserError, match=r"mix.notes: weight 0.3 needs 6.86 epochs .* max_epochs 4 "
                                        r"\(at most weight 0.2 "):
        plan_epochs({"pubmed": 8_000, "notes": 500}, {"pubmed": {"weight": 0.7, "max_epochs": 1},
                                                      "notes": {"weight": 0.3, "max_epochs": 4}})


def test_window_shares_over_every_window_of_rows():
    from pipeline.engines.mixing import sliding_window_shares
    # Rows of 10 tokens: source 0, 1, 0, 0, then 1 (two documents of 5); windows of 2 rows.
    shares = sliding_window_shares(np.array([10, 10, 10, 10, 5, 5]), np.array([0, 1, 0, 0, 1, 1]), 2, 10, 2)
    assert shares.tolist() == [[0.5, 0.5], [0.5, 0.5], [1.0, 0.0], [0.5, 0.5]]
    # A document across a row boundary counts in both rows; the 3 tokens after the last row in none.
    shares = sliding_window_shares(np.array([15, 8]), np.array([0, 1]), 2, 10, 1)
    assert shares.tolist() == [[1.0, 0.0], [0.5, 0.5]]
    assert sliding_window_shares(np.array([15, 8]), np.array([0, 1]), 2, 10, 3).shape == (0, 2)


@pytest.mark.slow            # the two-source run: ~30 s of chain on a quiet machine, shared
def test_tokenizer_learns_from_a_sample_drawn_by_the_mix(two_sources):
    """The tokenizer's sample holds the sources by the mix's weights (in UTF-8 bytes): reports,
    22 documents against 60, are repeated in it about as pack repeats them."""
    run = two_sources["run"]
    stats = json.loads((run / "stages/06_tokenizer/stats.json").read_text())
    sample = stats["mix_sample"]
    assert sample["pubmed"]["epochs"] == 1 and sample["reports"]["epochs"] > 1
    assert abs(sample["reports"]["share"] - 0.4) < 0.03 and abs(sample["pubmed"]["share"] - 0.6) < 0.03
    assert sample["reports"]["bytes_after"] > sample["reports"]["bytes_before"]
    split = read_arrow_dir(run / "stages/05_split/data")
    train = sum(1 for v in split["split"].to_pylist() if v == "train")
    assert stats["trained_on_docs"] > train
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["tokenizer"]["mix_sample"] == sample


@pytest.mark.slow            # the two-source run: ~30 s of chain on a quiet machine, shared
def test_megatron_files_per_source_and_the_blend_that_reproduces_the_mix(two_sources):
    """With formats: [megatron], each source's own documents (unrepeated) in its own indexed
    dataset, in packing order, and the --data-path value weighting them by the mix."""
    from pipeline.stages.pack.writers import read_megatron
    run = two_sources["run"]
    manifest = json.loads((run / "manifest.json").read_text())
    megatron, mix = manifest["megatron"], manifest["mix"]
    assert megatron["data_path"] == ("0.6 final/megatron/pubmed/train_text_document "
                                     "0.4 final/megatron/reports/train_text_document")
    assert (run / "final/megatron/data_path.txt").read_text() == megatron["data_path"] + "\n"
    assert megatron["train_samples"] == manifest["splits"]["train"]["sequences"]
    mixture = read_megatron(run / "final/megatron/train_text_document")
    per_source = {}
    for source in ("pubmed", "reports"):
        for split in ("train", "validation"):
            meg = read_megatron(run / f"final/megatron/{source}/{split}_text_document")
            files = megatron["files"][source][split]
            assert len(meg["sequence_lengths"]) == files["documents"] and len(meg["tokens"]) == files["tokens"]
            per_source[source, split] = meg
        # Unrepeated: the source's train tokens before the mix; validation as it is.
        assert megatron["files"][source]["train"]["tokens"] == mix["sources"][source]["train_tokens_before"]
        assert megatron["files"][source]["validation"]["tokens"] == mix["sources"][source]["validation_tokens"]
    # Each source's train documents once, in packing order (by their shuffle keys, run seed 3),
    # and each of them among the mixture's documents.
    from tokenizers import Tokenizer

    from pipeline.stages.pack import shuffle_keys
    tok = Tokenizer.from_file(str(run / "tokenizer/tokenizer.json"))
    eos = tok.token_to_id("<|endoftext|>")
    split = read_arrow_dir(run / "stages/06_tokenizer/data")

    def docs(meg):
        ends = np.cumsum(np.asarray(meg["sequence_lengths"], np.int64))
        return [np.asarray(meg["tokens"][e - n:e]).tolist() for e, n in zip(ends, meg["sequence_lengths"])]
    mixed = {tuple(d) for d in docs(mixture)}
    for source in ("pubmed", "reports"):
        rows = [r for r in split.to_pylist() if r["source"] == source and r["split"] == "train"]
        order = np.argsort(shuffle_keys([r["id"] for r in rows], 3), kind="stable")
        expected = [tok.encode(rows[i]["text"], add_special_tokens=False).ids + [eos] for i in order]
        own = docs(per_source[source, "train"])
        assert own == expected and all(tuple(d) in mixed for d in own)
    assert len(mixture["sequence_lengths"]) > sum(len(per_source[s, "train"]["sequence_lengths"])
                                                  for s in ("pubmed", "reports"))


RAY_TWO_SOURCES = """
output_dir: {out}
seed: 5
num_proc: {num_proc}
batch_size: 10
shard_size: 12
progress: false
executor: {{kind: {kind}, num_cpus: 2}}
sources:
  pubmed:
    input: {{paths: [{raw}], limit: 30}}
    stages: [normalize]
  reports:
    input: {{paths: [{reports}]}}
    stages: [normalize]
stages:
  - dedup_exact: {{priority: [reports, pubmed]}}
  - tokenizer: {{vocab_size: 400, compare: []}}
  - pack: {{seq_len: 64, batch_size: 4, formats: [datasets, megatron]}}
mix: {{pubmed: {{weight: 0.55}}, reports: {{weight: 0.45, max_epochs: 4}}}}
"""


@pytest.mark.ray
def test_two_sources_give_the_same_bytes_under_local_and_ray(ray_instance, tmp_path):
    """A two-source run with a mix (repeated copies, per-source Megatron files) under the local
    executor (2 processes) and under the session's Ray instance: the same bytes in every file
    of the contract. Few stages: each starts its own Ray actors (seconds each under load)."""
    from test_executor import _files

    from pipeline.runner import run_chain
    docs = _abstracts(60)
    reports = [{"id": f"r-{d['id']}", "text": d["text"]} for d in docs[40:50]] + \
        [{"id": "r-copy", "text": docs[2]["text"]}]
    write_jsonl(tmp_path / "reports.jsonl", reports)
    runs = {}
    for kind, num_proc in (("local", 2), ("ray", 1)):
        config = write_config(tmp_path / f"{kind}.yaml", RAY_TWO_SOURCES.format(
            out=tmp_path / kind, raw=RAW, reports=tmp_path / "reports.jsonl", kind=kind, num_proc=num_proc))
        run_chain(load_config(config))
        runs[kind] = _files(tmp_path / kind)
    assert sorted(runs["local"]) == sorted(runs["ray"])
    assert [name for name in runs["local"] if runs["local"][name] != runs["ray"][name]] == []
    assert {"final/megatron/reports/train_text_document.bin", "final/megatron/data_path.txt",
            "stages/02_dedup_exact/removed/pubmed.00000.arrow"} <= set(runs["local"])
    manifest = json.loads((tmp_path / "ray/manifest.json").read_text())
    assert manifest["executor"]["kind"] == "ray" and manifest["mix"]["sources"]["reports"]["repeated_tokens"] > 0


@pytest.fixture(scope="module")
def medbot_run(tmp_path_factory):
    """configs/medbot.yaml's chains (abstracts with the literature profile; two PMC full texts;
    private clinical notes with the clinical one; the shared tail) on 150 records and 12 notes,
    every source free to repeat (the sizes are not MedBot's)."""
    import yaml
    tmp = tmp_path_factory.mktemp("medbot")
    raw = yaml.safe_load((ROOT / "configs/medbot.yaml").read_text())
    raw["output_dir"] = str(tmp / "run")
    raw["progress"] = False
    raw["sources"]["pubmed"]["input"] = {"paths": [str(RAW)], "limit": 150}
    raw["sources"]["notes"]["input"] = {"paths": [str(ROOT / "data/deid-dev/notes.jsonl")], "limit": 12}
    raw["sources"]["fulltexts"]["input"] = {"paths": [str(ROOT / "data/raw/pmc")], "limit": 2}
    for entry in raw["mix"].values():
        entry["max_epochs"] = 100
    for entry in raw["stages"]:
        (name, options), = entry.items()
        if name == "tokenizer":
            options.update(vocab_size=600, compare=[])
        elif name == "pack":
            options.update(seq_len=128, batch_size=4, formats=["datasets"])
        elif name == "decontaminate":
            for bench in options["benchmarks"]:
                bench["path"] = str(ROOT / bench["path"])
    # Short notes leave at heuristics: documents removed in the private chain, before its phi.
    raw["sources"]["notes"]["stages"][1]["heuristics"]["min_words"] = 150
    raw["sources"]["pubmed"]["stages"][3]["perplexity"]["model_path"] = str(ROOT / "data/models/pubmed_lm.binary")
    config = tmp / "medbot.yaml"
    config.write_text(yaml.safe_dump(raw, sort_keys=False))
    code, _, err = run_in_process("run", "--config", config)
    assert code == 0, err
    return tmp / "run"


@pytest.mark.slow            # the medbot-shaped run: ~30 s of chain, shared by the tests below
def test_inspect_names_a_multi_source_runs_stages_by_source(medbot_run):
    from pipeline.errors import UserError
    from pipeline.inspect import removed_documents, summary
    manifest = json.loads((medbot_run / "manifest.json").read_text())
    data = summary(medbot_run)
    # Both sources' documents are read (not the first chain's alone).
    assert data["docs_read"] == manifest["docs_read"] == sum(f["docs_read"] for f in manifest["sources"].values())
    labels = [s["stage"] for s in data["stages"]]
    assert labels[:2] == ["pubmed.normalize", "pubmed.metadata"] and "notes.heuristics" in labels
    assert data["docs_kept"] == manifest["stages"][-1]["docs_out"]
    # A source's stage by SOURCE.STAGE, by its name alone, and its folder.
    by_label = removed_documents(medbot_run, "pubmed.normalize", limit=3)
    assert by_label["matching"] == manifest["sources"]["pubmed"]["stages"][0]["removed"]["no_abstract"] > 0
    assert {d["stage"] for d in by_label["documents"]} == {"pubmed.normalize"}
    assert removed_documents(medbot_run, "langid")["matching"] == sum(
        sum(manifest["sources"][src]["stages"][2]["removed"].values()) for src in ("pubmed", "fulltexts"))
    assert removed_documents(medbot_run, "01_pubmed.normalize", limit=1)["matching"] == by_label["matching"]
    # The notes' chain up to its clinical phi is private; the abstracts' (literature) is not.
    with pytest.raises(UserError, match="notes.heuristics' runs at or before its chain's clinical de-identification"):
        removed_documents(medbot_run, "notes.heuristics")
    with pytest.raises(UserError, match="no stage 'web.langid'.*pubmed.langid"):
        removed_documents(medbot_run, "web.langid")
    both = removed_documents(medbot_run, "heuristics", limit=50)
    assert {d["stage"] for d in both["documents"]} <= {"pubmed.heuristics", "fulltexts.heuristics"}
    assert manifest["sources"]["notes"]["stages"][1]["removed"]["too_few_words"] > 0
    assert any("notes.heuristics" in n for n in both["notes"])
    everything = removed_documents(medbot_run, limit=500)
    assert not any(d["stage"].startswith("notes.") for d in everything["documents"])
    assert everything["shown"] == sum(sum(s["removed"].values()) for s in manifest["stages"]
                                      if s.get("source") != "notes")


@pytest.mark.slow
def test_report_and_card_read_the_same_record_of_a_multi_source_run(medbot_run):
    from pipeline.finished_run import FinishedRun
    run = FinishedRun(medbot_run)
    assert [s.label for s in run.stages][:3] == ["pubmed.normalize", "pubmed.metadata", "pubmed.langid"]
    assert [[s.label for s in chain][-1] for chain in run.chains()] == ["pubmed.phi", "fulltexts.phi", "notes.phi",
                                                                       "pack"]
    tail = next(s for s in run.stages if s.label == "dedup_exact")
    assert [p.label for p in run.previous(tail)] == ["pubmed.phi", "fulltexts.phi", "notes.phi"]
    assert run.stages[0].options == {} and run.stages[2].options == {"keep": ["en"], "min_score": 0.65}
    report = (medbot_run / "report.html").read_text()
    card = (medbot_run / "final/README.md").read_text()
    for s in run.stages:
        assert s.label in report
        assert f"{s.position:02d} {s.label} | {s.stats['docs_in']:,} |" in card
    # Every stage of the notes' chain up to phi is listed without a command; the others with one.
    assert "inspect " + str(run.dir) + " --stage notes.heuristics" not in report
    assert "--stage pubmed.normalize --reason no_abstract" in report
    assert f"{run.docs_read:,} input documents" in card
