"""The other ways out for PHI, besides the text: document ids, meta fields, the stage folders
written before `phi`, and the id crosswalk. The phi stage's privacy hooks (pipeline/stages/phi/)
are made of these.

- ids: `doc-` + 16 hex of a keyed BLAKE2b of the id (pipeline/phi/secret.py holds the key),
  so the same id gets the same pseudonym in every run with the same key;
- meta fields (columns that are neither id, text nor an annotation a stage added): dropped,
  redacted value by value by the phi engine, or kept;
- the crosswalk (pseudonym, id) is written only to a file the config names outside the run
  folder, by the driver once every shard is done, from the stage's input ids in input order;
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
from pipeline.phi.secret import key_id, load_phi_key, phi_key_source
from pipeline.runpath import RunPath, as_run_path
from pipeline.shards import SUCCESS, is_done, is_purged, purge_documents

PREFIX = "doc-"
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


def uses_key(cfg) -> bool:
    """Whether the phi stage's output depends on the PHI key: surrogates are keyed by it, and
    so are pseudonyms. The one definition, for the stage's fingerprint and its cache."""
    return cfg.mode == "surrogate" or cfg.id_mode == "pseudonymize"


def key_ids(cfg) -> list[str]:
    """The key's one-way id where the stage uses the key (another key: another output)."""
    return [key_id(load_phi_key(cfg.key_file))] if uses_key(cfg) else []


def registry_ids(cfg) -> list[str]:
    """The known-identifier registry's content as a keyed digest (a plain digest of a short
    list of names could be tested against guesses): another registry, another output."""
    if not cfg.known_phi:
        return []
    import hmac
    content = Path(cfg.known_phi).read_bytes()
    return ["known_phi:" + hmac.new(load_phi_key(cfg.key_file), content, hashlib.sha256).hexdigest()[:16]]


class IdsAndMeta:
    """What the phi stage does to a batch besides the text: pseudonymize ids, drop or redact
    meta fields (the columns that are neither id, text nor in `annotation_columns`, the
    columns stages add). `engine` (a PhiEngine) is needed only for `meta_fields: redact`."""

    def __init__(self, config, engine=None, annotation_columns=()):
        self.config = config
        self.engine = engine
        self.key = load_phi_key(config.key_file) if config.id_mode == "pseudonymize" else None
        # The group column (a patient id) travels on, as ids do: a keyed pseudonym, for the
        # stages that keep a patient's documents together (split.by).
        self.group = config.group_field
        self.keep_columns = {"id", "text", *annotation_columns, *([self.group] if self.group else [])}

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
            table = set_column(table, "id", pseudonym_array(table["id"], self.key))
            if self.group and self.group in table.column_names:
                table = set_column(table, self.group, pseudonym_array(pc.cast(table[self.group], pa.string()),
                                                                      self.key))
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


def write_crosswalk(path: str, ids, key: bytes) -> int:
    """(pseudonym, id) of every document of the input (`ids`: lists of ids, in input order), as
    CSV (mode 0600), under a temp name renamed into place. Written by the driver from the
    input's ids, whatever number of workers and shards ran the stage. Returns the number of rows."""
    def rows():
        for part in ids:
            yield from zip(pseudonymize(part, key), part)
    return write_private_csv(Path(path), ["pseudonym", "id"], rows())


def write_private_csv(path: Path, header: list[str], rows) -> int:
    """A CSV only its owner reads (mode 0600), under a temp name renamed into place; the temp
    file goes if writing fails. Returns the number of rows."""
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    n = 0
    try:
        with open(fd, "w", encoding="utf-8", newline="") as fh:
            writer = csv.writer(fh)
            writer.writerow(header)
            for row in rows:
                writer.writerow(row)
                n += 1
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return n


def _inside(path: Path, folder) -> bool:
    if getattr(folder, "local", folder) is None:
        return False                     # a run folder on an object store holds no local file
    path, folder = path.resolve(), Path(folder).resolve()
    return path == folder or folder in path.parents


def check_private_files(cfg, where: str, run_dirs: list) -> None:
    """Up front: the key file exists, and neither it nor the crosswalk is inside the run folder
    (or a stage's --output folder); the crosswalk's folder exists and ids are pseudonymized.
    `where` names the stage's entry in the config."""
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
    purge_documents(folder, "its raw documents were removed after the run because they hold PHI; "
                            "set phi.keep_raw: true to keep them")


def purge_before(cfg, earlier: list[tuple[str, RunPath]]) -> dict:
    """After a completed run: purge every stage before phi (`earlier`: (folder name, path)
    pairs) unless the config keeps raw data. Returns the manifest's `privacy` entry."""
    loaded = load_phi_key(cfg.key_file) if uses_key(cfg) else None
    key = loaded if cfg.id_mode == "pseudonymize" else None
    purged = []
    if not cfg.keep_raw:
        for name, folder in earlier:
            folder.with_name(folder.name + ".tmp").rmtree()
            if is_done(folder):
                purge_stage(folder, key)
            if is_purged(folder):
                purged.append(name)
    return {"raw_purged": not cfg.keep_raw, "stages": purged, "profile": cfg.profile, "id_mode": cfg.id_mode,
            "meta_fields": cfg.meta_fields, "key_source": phi_key_source(cfg.key_file) if uses_key(cfg) else None,
            # The key's one-way id (never the key): the next run says when the key changed.
            "key_id": key_id(loaded) if loaded is not None else None}


def pseudonyms_of(cfg, stats: dict):
    """For the report: a function mapping the raw ids of phi's input to their pseudonyms, or
    None when ids are kept (id_mode: keep)."""
    # Stats without id_mode (written before ids were pseudonymized) count as pseudonymized:
    # the report then shows no raw id, at worst a pseudonym nothing else holds.
    if stats.get("id_mode", "pseudonymize") == "keep":
        return None
    key = load_phi_key(cfg.key_file)
    return lambda ids: pseudonymize(ids, key)
