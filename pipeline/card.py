"""final/README.md: a Hugging Face dataset card (YAML header, then markdown) written at the end
of every run from the manifest, the stages' stats and the files the run published.

It says what is in final/ and how it was made: the funnel with every removal reason, how PHI
was handled (counts by type, never a value or an id), deduplication, the vocabulary and how it
compares, rows, tokens and steps, how to load the rows and which `datasets` versions can, how
documents sit in the rows, and the command and config that made it. Nothing in it varies
between two runs of the same config and input (no timings, no paths of temporary folders), so
a rerun writes the same bytes. The stages' own sections (PHI, deduplication, the vocabulary) and
header fields (the language filter's languages) are what each stage declares (`card_section`,
`card_metadata`): nothing here names a stage.
"""
from __future__ import annotations

import json

import yaml

from pipeline.finished_run import FinishedRun
from pipeline.runpath import RunPath

CARD_FILE = "README.md"
# The Hub's size categories, by number of rows.
SIZE_CATEGORIES = [(1_000, "n<1K"), (10_000, "1K<n<10K"), (100_000, "10K<n<100K"), (1_000_000, "100K<n<1M"),
                   (10_000_000, "1M<n<10M"), (100_000_000, "10M<n<100M"), (1_000_000_000, "100M<n<1B"),
                   (10_000_000_000, "1B<n<10B"), (100_000_000_000, "10B<n<100B"), (1_000_000_000_000, "100B<n<1T")]
# The `datasets` release that introduced the `List` feature type (and deprecated `Sequence`).
LIST_FEATURE_SINCE = "4.0.0"


def size_category(rows: int) -> str:
    return next((name for limit, name in SIZE_CATEGORIES if rows < limit), "n>1T")


PRIVACY_HEADING = "Protected health information"


def card_metadata(manifest: dict, config, stages: list) -> dict:
    """The YAML header: license, languages, size, task, sources (the config's `card:` section,
    else defaults from the input and what the stages declare: the language filter's languages)."""
    card = config.run.card
    rows = sum(v.get("sequences", 0) for v in (manifest.get("splits") or {}).values())
    declared: dict = {}
    for stage in stages:
        for key, value in stage.card_metadata().items():
            declared.setdefault(key, value)
    languages = card.languages
    if languages is None:
        languages = declared.get("language")          # without a declaration no language is claimed
    sources = card.source_datasets
    if sources is None:
        sources = [str(p).rstrip("/").rsplit("/", 1)[-1] for inp in config.inputs.values() for p in inp.paths]
    # By default the title names what went in (its files' names), not the run folder.
    stems = list(dict.fromkeys(str(name).partition(".")[0] for name in sources)) or [config.output_dir.name]
    pretty = card.pretty_name or f"{', '.join(stems[:3])}{', ...' if len(stems) > 3 else ''}: a medprep corpus"
    meta = {"pretty_name": pretty, "license": card.license}
    if languages:
        meta["language"] = list(languages)
    meta.update({"size_categories": [size_category(rows)], "task_categories": ["text-generation"],
                 "task_ids": ["language-modeling"], "source_datasets": sources, "tags": ["medprep", "pretraining"]})
    return meta


def markdown_table(header: list[str], rows: list[list], align: str = "") -> str:
    """A markdown table (for the stages' card sections too); `align` per column: l (text) or r
    (numbers, the default after the first)."""
    align = align or "l" + "r" * (len(header) - 1)
    out = ["| " + " | ".join(header) + " |", "|" + "|".join("---" if a == "l" else "---:" for a in align) + "|"]
    out += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(out)


def number(value) -> str:
    """An int with thousands separators; anything else as it is."""
    return f"{value:,}" if isinstance(value, int) else str(value)


def read_json_file(path: RunPath):
    return json.loads(path.read_text()) if path.is_file() else None


def stage_sections(run: FinishedRun) -> dict[str, str]:
    """The stages' card sections by heading, in chain order; parts under one heading joined."""
    sections: dict[str, list[str]] = {}
    for s in run.stages:
        part = s.stage.card_section(s.stats, run) if s.stage is not None else None
        if part:
            sections.setdefault(part[0], []).append(part[1])
    return {heading: "\n\n".join(parts) for heading, parts in sections.items()}


def card_text(config, run: FinishedRun) -> str:
    """The card of a finished run; `config`: the run's (its card: section, inputs, output)."""
    run_dir, manifest, stats = run.dir, run.manifest, run.stats
    meta = card_metadata(manifest, config, [s.stage for s in run.stages if s.stage is not None])
    versions = manifest.get("versions") or {}
    splits = manifest.get("splits") or {}
    parts = ["---\n" + yaml.safe_dump(meta, sort_keys=False, allow_unicode=True) + "---", f"# {meta['pretty_name']}"]
    kept = stats[-1]["docs_out"] if stats else 0
    if splits:
        row_len = manifest.get("row_len", manifest.get("seq_len"))
        parts.append(
            f"Token ids for language-model pretraining, made by medprep {versions.get('medprep')} from "
            f"{number(manifest.get('docs_read', 0))} input documents, of which {number(kept)} passed every stage: "
            f"{number(manifest.get('tokens', 0))} tokens in {number(manifest.get('sequences', 0))} rows of "
            f"{number(row_len)} int32 ids."
        )
        parts.append(_contents(manifest, row_len))
        parts.append(_loading(run_dir, manifest))
        parts.append(_rows_and_documents(manifest))
        parts.append(_datasets_versions(run_dir, versions))
    else:
        parts.append(
            f"Documents prepared by medprep {versions.get('medprep')}: {number(manifest.get('docs_read', 0))} "
            f"read, {number(kept)} passed every stage. The chain writes no packed rows, so final/ holds only "
            "this card; the documents are in the last stage's `data/` of the run folder."
        )
    parts.append(_funnel(manifest, stats))
    sections = stage_sections(run)
    if PRIVACY_HEADING not in sections:
        sections = {
            PRIVACY_HEADING: "No de-identification stage ran: the texts are as the input gave them, after "
            "the chain's removals.",
            **sections,
        }
    parts += [f"## {heading}\n\n{text}" for heading, text in sections.items()]
    parts.append(_sources(manifest))
    parts.append(_provenance(manifest))
    return "\n\n".join(p for p in parts if p) + "\n"


def _contents(manifest: dict, row_len: int) -> str:
    rows = [
        [name, number(s["documents"]), number(s["tokens"]), number(s["sequences"]), number(s["leftover_tokens"])]
        for name, s in manifest["splits"].items()
    ]
    seq_len = manifest.get("seq_len")
    shape = (
        f"Each row is {number(row_len)} ids: `seq_len` {number(seq_len)} plus one, so a trainer takes `row[:-1]` as "
        "the input and `row[1:]` as the labels (rows are cut one after another: the first id of a row is "
        "never a label)."
        if row_len != seq_len
        else f"Each row is {number(row_len)} ids (`seq_len`); a causal LM trainer takes labels = input ids and shifts "
        "them inside the row."
    )
    return (
        "## Contents\n\n"
        + markdown_table(["folder", "documents", "tokens", "rows", "leftover tokens"], rows)
        + "\n\n"
        + shape
        + " Tokens after the last full row of a folder are counted as leftover, not packed. "
        f"{number(manifest.get('steps_per_epoch'))} optimizer steps per epoch at batch size "
        f"{number(manifest.get('batch_size'))} rows (`ceil(train rows / batch size)`)."
    )


def _sources(manifest: dict) -> str:
    """A multi-source run: documents per source, and the mix's token shares of the train rows."""
    sources = manifest.get("sources")
    if not sources:
        return ""
    out = [
        "## Sources",
        "",
        markdown_table(
            ["source", "documents read", "documents kept"],
            [[n, number(f["docs_read"]), number(f["docs_out"])] for n, f in sources.items()],
        ),
    ]
    mix = manifest.get("mix")
    if mix:
        out += [
            "",
            "Train tokens mixed by weight (repeated sources' documents appear that many epochs; validation "
            "holds each source's documents once):",
            "",
            markdown_table(
                [
                    "source",
                    "weight",
                    "share",
                    "epochs",
                    "train tokens before",
                    "after",
                    f"share per {number(mix['windows']['sequences_per_window'])} rows (min-max)",
                ],
                [
                    [
                        n,
                        f"{m['weight']:.3f}",
                        f"{m['share']:.3f}",
                        f"{m['epochs']:.2f}",
                        number(m["train_tokens_before"]),
                        number(m["train_tokens_after"]),
                        f"{mix['windows']['min_share'].get(n, 0):.3f}-{mix['windows']['max_share'].get(n, 0):.3f}",
                    ]
                    for n, m in mix["sources"].items()
                ],
            ),
        ]
        for n, m in mix["sources"].items():
            rb = m.get("repeat_by")
            if rb:
                out += ["", f"{n}'s train documents repeated by their metadata (each {m['epochs']:.2f} x its "
                        "factor times: 1 plus the adds of the rules it matches; "
                        + "; ".join(f"{r['rule']}: +{r['add']:g}, {number(r['documents'])} documents"
                                    for r in rb["rules"]) + "):", "",
                        markdown_table(["factor", "documents", "train tokens before", "after", "times"],
                                       [[f"{f['factor']:g}", number(f["documents"]), number(f["tokens_before"]),
                                         number(f["tokens_after"]), f"{f['times']:.2f}"] for f in rb["factors"]])]
    return "\n".join(out)


def _loading(run_dir: RunPath, manifest: dict) -> str:
    out = [
        "## Loading",
        "",
        "```python",
        "from datasets import load_from_disk",
        'train = load_from_disk("final/train")          # column input_ids',
        'validation = load_from_disk("final/validation")',
        "```",
    ]
    final = run_dir / "final"
    if (final / "megatron").is_dir():
        out += [
            "",
            "Megatron-LM indexed datasets (every token, one document per sequence, ending in EOS): the "
            "prefixes `final/megatron/train_text_document` and `final/megatron/validation_text_document` "
            "(`--train-data-path` / `--valid-data-path`, or a `blend` of megatron-core's `GPTDatasetConfig`).",
        ]
        megatron = manifest.get("megatron")
        if megatron:
            out += [
                "",
                "Per source, unrepeated (`final/megatron/SOURCE/<train|validation>_text_document`), for Megatron's own "
                "blending by the mix's weights (paths relative to the run folder; the mixture above is "
                f"{number(megatron['train_samples'])} train rows):",
                "",
                "```",
                f"--data-path {megatron['data_path']}",
                "```",
            ]
    flat = read_json_file(final / "flat" / "meta.json")
    if flat:
        out += [
            "",
            f"Flat token files: `final/flat/<train|validation>.bin` ({flat['dtype']}, every token, "
            "`np.memmap(path, dtype=...)`), document starts in `<train|validation>.doc_offsets.npy`, `meta.json`.",
        ]
    return "\n".join(out)


def _rows_and_documents(manifest: dict) -> str:
    eos, eos_id = manifest.get("eos_token"), manifest.get("eos_id")
    return "\n".join(
        [
            "## Documents cross row boundaries",
            "",
            f"Documents are shuffled (a keyed hash of their id, seeded), each is followed by EOS (`{eos}`, id "
            f"{eos_id}), and the stream is cut into rows: a row usually ends inside a document and holds the end of "
            "one and the start of others. There is no padding. Attention runs across documents unless the trainer "
            "masks it; to keep each position within its document:",
            "",
            "```python",
            "import numpy as np",
            f"EOS = {eos_id}",
            'ids = np.asarray(train[0]["input_ids"])',
            "doc = np.concatenate([[0], np.cumsum(ids[:-1] == EOS)])        # an EOS ends the document it closes",
            "allowed = (doc[:, None] == doc[None, :]) & np.tri(len(ids), dtype=bool)   # causal, within a document",
            "starts = np.flatnonzero(np.r_[True, doc[1:] != doc[:-1]])",
            "position_ids = np.arange(len(ids)) - starts[doc]                # restart at each document",
            "```",
            "",
            "The labels need no change: each EOS stays a target, so the model learns where documents end. (A pad "
            "token equal to EOS would make `DataCollatorForLanguageModeling` mask every EOS label; "
            "`tokenizer_config.json` "
            "names a pad token of its own where the config gives one.)",
        ]
    )


def _datasets_versions(run_dir: RunPath, versions: dict) -> str:
    info = read_json_file(run_dir / "final" / "train" / "dataset_info.json") or {}
    features = info.get("features")
    text = json.dumps(features, sort_keys=True) if features is not None else "(no dataset_info.json)"
    out = [
        "## Which `datasets` versions read it",
        "",
        f"Written by datasets {versions.get('datasets')} (`save_to_disk` layout: Arrow stream files, "
        "`state.json`, `dataset_info.json`). The features, as `dataset_info.json` and each Arrow file's schema "
        "metadata state them:",
        "",
        "```json",
        text,
        "```",
        "",
    ]
    if '"List"' in text:
        out.append(
            f"`_type: List` is the feature type datasets {LIST_FEATURE_SINCE} introduced: datasets "
            f"{LIST_FEATURE_SINCE} and later read these folders with `load_from_disk`; datasets 3.x cannot "
            "(3.6.0: `ValueError: Feature type 'List' not found`). With 3.x, read the Arrow files "
            "themselves, e.g. `pyarrow.ipc.open_stream(open(path, 'rb')).read_all()` (column `input_ids`, "
            "fixed-size lists of int32)."
        )
    else:
        out.append("Any datasets release that knows these feature types reads the folders with `load_from_disk`.")
    return "\n".join(out)


def _funnel(manifest: dict, stats: list[dict]) -> str:
    rows = [
        [
            f"{s['position']:02d} {s['source'] + '.' if s.get('source') else ''}{s['stage']}",
            number(s["docs_in"]),
            number(s["docs_out"]),
            number(sum(s["removed"].values())),
            ", ".join(f"`{r}` {number(n)}" for r, n in sorted(s["removed"].items(), key=lambda kv: (-kv[1], kv[0])))
            or "-",
        ]
        for s in stats
    ]
    dup = manifest.get("duplicate_ids") or {}
    note = (
        f"\n\nInput documents reusing the id of an earlier one: {number(dup['documents'])}."
        if dup.get("documents")
        else ""
    )
    return (
        "## How the documents were chosen\n\nEvery document that left the corpus left under a reason "
        "(`in = out + removed` for every stage):\n\n"
        + markdown_table(["stage", "in", "out", "removed", "by reason"], rows, "lrrrl")
        + "\n\nIn the run folder, `python -m pipeline inspect RUN --summary` prints this funnel and "
        "`python -m pipeline inspect RUN --stage STAGE --reason REASON` lists the documents removed for a "
        "reason, with the stage's scores." + note
    )


def portable_paths(config: dict, config_file: str | None) -> tuple[dict, str | None]:
    """The config and its file as the card shows them: paths as the config would write them
    (relative to the config's folder; a shipped config's, to the repository), never this
    machine's absolute folders. A path outside that folder stays as it was given."""
    import os
    from pathlib import Path

    from pipeline.resources import is_shipped_config, resource_root
    if not config_file:
        return config, config_file
    path = Path(config_file).absolute()
    shipped = path.exists() and is_shipped_config(path)
    base = resource_root() if shipped else path.parent

    def portable(value):
        if isinstance(value, dict):
            return {k: portable(v) for k, v in value.items()}
        if isinstance(value, list):
            return [portable(v) for v in value]
        if isinstance(value, str) and os.path.isabs(value):
            relative = os.path.relpath(value, base)
            return value if relative.startswith("..") else relative
        return value
    return portable(config), os.path.relpath(path, base) if shipped else path.name


def _provenance(manifest: dict) -> str:
    versions = manifest.get("versions") or {}
    config, config_file = portable_paths(manifest.get("config") or {}, manifest.get("config_file"))
    return "\n".join(
        [
            "## How it was made",
            "",
            f"`python -m pipeline run --config {config_file}` (medprep {versions.get('medprep')}; "
            + ", ".join(f"{k} {v}" for k, v in sorted(versions.items()) if k != "medprep")
            + "), with this config "
            "(after command-line overrides):",
            "",
            "```yaml",
            yaml.safe_dump(config, sort_keys=False, allow_unicode=True).rstrip(),
            "```",
        ]
    )


def write_card(config, run: FinishedRun) -> RunPath:
    """final/README.md of a finished run."""
    out = config.output_dir / "final" / CARD_FILE
    out.write_text(card_text(config, run))
    return out
