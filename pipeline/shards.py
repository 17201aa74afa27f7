"""Stage folders on disk: Arrow shards, removed/, stats.json, _SUCCESS, atomic by rename.

The shard contract (the same for every executor): the unit of work is an input shard, and
shard NAME of a stage's input becomes data/NAME.arrow and removed/NAME.arrow of its output,
so file names and bytes do not depend on which worker ran a shard or in what order. A
finished shard leaves a marker, shards/NAME.json (its counts), written after its files.

A stage writes into `<folder>.tmp` (with the fingerprint it runs under in _FINGERPRINT),
then writes stats.json and _SUCCESS, then renames the folder into place. A stage killed
midway leaves the .tmp folder: the next run with the same fingerprint keeps the shards that
have a marker and does the rest; with another fingerprint it starts over.

Shards are Arrow IPC streams (zstd-compressed buffers). A stage that does not change the
text (rewrites_text False) and reads another stage's output writes, in the text column's
place, where each text is (_text_file, _text_row): the run folder holds a text once per stage
that changes it, not once per stage. Where the filesystem has no rename (an object store;
runpath.py), files are written at their final names and the marker and _SUCCESS order alone
makes them safe: the stage folder is written in place, not in <folder>.tmp.

This module is the one reader of the shard format (`read_shard`, `stage_shards`,
`read_table`), joining texts back in: runner, stages, report and tests go through it.
"""
from __future__ import annotations

import json
import posixpath
from collections import Counter, OrderedDict

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pipeline.documents import (
    DUPLICATE_OF,
    DUPLICATE_OF_SOURCE,
    REASON,
    REMOVED_SCHEMA,
    REMOVED_SCHEMA_WITH_TEXT,
    SOURCE,
    source_of_shard,
)
from pipeline.progress import documents_done
from pipeline.runpath import RunPath, as_run_path, read_json, write_json

SUCCESS = "_SUCCESS"
# Written instead of _SUCCESS when a stage before `phi` had its raw documents removed after
# the run: its stats stay, its data is gone, so the next run reruns it.
PURGED = "_PURGED"
STATS = "stats.json"
FINGERPRINT = "_FINGERPRINT"
MARKERS = "shards"
# Rows per Arrow record batch inside a shard. Fixed, so shard bytes do not depend on how
# the input happened to be batched or how many workers ran.
WRITE_CHUNK = 1000
# Shards are Arrow IPC streams with zstd-compressed buffers (level 3: about 3x smaller on
# abstracts, written at ~100 MB/s and read at ~500 MB/s per core; pyarrow and `datasets`
# decompress on read). Deterministic for a given pyarrow, whose version is in every fingerprint.
SHARD_IPC_OPTIONS = pa.ipc.IpcWriteOptions(compression=pa.Codec("zstd", compression_level=3))


def is_done(folder) -> bool:
    return (as_run_path(folder) / SUCCESS).exists()


def is_purged(folder) -> bool:
    return (as_run_path(folder) / PURGED).exists()


def shard_paths(folder, sub: str = "data") -> list[RunPath]:
    return (as_run_path(folder) / sub).glob("*.arrow")


# A stage that does not change the text does not copy it: its data/ shards hold, in the text
# column's place, where each document's text is (_text_file: the shard that holds it, relative
# to the stages folder; _text_row: its row there). Readers of this module put the text back.
TEXT_FILE, TEXT_ROW = "_text_file", "_text_row"
_OWNER_TEXT: "OrderedDict[tuple, pa.ChunkedArray]" = OrderedDict()


def stages_base(shard: RunPath) -> RunPath:
    """The folder refs are relative to: <base>/<stage folder>/data/NAME.arrow."""
    return shard.parent.parent.parent


def _owner_text(path: RunPath) -> pa.ChunkedArray:
    """The text column of a shard that holds texts (the last few kept: shards are mostly read in
    name order, and shard NAME's texts are in shard NAME of the stage that wrote them)."""
    # Keyed by the file's version too: a stage rerun in this process rewrites its shards.
    info = path.fs.get_file_info(path.path)
    key = (str(path), info.size, info.mtime_ns)
    if key not in _OWNER_TEXT:
        with path.open_stream() as src:
            _OWNER_TEXT[key] = pa.ipc.open_stream(src).read_all()["text"]
        while len(_OWNER_TEXT) > 4:
            _OWNER_TEXT.popitem(last=False)
    return _OWNER_TEXT[key]


def join_text(table: pa.Table, base: RunPath) -> pa.Table:
    """A referencing table with its text column back where the refs are."""
    files, rows = table[TEXT_FILE], table[TEXT_ROW]
    names = pc.unique(files).to_pylist()
    if len(names) == 1:
        text = _owner_text(base / names[0]).take(rows)
    else:
        pieces, order = [], []
        for name in names:
            sel = pc.equal(files, name)
            pieces.append(_owner_text(base / name).take(rows.filter(sel)))
            order.append(np.flatnonzero(sel.to_numpy(zero_copy_only=False)))
        text = pa.chunked_array([c for p in pieces for c in p.chunks], pa.string())
        text = text.take(pa.array(np.argsort(np.concatenate(order), kind="stable")))
    at = table.schema.get_field_index(TEXT_FILE)
    return table.drop_columns([TEXT_FILE, TEXT_ROW]).add_column(at, "text", text.combine_chunks())


def with_refs(table: pa.Table, files: pa.Array, rows: pa.Array) -> pa.Table:
    """A table's text column replaced by where the texts are."""
    at = table.schema.get_field_index("text")
    table = table.drop_columns(["text"])
    return table.add_column(at, TEXT_FILE, files).add_column(at + 1, TEXT_ROW, rows)


def ref_schema(schema: pa.Schema) -> pa.Schema:
    at = schema.get_field_index("text")
    return schema.remove(at).insert(at, pa.field(TEXT_FILE, pa.string())).insert(at + 1, pa.field(TEXT_ROW, pa.int64()))


def _raw_tables(path: RunPath, batch_size: int | None, columns: list[str] | None):
    with path.open_stream() as src:
        reader = pa.ipc.open_stream(src)
        if columns is not None and TEXT_ROW in reader.schema.names and "text" in columns:
            columns = [c for c in columns if c != "text"] + [TEXT_FILE, TEXT_ROW]
        pending, rows = [], 0
        for batch in reader:
            if columns is not None:
                batch = batch.select([c for c in columns if c in batch.schema.names])
            if batch_size is None:
                yield pa.Table.from_batches([batch])
                continue
            pending.append(batch)
            rows += batch.num_rows
            while rows >= batch_size:
                t = pa.Table.from_batches(pending)
                yield t.slice(0, batch_size)
                rest = t.slice(batch_size)
                pending, rows = rest.to_batches(), rest.num_rows
        if batch_size is not None and rows:
            yield pa.Table.from_batches(pending)


def read_shard(path, batch_size: int | None = None, columns: list[str] | None = None):
    """Tables of one Arrow IPC stream shard, `batch_size` rows at most (None: as stored), as
    whole documents (texts joined back in where the shard refers to them)."""
    path = as_run_path(path)
    for table in _raw_tables(path, batch_size, columns):
        yield join_text(table, stages_base(path)) if TEXT_ROW in table.column_names else table
        documents_done(table.num_rows)       # the caller is back for more: this batch is done


def read_shard_refs(path, batch_size: int | None, base: RunPath | None):
    """(documents, text refs) of one shard: where each row's text is, relative to `base` (the
    stages folder of the shard being written), for a stage that passes texts through."""
    path = as_run_path(path)
    in_base = stages_base(path)
    row = 0
    for table in _raw_tables(path, batch_size, None):
        n = table.num_rows
        if TEXT_ROW in table.column_names:
            files, rows = table[TEXT_FILE].combine_chunks(), table[TEXT_ROW].combine_chunks()
            table = join_text(table, in_base)
        else:
            files = pa.array([posixpath.relpath(path.path, in_base.path)] * n, pa.string()) if n else \
                pa.array([], pa.string())
            rows = pa.array(np.arange(row, row + n, dtype=np.int64))
        if base is not None and base.path != in_base.path:
            # Another stages folder (pipeline.stage --output elsewhere): the same files, seen from there.
            names = pc.unique(files)
            moved = pa.array([posixpath.relpath(posixpath.join(in_base.path, f), base.path)
                              for f in names.to_pylist()], pa.string())
            files = moved.take(pc.index_in(files, value_set=names))
        row += n
        yield table, files, rows
        documents_done(n)


def shard_schema(path) -> pa.Schema:
    """The shard's columns as documents (text in place of its refs)."""
    with as_run_path(path).open_stream() as src:
        schema = pa.ipc.open_stream(src).schema
    if TEXT_ROW in schema.names:
        at = schema.get_field_index(TEXT_FILE)
        schema = schema.remove(schema.get_field_index(TEXT_ROW)).remove(at).insert(at, pa.field("text", pa.string()))
    return schema


def read_table(folder, sub: str = "data", columns: list[str] | None = None) -> pa.Table | None:
    """All shards of a stage folder's data/ (or removed/) as one table, in shard order."""
    tables = [t for f in shard_paths(folder, sub) for t in read_shard(f, None, columns)]
    # A shared tail holds several sources' columns: a column one lacks is null there.
    return pa.concat_tables(tables, promote_options="permissive") if tables else None


def stage_shards(folder) -> list[tuple[str, RunPath, int | None]]:
    """(name, data file, rows) of a finished stage's output shards, in name order."""
    folder = as_run_path(folder)
    out = []
    for f in shard_paths(folder):
        marker = folder / MARKERS / f"{f.stem}.json"
        rows = read_json(marker)["docs_out"] if marker.exists() else None
        out.append((f.stem, f, rows))
    return out


def conform(table: pa.Table, schema: pa.Schema, where) -> pa.Table:
    """A batch cast to a shard's schema. A column the schema lacks would be lost, so it is an
    error; a schema column the batch lacks is null in it."""
    from pipeline.errors import UserError
    if table.schema.names != schema.names:
        extra = [c for c in table.column_names if c not in schema.names]
        if extra:
            raise UserError(f"{where}: column {', '.join(repr(c) for c in extra)} is not in the columns "
                            f"of the first batch ({', '.join(schema.names)}); input files must have "
                            "the same columns")
        n = table.num_rows
        table = pa.table([table[f.name] if f.name in table.column_names else pa.nulls(n, f.type)
                          for f in schema], names=schema.names)
    try:
        return table.cast(schema)
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError):
        # Arrow's message quotes the value that failed to convert: a document's field,
        # possibly PHI. Name the columns and types instead.
        bad = [f"{f.name} ({table.schema.field(f.name).type} vs {f.type})" for f in schema
               if table.schema.field(f.name).type != f.type]
        raise UserError(f"{where}: column types differ from the first batch's: {', '.join(bad)}; "
                        "input files must have the same column types") from None


class ArrowFile:
    """One Arrow IPC stream file written in record batches of WRITE_CHUNK rows (bytes do not
    depend on how rows arrived), under a temp name renamed into place by close() where the
    filesystem renames, else at its final name (a marker written later vouches for it)."""

    def __init__(self, path, schema: pa.Schema | None):
        self.path = as_run_path(path)
        self.tmp = self.path.with_name(self.path.name + ".tmp") if self.path.renames else self.path
        self.schema = schema
        self.pending: list[pa.Table] = []
        self.pending_rows = 0
        self.rows = 0
        self.sink = self.writer = None

    def write(self, table: pa.Table) -> None:
        if table.num_rows == 0:
            return
        if self.schema is None:
            self.schema = table.schema
        table = conform(table, self.schema, self.path.parent.parent)
        self.pending.append(table)
        self.pending_rows += table.num_rows
        while self.pending_rows >= WRITE_CHUNK:
            self._emit(WRITE_CHUNK)

    def _open(self) -> None:
        if self.writer is None:
            self.sink = self.tmp.open_output()
            self.writer = pa.ipc.new_stream(self.sink, self.schema, options=SHARD_IPC_OPTIONS)

    def _emit(self, n: int) -> None:
        buf = pa.concat_tables(self.pending)
        chunk, rest = buf.slice(0, n), buf.slice(n)
        self.pending = [rest] if rest.num_rows else []
        self.pending_rows = rest.num_rows
        self._open()
        for batch in chunk.combine_chunks().to_batches():
            self.writer.write_batch(batch)
        self.rows += chunk.num_rows

    def close(self) -> None:
        if self.pending_rows:
            self._emit(self.pending_rows)
        if self.schema is None:
            self.schema = pa.schema([("id", pa.string()), ("text", pa.string())])
        self._open()                     # an empty shard is still a file, with its schema
        self.writer.close()
        self.sink.close()
        if self.tmp != self.path:
            self.tmp.rename(self.path)


class ShardFiles:
    """One shard's output: kept rows to data/NAME.arrow, removed rows (id, reason,
    duplicate_of) to removed/NAME.arrow, then its marker shards/NAME.json, last."""

    def __init__(self, folder, name: str, *, keep_removed_text: bool, schema: pa.Schema | None = None,
                 text_refs: bool = False):
        self.folder = as_run_path(folder)
        self.name = name
        self.keep_removed_text = keep_removed_text
        # Kept rows hold where their text is instead of the text (a stage that passes texts through).
        self.text_refs = text_refs
        self.data = ArrowFile(self.folder / "data" / f"{name}.arrow", schema)
        removed_schema = REMOVED_SCHEMA_WITH_TEXT if keep_removed_text else REMOVED_SCHEMA
        # A multi-source run's shard (named SOURCE.K): its removed rows say their source, and a
        # duplicate's the source of the document kept in its place.
        self.source = source_of_shard(name)
        if self.source is not None:
            removed_schema = removed_schema.append(pa.field(SOURCE, pa.string())) \
                .append(pa.field("duplicate_of_source", pa.string()))
        self.removed = ArrowFile(self.folder / "removed" / f"{name}.arrow", removed_schema)
        self.docs_in = 0
        self.reasons: Counter = Counter()

    def set_schema(self, schema: pa.Schema) -> None:
        """The data file's columns, given as documents' columns."""
        self.data.schema = ref_schema(schema) if self.text_refs else schema

    def write(self, table: pa.Table, refs: tuple[pa.Array, pa.Array] | None = None) -> None:
        """Route a processed batch: rows with a reason go to removed/, the rest to data/.
        `refs`: where each row's text is (with text_refs)."""
        self.docs_in += table.num_rows
        n_removed = 0
        if REASON in table.column_names:
            removed_mask = pc.is_valid(table[REASON])
            n_removed = pc.sum(removed_mask).as_py() or 0
        kept = table.filter(pc.invert(removed_mask)) if n_removed else table
        # Private columns (reason, duplicate_of, the phi stage's original id) never reach data/.
        kept = kept.drop_columns([c for c in kept.column_names if c.startswith("_")])
        if self.text_refs:
            files, rows = refs
            if n_removed:
                keep = pc.invert(removed_mask)
                keep = keep.combine_chunks() if isinstance(keep, pa.ChunkedArray) else keep
                files, rows = files.filter(keep), rows.filter(keep)
            kept = with_refs(kept, files, rows)
        self.data.write(kept)
        if n_removed:
            self._write_removed(table.filter(removed_mask))

    def _write_removed(self, removed: pa.Table) -> None:
        n = removed.num_rows
        dup = removed[DUPLICATE_OF] if DUPLICATE_OF in removed.column_names else pa.nulls(n, pa.string())
        cols = {"id": removed["id"], "reason": removed[REASON], "duplicate_of": dup}
        if self.source is not None:
            cols[SOURCE] = pa.array([self.source] * n, pa.string())
            cols["duplicate_of_source"] = removed[DUPLICATE_OF_SOURCE] \
                if DUPLICATE_OF_SOURCE in removed.column_names else pa.nulls(n, pa.string())
        if self.keep_removed_text:
            cols["text"] = removed["text"] if "text" in removed.column_names else pa.nulls(n, pa.string())
        for value in pc.value_counts(removed[REASON]).to_pylist():
            self.reasons[value["values"]] += value["counts"]
        self.removed.write(pa.table(cols))

    def set_aside(self, rows: list[tuple[str, str]]) -> None:
        """Records a reader could not turn into documents (or set aside by rule)."""
        if not rows:
            return
        self.docs_in += len(rows)
        ids, reasons = zip(*rows)
        self._write_removed(pa.table({"id": pa.array(ids, pa.string()), REASON: pa.array(reasons, pa.string())}))

    def close(self, stats: dict | None = None) -> dict:
        self.data.close()
        self.removed.close()
        marker = {"docs_in": self.docs_in, "docs_out": self.data.rows,
                  "removed": dict(sorted(self.reasons.items())), "stats": stats or {}}
        write_json(self.folder / MARKERS / f"{self.name}.json", marker)
        return marker

    def abort(self) -> None:
        for f in (self.data, self.removed):
            try:
                if f.writer is not None:
                    f.writer.close()
                    f.sink.close()
            except Exception:
                pass


class ShardWriter:
    """Writes tables into numbered Arrow IPC stream shards of at most `shard_size` rows
    (the source, cut into a first stage's input shards; pack's sequences)."""

    def __init__(self, folder, schema: pa.Schema | None, shard_size: int, prefix: str = ""):
        self.folder = as_run_path(folder)
        self.folder.mkdir()
        self.schema = schema
        self.shard_size = shard_size
        self.prefix = prefix
        self.current: ArrowFile | None = None
        self.shard_index = 0
        self.rows = 0
        self.names: list[str] = []

    def write(self, table: pa.Table) -> None:
        while table.num_rows:
            if self.current is None:
                name = f"{self.prefix}{self.shard_index:05d}"
                self.current = ArrowFile(self.folder / f"{name}.arrow", self.schema)
                self.names.append(name)
            room = self.shard_size - self.current.rows - self.current.pending_rows
            part, table = table.slice(0, room), table.slice(room)
            self.current.write(part)
            self.schema = self.current.schema
            self.rows += part.num_rows
            if self.current.rows + self.current.pending_rows >= self.shard_size:
                self._close_shard()

    def _close_shard(self) -> None:
        if self.current is not None:
            self.current.close()
            self.current = None
            self.shard_index += 1

    def close(self) -> None:
        self._close_shard()


class StageOutput:
    """The folder one stage writes, shard by shard: every shard's files and marker are written
    by a task on a worker (ShardFiles); the driver only commits."""

    def __init__(self, folder, *, keep_removed_text: bool, fingerprint: str | None = None):
        self.final = as_run_path(folder)
        # Where renames exist the stage is written in <folder>.tmp and renamed at commit; on
        # an object store, in place: _SUCCESS, written last, is what makes it finished.
        self.tmp = self.final.with_name(self.final.name + ".tmp") if self.final.renames else self.final
        self.keep_removed_text = keep_removed_text
        self._markers: dict[str, dict] = {}
        if self.tmp == self.final and is_done(self.final):
            # A finished output being redone (another config, or --force): _SUCCESS goes first,
            # so a cut-short cleanup never leaves a folder that looks finished.
            (self.final / SUCCESS).unlink(missing_ok=True)
            self.final.rmtree()
        if self.tmp.exists():
            resumable = fingerprint is not None and (self.tmp / FINGERPRINT).exists() and \
                (self.tmp / FINGERPRINT).read_text() == fingerprint
            if not resumable:
                self.tmp.rmtree()          # left by an interrupted run of another config
        self.tmp.mkdir()
        (self.tmp / FINGERPRINT).write_text(fingerprint or "")

    @property
    def folder(self) -> RunPath:
        """Where the stage may put extra files (inside the temp folder until commit)."""
        return self.tmp

    def done_shards(self) -> set[str]:
        return {p.stem for p in (self.tmp / MARKERS).glob("*.json")}

    def note_marker(self, name: str, marker: dict) -> None:
        """A shard's marker as its task returned it (what its file holds), so the driver reads
        no marker file of a shard it ran."""
        self._markers[name] = json.loads(json.dumps(marker))

    def marker(self, name: str) -> dict:
        """A shard's marker: as its task returned it, else from its file (a shard finished by
        an earlier, interrupted run; a global stage's tasks)."""
        if name not in self._markers:
            self._markers[name] = read_json(self.tmp / MARKERS / f"{name}.json")
        return self._markers[name]

    def commit(self, stats: dict, input_shards: list[str], by_source: bool = False,
               purged: str | None = None) -> dict:
        """stats.json (counts summed over the shards' markers, then `stats`) and _SUCCESS, once
        every input shard has its output shard; then the folder goes into place. `by_source`:
        the counts also by source (a shared tail's shards are named SOURCE.K). `purged`: a
        stage whose documents were never written (pipeline/private_chain.py) ends with _PURGED
        saying so, not _SUCCESS."""
        missing = sorted(set(input_shards) - self.done_shards())
        if missing:
            raise RuntimeError(f"{self.final.name}: no output for input shard {missing[0]} "
                               f"({len(missing)} of {len(input_shards)} missing)")
        names = [p.stem for p in sorted((self.tmp / MARKERS).glob("*.json"))]
        markers = [self.marker(name) for name in names]
        reasons: Counter = Counter()
        for m in markers:
            reasons.update(m["removed"])
        stats = {"docs_in": sum(m["docs_in"] for m in markers), "docs_out": sum(m["docs_out"] for m in markers),
                 "removed": dict(sorted(reasons.items())), "shards": len(markers), **stats}
        if by_source:
            stats["docs_by_source"] = counts_by_source(zip(names, markers))
        removed_total = sum(reasons.values())
        if stats["docs_in"] != stats["docs_out"] + removed_total:
            raise RuntimeError(f"{self.final.name}: accounting broken: in {stats['docs_in']} != "
                               f"out {stats['docs_out']} + removed {removed_total}")
        for leftover in ("input", FINGERPRINT):
            (self.tmp / leftover).rmtree()
        write_json(self.tmp / STATS, stats)
        if purged is None:
            (self.tmp / SUCCESS).write_text("")
        else:
            (self.tmp / MARKERS).rmtree()      # as a purge leaves a folder: stats.json and removed/
            (self.tmp / PURGED).write_text(purged.rstrip("\n") + "\n", encoding="utf-8")
        if self.tmp != self.final:
            self.final.rmtree()
            self.tmp.rename(self.final)
        return stats


def chain_order(stats: dict) -> tuple:
    """A stage's stats.json in chain order: a multi-source run's sources' chains (by name), then
    its tail."""
    return (stats.get("source") is None and "source" in stats, stats.get("source") or "", stats["position"])


def counts_by_source(named_markers) -> dict:
    """{source: {docs_in, docs_out, removed: {reason: n}}} from (shard name, marker) pairs."""
    out: dict = {}
    for name, m in named_markers:
        entry = out.setdefault(source_of_shard(name), {"docs_in": 0, "docs_out": 0, "removed": Counter()})
        entry["docs_in"] += m["docs_in"]
        entry["docs_out"] += m["docs_out"]
        entry["removed"].update(m["removed"])
    return {src: {**e, "removed": dict(sorted(e["removed"].items()))} for src, e in sorted(out.items())}


def purge_documents(folder, why: str, keep: tuple[str, ...] = (STATS, "removed")) -> None:
    """A finished stage folder loses its documents after the run: _SUCCESS goes first (a purge
    cut short leaves a stage that reruns), everything but `keep` next, then _PURGED with `why`
    (one line: why they went and how to keep them), so the next run reruns the stage."""
    folder = as_run_path(folder)
    (folder / SUCCESS).unlink(missing_ok=True)
    for entry in folder.iterdir():
        if entry.name not in keep and entry.name != PURGED:
            entry.rmtree()
    if not (folder / PURGED).exists():
        (folder / PURGED).write_text(why.rstrip("\n") + "\n", encoding="utf-8")


def purge_note(folder) -> str:
    """Why a purged stage folder has no documents (the line purge_documents wrote)."""
    return (as_run_path(folder) / PURGED).read_text(encoding="utf-8").strip()
