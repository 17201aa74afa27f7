"""`medprep init --input FILE [--profile clinical|literature|web]`: a starter config for a user's
data. It looks at the first rows of the first input file (format; for JSON Lines and Parquet the
id and text fields: the names, never the values), writes a config whose chain fits the profile,
validates it as a run would, and prints what to check. Nothing of a document's text is printed:
clinical notes carry PHI."""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pyarrow.compute as pc
import yaml

from pipeline.errors import ConfigError, InputError

SAMPLE_ROWS = 200
ID_NAMES = ("id", "doc_id", "document_id", "note_id", "row_id", "uuid", "pmid", "key", "_id")
TEXT_NAMES = ("text", "content", "body", "note", "note_text", "abstract", "document", "raw_content")
# Fields that say what the records are, when --profile is not given: a literature record (its
# identifiers are public) or a clinical note (a patient's: PHI removed with recall first).
LITERATURE_FIELDS = ("pmid", "pmcid", "doi", "journal", "abstract", "mesh", "mesh_terms", "authors", "pub_date")
CLINICAL_FIELDS = ("patient_id", "patient", "mrn", "subject_id", "hadm_id", "encounter_id", "visit_id",
                   "admission_id", "note_id", "note_text", "note_type", "discharge_summary")

# The chain of each profile, with why, as comments in the config it writes. The literature chain
# is configs/pubmed.yaml's without metadata (its rules read MEDLINE's columns, which a JSON or CSV
# input rarely has) and decontaminate (the benchmark is the user's choice); the clinical one
# configs/clinical_notes.yaml's.
PROFILES = {
    "clinical": {
        "why": "clinical notes: PHI removed with recall first (names, dates, ids), placeholders in the text; "
               "language ID and perplexity are tuned on abstracts, so they are off",
        "stages": [
            {"normalize": {}},
            {"heuristics": {"min_words": 20, "min_alpha_words_ratio": 0.5, "c4_curly_braces": False}},
            {"phi": {"mode": "placeholder", "profile": "clinical"}},
            {"dedup_exact": {}},
            {"dedup_minhash": {}},
            {"split": {"validation_fraction": 0.05}},
            {"tokenizer": {"vocab_size": 16000}},
            {"pack": {"seq_len": 2048, "batch_size": 64}},
        ],
    },
    "literature": {
        "why": "biomedical literature: language ID, KenLM perplexity (a model trained on PubMed abstracts), "
               "heuristics loosened for abstracts, toxicity, and the literature PHI profile (eponyms, PMIDs kept)",
        "stages": [
            {"normalize": {}},
            {"langid": {"keep": ["en"], "min_score": 0.65}},
            {"perplexity": {"mode": "max", "max_perplexity": 5000}},
            {"heuristics": {"min_words": 50, "min_alpha_words_ratio": 0.5, "c4_curly_braces": False,
                            "top_ngram_max_fraction": {2: 0.25, 3: 0.22, 4: 0.20},
                            "dup_ngram_max_fraction": {5: 0.25, 6: 0.24, 7: 0.23, 8: 0.22, 9: 0.21, 10: 0.20}}},
            {"toxicity": {"max_score": 0.9}},
            {"phi": {"mode": "placeholder", "profile": "literature"}},
            {"dedup_exact": {}},
            {"dedup_minhash": {"threshold": 0.8, "num_perm": 128, "ngram": 5}},
            {"split": {"validation_fraction": 0.01}},
            {"tokenizer": {"vocab_size": 32000}},
            {"pack": {"seq_len": 2048, "batch_size": 1024}},
        ],
    },
    "web": {
        "why": "web pages: language ID, datatrove's default heuristics (Gopher, C4, FineWeb), toxicity, dedup; "
               "no perplexity (the shipped model knows abstracts, not the web) and no phi stage",
        "stages": [
            {"normalize": {}},
            {"langid": {"keep": ["en"], "min_score": 0.65}},
            {"heuristics": {}},
            {"toxicity": {"max_score": 0.9}},
            {"dedup_exact": {}},
            {"dedup_minhash": {"threshold": 0.8}},
            {"split": {"validation_fraction": 0.01}},
            {"tokenizer": {"vocab_size": 32000}},
            {"pack": {"seq_len": 2048, "batch_size": 1024}},
        ],
    },
}


def _first_rows(path: Path, fmt: str) -> list[dict]:
    """Up to SAMPLE_ROWS rows of a JSON Lines, JSON, CSV/TSV or Parquet file, as the file has them."""
    if fmt == "parquet":
        import pyarrow.parquet as pq
        reader = pq.ParquetFile(path)
        batch = next(reader.iter_batches(batch_size=SAMPLE_ROWS), None)
        return batch.to_pylist() if batch is not None else []
    if fmt in ("csv", "tsv"):
        import pyarrow.csv as pacsv
        parse = pacsv.ParseOptions(delimiter="\t" if fmt == "tsv" else ",", newlines_in_values=True,
                                   invalid_row_handler=lambda row: "skip")    # the run counts them
        batch = next(iter(pacsv.open_csv(str(path), parse_options=parse)), None)
        return batch.slice(0, SAMPLE_ROWS).to_pylist() if batch is not None else []
    from pipeline.readers.jsonl import open_binary
    if fmt == "json":
        with open_binary(path) as fh:
            body = fh.read()
        if body.lstrip().startswith(b"["):
            try:
                items = json.loads(body.decode("utf-8"))
            except ValueError as exc:
                raise InputError(f"{path}: not a JSON array of objects ({exc})") from None
            return [r for r in items[:SAMPLE_ROWS] if isinstance(r, dict)]
    rows = []
    with open_binary(path) as fh:
        for number, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except ValueError as exc:
                raise InputError(f"{path}:{number}: not a JSON object ({exc.msg})") from None
            if isinstance(row, dict):
                rows.append(row)
            if len(rows) >= SAMPLE_ROWS:
                break
    return rows


def _pick(rows: list[dict], names: tuple[str, ...], kind) -> str | None:
    """The first field of `names` present in most rows; else (for text) the string field with
    the longest values on average."""
    counts = {k: sum(1 for r in rows if isinstance(r.get(k), kind)) for r in rows for k in r}
    for name in names:
        if counts.get(name, 0) >= len(rows) / 2:
            return name
    return None


def detect_fields(path: Path, fmt: str) -> dict:
    """{"id_field", "text_field", "fields", "rows", "notes"} for JSON Lines, JSON, CSV/TSV and Parquet."""
    rows = _first_rows(path, fmt)
    if not rows:
        raise InputError(f"{path}: no rows to look at")
    notes = []
    text = _pick(rows, TEXT_NAMES, str)
    if text is None:
        lengths = {}
        for r in rows:
            for k, v in r.items():
                if isinstance(v, str):
                    lengths[k] = lengths.get(k, 0) + len(v)
        if not lengths:
            raise InputError(f"{path}: no string field to take as the text (fields: {', '.join(rows[0])})")
        text = max(lengths, key=lengths.get)
        notes.append(f"text_field: '{text}' has the longest strings (no field named {', '.join(TEXT_NAMES[:4])}, ...)")
    ids = _pick(rows, ID_NAMES, (str, int)) or next(
        (k for k in rows[0] if k.lower().endswith("_id") and k != text), None)
    if ids is None:
        notes.append("no id field found: every document must have a unique, stable id (input.id_field); "
                     "without one the reader names each document FILE:LINE")
    fields = sorted({k for r in rows for k in r})
    return {"id_field": ids, "text_field": text, "fields": fields, "rows": len(rows), "notes": notes}


FIELDED = ("jsonl", "json", "csv", "tsv", "parquet")
# Up to this many documents are read to size a small corpus's options; a larger input keeps the
# profile's, which are set for a large run.
SIZING_DOCS = 20_000
CHARS_PER_TOKEN = 4            # byte-level BPE on English prose, roughly


def corpus_size(input_cfg: dict) -> tuple[int, int] | None:
    """(documents, characters) of a small input (read through the run's reader), or None when it
    holds more than SIZING_DOCS documents."""
    from pipeline.config import InputConfig
    from pipeline.readers import read_documents
    docs = chars = 0
    for batch in read_documents(InputConfig.model_validate({**input_cfg, "limit": SIZING_DOCS + 1}), 1000):
        docs += batch.table.num_rows
        chars += int(pc.sum(pc.utf8_length(batch.table["text"])).as_py() or 0)
    return None if docs > SIZING_DOCS else (docs, chars)


def fit_to_size(stages: list[dict], docs: int, chars: int) -> tuple[list[dict], list[str]]:
    """The chain's options for a small corpus, and one line per change: a validation split with
    documents in it, a sequence length the tokens fill, a vocabulary the corpus can support; and,
    when not one short sequence fits, that the run will end at pack."""
    import copy
    stages = copy.deepcopy(stages)
    options = {name: opts for entry in stages for name, opts in entry.items()}
    notes = []
    tokens = chars // CHARS_PER_TOKEN
    split = options.get("split")
    if split is not None and docs * split.get("validation_fraction", 0.01) < 10:
        fraction = round(min(0.2, max(10 / max(docs, 1), split.get("validation_fraction", 0.01))), 3)
        notes.append(f"split.validation_fraction: {fraction} ({docs:,} documents: about "
                     f"{round(docs * fraction):,} for validation)")
        split["validation_fraction"] = fraction
    pack = options.get("pack")
    if pack is not None:
        train_tokens = tokens * (1 - (split or {}).get("validation_fraction", 0.0))
        seq_len = pack.get("seq_len", 2048)
        while seq_len > 128 and train_tokens < 8 * seq_len:
            seq_len //= 2
        if train_tokens < seq_len:
            notes.append(f"WARNING: about {tokens:,} tokens ({docs:,} documents) do not fill one sequence of "
                         f"{seq_len}: the run would end at pack; add documents")
        if seq_len != pack.get("seq_len", 2048):
            notes.append(f"pack.seq_len: {seq_len} (about {tokens:,} tokens: at least 8 sequences)")
            pack["seq_len"] = seq_len
        batch = max(1, min(pack.get("batch_size", 64), int(train_tokens // seq_len) // 4))
        if batch != pack.get("batch_size", 64):
            notes.append(f"pack.batch_size: {batch} (rows per step, for about {int(train_tokens // seq_len):,} rows)")
            pack["batch_size"] = batch
    tokenizer = options.get("tokenizer")
    if tokenizer is not None and tokens < 2_000_000:
        vocab = 4000 if tokens < 200_000 else 8000
        if vocab < tokenizer.get("vocab_size", 32000):
            notes.append(f"tokenizer.vocab_size: {vocab} (about {tokens:,} tokens)")
            tokenizer["vocab_size"] = vocab
    return stages, notes


def choose_profile(path: Path, fmt: str, fields: list[str]) -> tuple[str, str]:
    """(profile, why) from what the input says it is; refused when it cannot tell (one line
    asking for --profile): a wrong guess either alters the literature or leaves PHI in notes."""
    if fmt == "pubmed_xml":
        return "literature", "MEDLINE/PubMed XML"
    if fmt == "jats":
        return "literature", "JATS full texts (PMC)"
    names = {f.lower() for f in fields}
    literature = [f for f in LITERATURE_FIELDS if f in names]
    clinical = [f for f in CLINICAL_FIELDS if f in names]
    if clinical and not literature:
        return "clinical", f"fields {', '.join(clinical)}: clinical notes"
    if literature and not clinical:
        return "literature", f"fields {', '.join(literature)}: literature records"
    seen = f"fields {', '.join(fields)}" if fields else f"format {fmt}"
    raise ConfigError(f"{path}: cannot tell clinical notes from literature or web text ({seen}); pass "
                      "--profile clinical (notes: PHI removed, recall first), literature (abstracts, papers: "
                      "patient identifiers only) or web")


def starter_config(inputs: list[str], config_path: Path, profile: str | None = None) -> tuple[dict, list[str]]:
    """(the config, what to check) for these input files."""
    from pipeline.readers import detect_format, expand_paths
    files = expand_paths(inputs)
    if not files:
        raise InputError(f"--input: no input files matched: {', '.join(inputs)}")
    missing = [str(f) for f in files if not f.exists()]
    if missing:
        raise InputError(f"--input: not found: {', '.join(missing)}")
    first = files[0]
    fmt = detect_format(first)
    base = config_path.parent.resolve()

    def relative(p: str) -> str:
        # Relative paths in a config are looked for beside it first (pipeline/config.py): a
        # path given relative to here is written relative to the config's folder.
        if Path(p).is_absolute():
            return p
        return os.path.relpath(os.path.abspath(p), base)

    input_cfg: dict = {"paths": [relative(p) for p in inputs], "format": fmt}
    checks = [f"input: {len(files)} file(s), format {fmt} (from {first.name})"]
    if fmt in FIELDED:
        found = detect_fields(first, fmt)
        if found["id_field"]:
            input_cfg["id_field"] = found["id_field"]
        input_cfg["text_field"] = found["text_field"]
        checks.append(f"fields in the first {found['rows']} rows: {', '.join(found['fields'])}; "
                      f"id_field: {found['id_field'] or '(none)'}, text_field: {found['text_field']}")
        checks += found["notes"]
    elif fmt == "text":
        input_cfg["text_unit"] = "file"
        checks.append("plain text: one document per file (input.text_unit: line for one per non-empty line)")
    if profile is None:
        profile, why = choose_profile(first, fmt, found["fields"] if fmt in FIELDED else [])
        checks.append(f"profile {profile} chosen: {why} (--profile clinical | literature | web to choose another)")
    chain = PROFILES[profile]
    name = config_path.stem
    cores = os.cpu_count() or 1
    config = {"input": input_cfg, "output_dir": f"runs/{name}", "seed": 1234, "num_proc": cores,
              "stages": chain["stages"]}
    size = corpus_size({**input_cfg, "paths": [str(p) for p in files]})
    if size is not None:
        docs, chars = size
        # Every core gets shards to work on (a few each), however small the input.
        config["shard_size"] = max(50, -(-docs // (4 * cores)))
        config["batch_size"] = min(500, config["shard_size"])
        config["stages"], fitted = fit_to_size(chain["stages"], docs, chars)
        checks.append(f"sized for {docs:,} documents (about {chars // CHARS_PER_TOKEN:,} tokens): shard_size "
                      f"{config['shard_size']} for {cores} workers" + "".join(f"; {n}" for n in fitted))
    checks.append(f"profile {profile}: {chain['why']}")
    if profile == "clinical":
        checks.append("phi: ids are pseudonymized and meta fields dropped; with a patient column, set "
                      "phi.group_field and split.by to it (input.columns for a JSON field) so each patient's notes "
                      "land in one split under a pseudonym; the PHI key is $MEDPREP_PHI_KEY or "
                      "~/.config/medprep/phi.key (keep it outside the run folder)")
    if profile == "web":
        checks.append("no phi stage: add `- phi: {profile: literature}` after toxicity if the pages may carry "
                      "personal data")
    checks.append("heuristics thresholds (min_words, ...), split.validation_fraction, tokenizer.vocab_size "
                  "(smaller for a small corpus) and pack.seq_len / batch_size: set for your corpus and trainer")
    checks.append(f"output_dir: {config['output_dir']} (relative to the folder you run in)")
    return config, checks


def write_starter_config(inputs: list[str], config_file: str, profile: str | None = None, force: bool = False) -> Path:
    from pipeline.config import load_config
    path = Path(config_file)
    if path.exists() and not force:
        raise ConfigError(f"{path}: exists; pass --force to overwrite it, or --config NEW.yaml")
    config, checks = starter_config(inputs, path, profile)
    header = ("# Written by `medprep init`: check the lines it printed, then `medprep run --config "
              f"{path}`.\n# Keys: docs/config.md. Relative paths are looked for beside this file, then in "
              "the current directory.\n")
    text = header + yaml.safe_dump(config, sort_keys=False, default_flow_style=None, width=100)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    try:
        load_config(tmp)                  # what a run would refuse, refused now
    except ConfigError:
        tmp.unlink()
        raise
    tmp.replace(path)
    print(f"wrote {path}; check:", file=sys.stderr)
    for line in checks:
        print(f"  - {line}", file=sys.stderr)
    print(f"then: medprep run --config {path}", file=sys.stderr)
    return path
