"""The other ways out for PHI, besides the text: document ids, meta fields, the stage folders
written before `phi`, and the id crosswalk.

- ids: `doc-` + 16 hex of a keyed BLAKE2b of the id (pipeline/phi/secret.py holds the key),
  so the same id gets the same pseudonym in every run with the same key;
- meta fields (columns that are neither id, text nor an annotation of our stages): dropped,
  redacted value by value by the phi engine, or kept;
- the crosswalk (pseudonym, id) is written only to a file the config names outside the run folder;
- after a run, the stages before `phi` lose their data/ and their removed/ is rewritten with
  pseudonyms and without text, unless the config keeps raw data (`phi.keep_raw`)."""
from __future__ import annotations

import csv
import hashlib
import json
import os
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from pipeline.documents import REMOVED_SCHEMA
from pipeline.errors import ConfigError
from pipeline.phi.secret import load_phi_key, phi_key_source
from pipeline.runpath import RunPath, as_run_path
from pipeline.shards import PURGED, STATS, SUCCESS, is_done, is_purged

PREFIX = "doc-"
# Annotation columns the stages write (their output_fields); never meta, never PHI.
ANNOTATION_COLUMNS = frozenset({
    "lang", "lang_score",                                             # langid
    "perplexity", "perplexity_bucket",                                # perplexity
    "n_words", "punct_fraction", "alpha_words_ratio", "avg_word_length",   # heuristics
    "c4_sentences", "c4_lines_dropped",
    "toxicity",                                                       # toxicity
    "split",                                                          # split
})
# The original id, carried from process() to batch_stats() for the crosswalk; never written
# to data/ or removed/ (the store drops "_" columns).
SOURCE_ID = "_source_id"
# Ids of records a reader could not read are file:line, needed to find the record again.
KEEP_ID_REASONS = "malformed_"


def pseudonymize(ids, key: bytes) -> list[str | None]:
    """Keyed pseudonyms of ids (None stays None). 64 bits: a collision among 10 million
    documents has a probability of about 3e-6."""
    salt = hashlib.blake2b(key, digest_size=64, person=b"medprep-id").digest()
    out = []
    for doc_id in ids:
        if doc_id is None:
            out.append(None)
            continue
        h = hashlib.blake2b(doc_id.encode("utf-8"), key=salt, digest_size=8)
        out.append(PREFIX + h.hexdigest())
    return out


def pseudonym_array(values, key: bytes) -> pa.Array:
    return pa.array(pseudonymize(values.to_pylist(), key), pa.string())


class IdsAndMeta:
    """What the phi stage does to a batch besides the text: pseudonymize ids, drop or redact
    meta fields. `engine` (a PhiEngine) is needed only for `meta_fields: redact`."""

    def __init__(self, config, engine=None, own_columns=()):
        self.config = config
        self.engine = engine
        self.key = load_phi_key(config.key_file) if config.id_mode == "pseudonymize" else None
        self.keep_columns = {"id", "text", *ANNOTATION_COLUMNS, *own_columns}

    def apply(self, table: pa.Table) -> pa.Table:
        from pipeline.documents import set_column

        if self.config.meta_fields != "keep":
            meta = [c for c in table.column_names if c not in self.keep_columns and not c.startswith("_")]
            if self.config.meta_fields == "drop":
                table = table.drop_columns(meta)
            else:
                for name in meta:
                    column = self._redacted(name, table[name])
                    table = table.drop_columns([name]) if column is None else set_column(table, name, column)
        if self.key is not None:
            original = table["id"]
            table = set_column(table, "id", pseudonym_array(original, self.key))
            if self.config.crosswalk_file:
                table = set_column(table, SOURCE_ID, original)
        return table

    def _redacted(self, name: str, column) -> pa.Array | None:
        """A string column redacted value by value (a JSON `meta` column leaf by leaf);
        numbers, booleans and dates kept; other types (lists, structs) dropped: they are
        not checked."""
        t = column.type
        if pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_boolean(t) or pa.types.is_temporal(t) \
                or pa.types.is_null(t):
            return column
        if not (pa.types.is_string(t) or pa.types.is_large_string(t)):
            return None
        values = column.to_pylist()
        if name == "meta":          # the JSON column the jsonl reader fills with the other fields
            objs = [json.loads(v) if v is not None else None for v in values]
            leaves: list[tuple[str, str]] = []
            _collect(objs, "", leaves)
            redacted = iter(self._redact(leaves))
            objs = _replace(objs, redacted)
            return pa.array([json.dumps(o, ensure_ascii=False, sort_keys=True) if o is not None else None
                             for o in objs], pa.string())
        pairs = [(name, v) for v in values if v is not None]
        redacted = iter(self._redact(pairs))
        return pa.array([next(redacted) if v is not None else None for v in values], pa.string())

    def _redact(self, pairs: list[tuple[str, str]]) -> list[str]:
        """Each value redacted with its field name in front ("ssn: ...", "patient name: ..."),
        so cue-word recognizers see the context a bare value lacks."""
        if not pairs:
            return []
        prefixes = [name.replace("_", " ").strip() + ": " for name, _ in pairs]
        texts = self.engine.redact_batch([p + v for p, (_, v) in zip(prefixes, pairs)])[0]
        out = []
        for prefix, text in zip(prefixes, texts):
            out.append(text[len(prefix):] if text.startswith(prefix) else text.split(": ", 1)[-1])
        return out


def _collect(obj, name: str, out: list) -> None:
    if isinstance(obj, str):
        out.append((name, obj))
    elif isinstance(obj, dict):
        for k in sorted(obj):
            _collect(obj[k], k, out)
    elif isinstance(obj, list):
        for v in obj:
            _collect(v, name, out)


def _replace(obj, redacted):
    if isinstance(obj, str):
        return next(redacted)
    if isinstance(obj, dict):
        return {k: _replace(obj[k], redacted) for k in sorted(obj)}
    if isinstance(obj, list):
        return [_replace(v, redacted) for v in obj]
    return obj


class Crosswalk:
    """(pseudonym, id) pairs as CSV, written to a temp name and renamed when the stage ends."""

    def __init__(self, path: str):
        self.path = Path(path)
        self.tmp = self.path.with_name(self.path.name + ".tmp")
        self.fh = None
        self.writer = None

    def add(self, pseudonyms, originals) -> None:
        if self.fh is None:
            self._open()
        self.writer.writerows(zip(pseudonyms, originals))

    def _open(self) -> None:
        fd = os.open(self.tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        self.fh = open(fd, "w", encoding="utf-8", newline="")
        self.writer = csv.writer(self.fh)
        self.writer.writerow(["pseudonym", "id"])

    def close(self) -> None:
        if self.fh is None:
            self._open()
        self.fh.close()
        os.replace(self.tmp, self.path)
        self.fh = None


def _inside(path: Path, folder) -> bool:
    if getattr(folder, "local", folder) is None:
        return False                     # a run folder on an object store holds no local file
    path, folder = path.resolve(), Path(folder).resolve()
    return path == folder or folder in path.parents


def check_private_files(config, run_dirs: list[Path]) -> None:
    """Up front: the key file exists, and neither it nor the crosswalk is inside the run folder
    (or a stage's --output folder); the crosswalk's folder exists and ids are pseudonymized."""
    if not config.has_stage("phi"):
        return
    spec = config.stage("phi")
    cfg = spec.config
    where = f"{config.source}: stages[{spec.position - 1}].phi"
    problems = []
    if cfg.key_file:
        if not Path(cfg.key_file).is_file():
            problems.append(f"{where}.key_file: file not found: {cfg.key_file}")
        elif any(_inside(Path(cfg.key_file), d) for d in run_dirs):
            problems.append(f"{where}.key_file: {cfg.key_file} is inside the run folder; keep the key elsewhere")
    if cfg.crosswalk_file:
        path = Path(cfg.crosswalk_file)
        if cfg.id_mode != "pseudonymize":
            problems.append(f"{where}.crosswalk_file: needs id_mode: pseudonymize (ids are kept as they are)")
        elif any(_inside(path, d) for d in run_dirs):
            problems.append(f"{where}.crosswalk_file: {path} is inside the run folder; it maps pseudonyms back "
                            "to ids and must live outside it")
        elif not path.parent.is_dir():
            problems.append(f"{where}.crosswalk_file: folder not found: {path.parent}")
    if problems:
        raise ConfigError("; ".join(problems))


def private_removed(table: pa.Table, key: bytes | None) -> pa.Table:
    """A removed/ table with pseudonymized ids (file:line ids of malformed records kept) and
    no text: id, reason, duplicate_of."""
    n = table.num_rows
    ids, reasons = table["id"], table["reason"]
    dup = table["duplicate_of"] if "duplicate_of" in table.column_names else pa.nulls(n, pa.string())
    if key is not None:
        keep = pc.fill_null(pc.starts_with(reasons, KEEP_ID_REASONS), False)
        ids = pc.if_else(keep, ids, pseudonym_array(ids, key))
        dup = pseudonym_array(dup, key)
    return pa.table({"id": ids, "reason": reasons, "duplicate_of": dup}, schema=REMOVED_SCHEMA)


def purge_stage(folder: RunPath, key: bytes | None) -> None:
    """Remove a finished stage's raw data: data/ goes, removed/ keeps reasons under pseudonyms,
    stats.json stays. _SUCCESS goes first (a purge cut short leaves a stage that reruns),
    _PURGED comes last. Each removed/ shard is rewritten in place (a whole-file write: a
    rename where the filesystem has one, an atomic put on an object store)."""
    folder = as_run_path(folder)
    (folder / SUCCESS).unlink(missing_ok=True)
    for shard in (folder / "removed").glob("*.arrow"):
        with shard.open_stream() as src:
            table = private_removed(pa.ipc.open_stream(src).read_all(), key)
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, REMOVED_SCHEMA) as writer:
            for batch in table.combine_chunks().to_batches(max_chunksize=1000):
                writer.write_batch(batch)
        shard.write_bytes(sink.getvalue().to_pybytes())
    for entry in folder.iterdir():
        if entry.name in (STATS, "removed"):
            continue
        entry.rmtree()
    (folder / PURGED).write_text("raw documents removed after the run (they hold PHI); "
                                 "the next `pipeline run` reruns this stage\n", encoding="utf-8")


def uses_key(cfg) -> bool:
    return cfg.id_mode == "pseudonymize"


def purge_raw_phi(config, stage_dirs: dict[str, Path]) -> dict | None:
    """After a completed run with a phi stage: purge every stage before phi unless the config
    keeps raw data. Returns the manifest's `privacy` entry (None without a phi stage)."""
    if not config.has_stage("phi"):
        return None
    phi = config.stage("phi")
    cfg = phi.config
    key = load_phi_key(cfg.key_file) if cfg.id_mode == "pseudonymize" else None
    purged = []
    if not cfg.keep_raw:
        for spec in config.stages:
            if spec.position >= phi.position:
                break
            folder = stage_dirs[spec.name]
            folder.with_name(folder.name + ".tmp").rmtree()
            if is_done(folder):
                purge_stage(folder, key)
            if is_purged(folder):
                purged.append(spec.folder)
    return {"raw_purged": not cfg.keep_raw, "stages": purged, "profile": cfg.profile, "id_mode": cfg.id_mode,
            "meta_fields": cfg.meta_fields,
            "key_source": phi_key_source(cfg.key_file) if uses_key(cfg) else None}


def report_ids(manifest: dict, phi_stats: dict | None):
    """For the report: a function mapping raw ids of documents removed before phi to their
    pseudonyms, or None when ids are kept (no phi stage, or id_mode: keep)."""
    # Stats without id_mode (written before ids were pseudonymized) count as pseudonymized:
    # the report then shows no raw id, at worst a pseudonym nothing else holds.
    if not phi_stats or phi_stats.get("id_mode", "pseudonymize") == "keep":
        return None
    key_file = None
    for entry in manifest.get("config", {}).get("stages", []):
        if isinstance(entry, dict) and "phi" in entry:
            key_file = (entry["phi"] or {}).get("key_file")
    key = load_phi_key(key_file)
    return lambda ids: pseudonymize(ids, key)
