"""final/README.md: a Hugging Face dataset card (YAML header, then markdown) written at the end
of every run from the manifest, the stages' stats and the files the run published.

It says what is in final/ and how it was made: the funnel with every removal reason, how PHI
was handled (counts by type, never a value or an id), deduplication, the tokenizer and how it
compares, rows, tokens and steps, how to load the rows and which `datasets` versions can, how
documents sit in the rows, and the command and config that made it. Nothing in it varies
between two runs of the same config and input (no timings, no paths of temporary folders), so
a rerun writes the same bytes. Sections are found by the keys of the stats, not by stage names.
"""
from __future__ import annotations

import json

import yaml

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


def _stage_option(config, key: str):
    """The first value of stage option `key` in the chain (validated options, defaults included)."""
    for spec in config.stages:
        options = spec.config.model_dump()
        if key in options:
            return options[key]
    return None


def card_metadata(manifest: dict, config) -> dict:
    """The YAML header: license, languages, size, task, sources (the config's `card:` section,
    else defaults from the input and the language filter)."""
    card = config.run.card
    rows = sum(v.get("sequences", 0) for v in (manifest.get("splits") or {}).values())
    languages = card.languages
    if languages is None:
        # The language filter's `keep` list; without one, no language is claimed.
        keep = _stage_option(config, "keep")
        languages = keep if isinstance(keep, list) else None
    sources = card.source_datasets
    if sources is None:
        sources = [str(p).rstrip("/").rsplit("/", 1)[-1] for inp in config.inputs.values() for p in inp.paths]
    pretty = card.pretty_name or f"medprep: {config.output_dir.name}"
    meta = {"pretty_name": pretty, "license": card.license}
    if languages:
        meta["language"] = list(languages)
    meta.update({"size_categories": [size_category(rows)], "task_categories": ["text-generation"],
                 "task_ids": ["language-modeling"], "source_datasets": sources, "tags": ["medprep", "pretraining"]})
    return meta


def _table(header: list[str], rows: list[list], align: str = "") -> str:
    """A markdown table; `align` per column: l (text) or r (numbers, the default after the first)."""
    align = align or "l" + "r" * (len(header) - 1)
    out = ["| " + " | ".join(header) + " |", "|" + "|".join("---" if a == "l" else "---:" for a in align) + "|"]
    out += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(out)


def _n(value) -> str:
    return f"{value:,}" if isinstance(value, int) else str(value)


def _read_json(path: RunPath):
    return json.loads(path.read_text()) if path.is_file() else None


def card_text(config, manifest: dict) -> str:
    run_dir = config.output_dir
    stats = manifest.get("stages") or []
    meta = card_metadata(manifest, config)
    versions = manifest.get("versions") or {}
    splits = manifest.get("splits") or {}
    parts = ["---\n" + yaml.safe_dump(meta, sort_keys=False, allow_unicode=True) + "---", f"# {meta['pretty_name']}"]
    kept = stats[-1]["docs_out"] if stats else 0
    if splits:
        row_len = manifest.get("row_len", manifest.get("seq_len"))
        parts.append(f"Token ids for language-model pretraining, made by medprep {versions.get('medprep')} from "
                     f"{_n(manifest.get('docs_read', 0))} input documents, of which {_n(kept)} passed every stage: "
                     f"{_n(manifest.get('tokens', 0))} tokens in {_n(manifest.get('sequences', 0))} rows of "
                     f"{_n(row_len)} int32 ids.")
        parts.append(_contents(manifest, row_len))
        parts.append(_loading(run_dir, manifest))
        parts.append(_rows_and_documents(run_dir, config, row_len))
        parts.append(_datasets_versions(run_dir, versions))
    else:
        parts.append(f"Documents prepared by medprep {versions.get('medprep')}: {_n(manifest.get('docs_read', 0))} "
                     f"read, {_n(kept)} passed every stage. The chain has no pack stage, so final/ holds only this "
                     "card; the documents are in the last stage's `data/` of the run folder.")
    if manifest.get("tokenizer"):
        parts.append(_tokenizer(run_dir, manifest))
    parts.append(_funnel(manifest, stats))
    parts.append(_phi(manifest, stats))
    parts.append(_sources(manifest))
    dedup = _dedup(manifest, stats)
    if dedup:
        parts.append(dedup)
    parts.append(_provenance(manifest))
    return "\n\n".join(p for p in parts if p) + "\n"


def _contents(manifest: dict, row_len: int) -> str:
    rows = [[name, _n(s["documents"]), _n(s["tokens"]), _n(s["sequences"]), _n(s["leftover_tokens"])]
            for name, s in manifest["splits"].items()]
    seq_len = manifest.get("seq_len")
    shape = (f"Each row is {_n(row_len)} ids: `seq_len` {_n(seq_len)} plus one, so a trainer takes `row[:-1]` as "
             "the input and `row[1:]` as the labels (rows are cut one after another: the first id of a row is "
             "never a label)." if row_len != seq_len else
             f"Each row is {_n(row_len)} ids (`seq_len`); a causal LM trainer takes labels = input ids and shifts "
             "them inside the row.")
    return ("## Contents\n\n" + _table(["split", "documents", "tokens", "rows", "leftover tokens"], rows) + "\n\n"
            + shape + " Tokens after the last full row of a split are counted as leftover, not packed. "
            f"{_n(manifest.get('steps_per_epoch'))} optimizer steps per epoch at batch size "
            f"{_n(manifest.get('batch_size'))} rows (`ceil(train rows / batch size)`).")


def _sources(manifest: dict) -> str:
    """A multi-source run: documents per source, and the mix's token shares of the train split."""
    sources = manifest.get("sources")
    if not sources:
        return ""
    out = ["## Sources", "", _table(["source", "documents read", "documents kept"],
                                    [[n, _n(f["docs_read"]), _n(f["docs_out"])] for n, f in sources.items()])]
    mix = manifest.get("mix")
    if mix:
        out += ["", "Train tokens mixed by weight (repeated sources' documents appear that many epochs; validation "
                "holds each source's documents once):", "",
                _table(["source", "weight", "share", "epochs", "train tokens before", "after",
                        f"share per {_n(mix['windows']['sequences_per_window'])} rows (min-max)"],
                       [[n, f"{m['weight']:.3f}", f"{m['share']:.3f}", f"{m['epochs']:.2f}",
                         _n(m["train_tokens_before"]), _n(m["train_tokens_after"]),
                         f"{mix['windows']['min_share'].get(n, 0):.3f}-{mix['windows']['max_share'].get(n, 0):.3f}"]
                        for n, m in mix["sources"].items()])]
    return "\n".join(out)


def _loading(run_dir: RunPath, manifest: dict) -> str:
    out = ["## Loading", "",
           "```python",
           "from datasets import load_from_disk",
           'train = load_from_disk("final/train")          # column input_ids',
           'validation = load_from_disk("final/validation")',
           "```"]
    if (run_dir / "tokenizer" / "tokenizer_config.json").is_file():
        out += ["", "The tokenizer that made the ids is the run folder's `tokenizer/` (copy it with final/):",
                "", "```python", "from transformers import AutoTokenizer",
                'tokenizer = AutoTokenizer.from_pretrained("tokenizer")   # tokenizer.json + tokenizer_config.json',
                "```"]
    final = run_dir / "final"
    if (final / "megatron").is_dir():
        out += ["", "Megatron-LM indexed datasets (every token, one document per sequence, ending in EOS): the "
                "prefixes `final/megatron/train_text_document` and `final/megatron/validation_text_document` "
                "(`--train-data-path` / `--valid-data-path`, or a `blend` of megatron-core's `GPTDatasetConfig`)."]
        megatron = manifest.get("megatron")
        if megatron:
            out += ["", "Per source, unrepeated (`final/megatron/SOURCE/<split>_text_document`), for Megatron's own "
                    "blending by the mix's weights (paths relative to the run folder; the mixture above is "
                    f"{_n(megatron['train_samples'])} train rows):", "", "```",
                    f"--data-path {megatron['data_path']}", "```"]
    flat = _read_json(final / "flat" / "meta.json")
    if flat:
        out += ["", f"Flat token files: `final/flat/<split>.bin` ({flat['dtype']}, every token, "
                "`np.memmap(path, dtype=...)`), document starts in `<split>.doc_offsets.npy`, `meta.json`."]
    return "\n".join(out)


def _eos(run_dir: RunPath, config) -> tuple[str | None, int | None]:
    tok_dir = run_dir / "tokenizer"
    tcfg = _read_json(tok_dir / "tokenizer_config.json") or {}
    eos = tcfg.get("eos_token") or _stage_option(config, "eos_token")
    # A special token's id is in tokenizer_config.json; another token's, in the tokenizer.
    eos_id = next((int(i) for i, t in (tcfg.get("added_tokens_decoder") or {}).items()
                   if isinstance(t, dict) and t.get("content") == eos), None)
    if eos_id is None and (tok_dir / "tokenizer.json").is_file():
        from pipeline.stages.tokenizer import tokenizer_from_json
        eos_id = tokenizer_from_json((tok_dir / "tokenizer.json").read_text()).token_to_id(eos)
    return eos, eos_id


def _rows_and_documents(run_dir: RunPath, config, row_len: int) -> str:
    eos, eos_id = _eos(run_dir, config)
    return "\n".join([
        "## Documents cross row boundaries", "",
        f"Documents are shuffled (a keyed hash of their id, seeded), each is followed by EOS (`{eos}`, id "
        f"{eos_id}), and the stream is cut into rows: a row usually ends inside a document and holds the end of "
        "one and the start of others. There is no padding. Attention runs across documents unless the trainer "
        "masks it; to keep each position within its document:", "",
        "```python", "import numpy as np", f"EOS = {eos_id}",
        'ids = np.asarray(train[0]["input_ids"])',
        "doc = np.concatenate([[0], np.cumsum(ids[:-1] == EOS)])        # an EOS ends the document it closes",
        "allowed = (doc[:, None] == doc[None, :]) & np.tri(len(ids), dtype=bool)   # causal, within a document",
        "starts = np.flatnonzero(np.r_[True, doc[1:] != doc[:-1]])",
        "position_ids = np.arange(len(ids)) - starts[doc]                # restart at each document",
        "```", "",
        "The labels need no change: each EOS stays a target, so the model learns where documents end. (A pad "
        "token equal to EOS would make `DataCollatorForLanguageModeling` mask every EOS label; the tokenizer "
        "has a pad token of its own where the config gives one.)"])


def _datasets_versions(run_dir: RunPath, versions: dict) -> str:
    info = _read_json(run_dir / "final" / "train" / "dataset_info.json") or {}
    features = info.get("features")
    text = json.dumps(features, sort_keys=True) if features is not None else "(no dataset_info.json)"
    out = ["## Which `datasets` versions read it", "",
           f"Written by datasets {versions.get('datasets')} (`save_to_disk` layout: Arrow stream files, "
           "`state.json`, `dataset_info.json`). The features, as `dataset_info.json` and each Arrow file's schema "
           "metadata state them:", "", "```json", text, "```", ""]
    if '"List"' in text:
        out.append(f"`_type: List` is the feature type datasets {LIST_FEATURE_SINCE} introduced: datasets "
                   f"{LIST_FEATURE_SINCE} and later read these folders with `load_from_disk`; datasets 3.x cannot "
                   "(3.6.0: `ValueError: Feature type 'List' not found`). With 3.x, read the Arrow files "
                   "themselves, e.g. `pyarrow.ipc.open_stream(open(path, 'rb')).read_all()` (column `input_ids`, "
                   "fixed-size lists of int32).")
    else:
        out.append("Any datasets release that knows these feature types reads the folders with `load_from_disk`.")
    return "\n".join(out)


def _tokenizer(run_dir: RunPath, manifest: dict) -> str:
    tok = manifest["tokenizer"]
    tcfg = _read_json(run_dir / "tokenizer" / "tokenizer_config.json") or {}
    out = ["## Tokenizer", "",
           f"Mode `{tok.get('mode')}`, {_n(tok.get('vocab_size'))} ids"
           + (f" ({_n(tok['vocab_size_requested'])} requested)" if tok.get("vocab_size_requested") else "") + "."]
    special = [f"{k.replace('_token', '')} `{tcfg[k]}`" for k in ("eos_token", "bos_token", "unk_token", "pad_token")
               if tcfg.get(k)]
    if special:
        out[-1] += " Special tokens: " + ", ".join(special) + "."
    if tok.get("phi_placeholders"):
        out[-1] += (" PHI placeholders, one special token each: "
                    + ", ".join(f"`{p}`" for p in tok["phi_placeholders"]) + ".")
    if tcfg.get("model_max_length"):
        out[-1] += f" `model_max_length` {_n(tcfg['model_max_length'])}."
    comp = tok.get("comparison")
    corpus = tok.get("comparison_corpus") or {}
    if comp:
        general = ("gpt2", "cl100k", "o200k")
        names = [n for n in comp if n not in general] + [n for n in general if n in comp]     # the run's first
        rows = [[name, _n(c["vocab_size"]), f"{c['tokens_per_word']:.3f}", f"{c['chars_per_token']:.2f}",
                 "-" if c.get("domain_terms_one_token") is None else f"{c['domain_terms_one_token']:.1%}",
                 f"{c['docs_per_sequence']:.2f}"] for name, c in ((n, comp[n]) for n in names)]
        out += ["", f"Compared on the {_n(corpus.get('documents'))} validation documents (never training text):", "",
                _table(["tokenizer", "vocabulary", "tokens per word", "characters per token",
                        "domain terms in one token", f"documents per {_n(corpus.get('seq_len'))} tokens"], rows)]
    return "\n".join(out)


def _funnel(manifest: dict, stats: list[dict]) -> str:
    rows = [[f"{s['position']:02d} {s['source'] + '.' if s.get('source') else ''}{s['stage']}", _n(s["docs_in"]), _n(s["docs_out"]),
             _n(sum(s["removed"].values())),
             ", ".join(f"`{r}` {_n(n)}" for r, n in sorted(s["removed"].items(), key=lambda kv: (-kv[1], kv[0])))
             or "-"] for s in stats]
    dup = manifest.get("duplicate_ids") or {}
    note = (f"\n\nInput documents reusing the id of an earlier one: {_n(dup['documents'])}." if dup.get("documents")
            else "")
    return ("## How the documents were chosen\n\nEvery document that left the corpus left under a reason "
            "(`in = out + removed` for every stage):\n\n"
            + _table(["stage", "in", "out", "removed", "by reason"], rows, "lrrrl")
            + "\n\nIn the run folder, `python -m pipeline inspect RUN --summary` prints this funnel and "
            "`python -m pipeline inspect RUN --stage STAGE --reason REASON` lists the documents removed for a "
            "reason, with the stage's scores." + note)


def _phi(manifest: dict, stats: list[dict]) -> str:
    stages = [s for s in stats if "entities" in s]
    if not stages:
        return ("## Protected health information\n\nNo de-identification stage ran: the texts are as the input "
                "gave them, after the filters.")
    # A multi-source run: each source's phi stage, with that source's privacy record.
    parts = [_phi_stage(phi, (manifest.get("sources") or {}).get(phi["source"], {}).get("privacy") or {}
                        if phi.get("source") else manifest.get("privacy") or {}) for phi in stages]
    header = "## Protected health information\n\n"
    return "\n\n".join([parts[0]] + [p[len(header):] if p.startswith(header) else p for p in parts[1:]])


def _phi_stage(phi: dict, privacy: dict) -> str:
    mode = phi.get("mode")
    how = ("each identifier found is replaced by a typed placeholder (`<|NAME|>`, `<|DATE|>`, ...)"
           if mode == "placeholder" else "each identifier found is replaced by a consistent surrogate (a fake "
           "value keyed by a secret key)")
    ids = {"pseudonymize": "document ids are keyed pseudonyms", "keep": "document ids are kept as the input gave "
           "them"}.get(phi.get("id_mode"), f"ids: {phi.get('id_mode')}")
    meta = {"drop": "other input fields are dropped", "redact": "other input fields are redacted",
            "keep": "other input fields are kept"}.get(phi.get("meta_fields"), "")
    raw = ""
    if privacy:
        raw = ("; the raw data of the stages before it was deleted from the run folder after the run"
               if privacy.get("raw_purged") else "; the stages before it keep their raw data in the run folder")
    ents = phi.get("entities") or {}
    out = ["## Protected health information", "",
           f"Stage `{phi.get('source') + '.' if phi.get('source') else ''}{phi['stage']}` (profile `{privacy.get('profile', 'unknown')}`, mode `{mode}`) runs before anything "
           f"is hashed, counted into the vocabulary or packed: {how}; {ids}; {meta}{raw}. "
           f"{_n(phi.get('docs_with_phi', 0))} of {_n(phi['docs_in'])} documents had at least one identifier "
           "replaced. Counts by type (no value, id or pseudonym is ever recorded):", ""]
    out.append(_table(["type", "replaced"], [[t, _n(n)] for t, n in sorted(ents.items(), key=lambda kv: (-kv[1], kv[0]))])
               if ents else "(none found)")
    return "\n".join(out)


def _dedup(manifest: dict, stats: list[dict]) -> str:
    lines = []
    for s in stats:
        if "duplicate_groups" in s:
            lines.append(f"- `{s['stage']}`: groups of identical texts ({s.get('hash', 'hash')}): "
                         f"{_n(s['duplicate_groups'])}, the largest of {_n(s.get('largest_group', 0))}; the first of "
                         f"each group kept, copies removed: {_n(sum(s['removed'].values()))}.")
        if "cluster_sizes" in s:
            sizes = ", ".join(f"{_n(n)} of size {k}" for k, n in sorted(s["cluster_sizes"].items(), key=lambda kv: int(kv[0])))
            lines.append(f"- `{s['stage']}`: MinHash LSH, {s.get('num_perm')} permutations, {s.get('bands')} bands x "
                         f"{s.get('rows')} rows, Jaccard threshold {s.get('threshold')}: candidate pairs "
                         f"{_n(s.get('candidate_pairs', 0))}, clusters {_n(s.get('clusters', 0))} ({sizes or 'none'}); "
                         f"near duplicates removed: {_n(sum(s['removed'].values()))}.")
    if "validation_near_train" in manifest:
        lines.append(f"- Validation documents sharing an LSH bucket with a train document: "
                     f"{_n(manifest['validation_near_train'])}.")
    return "## Deduplication\n\n" + "\n".join(lines) if lines else ""


def _provenance(manifest: dict) -> str:
    versions = manifest.get("versions") or {}
    config = manifest.get("config") or {}
    return "\n".join([
        "## How it was made", "",
        f"`python -m pipeline run --config {manifest.get('config_file')}` (medprep {versions.get('medprep')}; "
        + ", ".join(f"{k} {v}" for k, v in sorted(versions.items()) if k != "medprep") + "), with this config "
        "(after command-line overrides):", "",
        "```yaml", yaml.safe_dump(config, sort_keys=False, allow_unicode=True).rstrip(), "```"])


def write_card(config, manifest: dict) -> RunPath:
    """final/README.md of a finished run."""
    out = config.output_dir / "final" / CARD_FILE
    out.write_text(card_text(config, manifest))
    return out
