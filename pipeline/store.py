"""Stage folders on disk: Arrow shards, removed/, stats.json, _SUCCESS, atomic by rename.

The shard contract (the same for every executor): the unit of work is an input shard, and
shard NAME of a stage's input becomes data/NAME.arrow and removed/NAME.arrow of its output,
so file names and bytes do not depend on which worker ran a shard or in what order. A
finished shard leaves a marker, shards/NAME.json (its counts), written after its files.

A stage writes into `<folder>.tmp` (with the fingerprint it runs under in _FINGERPRINT),
then writes stats.json and _SUCCESS, then renames the folder into place. A stage killed
midway leaves the .tmp folder: the next run with the same fingerprint keeps the shards that
have a marker and does the rest; with another fingerprint it starts over.

This module is the one reader of the shard format (`read_shard`, `stage_shards`,
`read_table`): runner, stages, report and tests go through it.
"""
from __future__ import annotations

import json
import os
import shutil
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from pipeline.documents import DUPLICATE_OF, REASON, REMOVED_SCHEMA, REMOVED_SCHEMA_WITH_TEXT

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


def write_json(path: Path, obj) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(obj, indent=2, sort_keys=True, ensure_ascii=False) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def read_json(path: Path):
    return json.loads(Path(path).read_text(encoding="utf-8"))


def is_done(folder: Path) -> bool:
    return (folder / SUCCESS).exists()


def is_purged(folder: Path) -> bool:
    return (folder / PURGED).exists()


def shards(folder: Path, sub: str = "data") -> list[Path]:
    return sorted((Path(folder) / sub).glob("*.arrow"))


def read_shard(path: Path, batch_size: int | None = None, columns: list[str] | None = None):
    """Tables of one Arrow IPC stream shard, `batch_size` rows at most (None: as stored)."""
    with pa.OSFile(str(path), "rb") as src:
        reader = pa.ipc.open_stream(src)
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


def shard_schema(path: Path) -> pa.Schema:
    with pa.OSFile(str(path), "rb") as src:
        return pa.ipc.open_stream(src).schema


def read_table(folder: Path, sub: str = "data", columns: list[str] | None = None) -> pa.Table | None:
    """All shards of a stage folder's data/ (or removed/) as one table, in shard order."""
    tables = [t for f in shards(folder, sub) for t in read_shard(f, None, columns)]
    return pa.concat_tables(tables) if tables else None


def stage_shards(folder: Path) -> list[tuple[str, Path, int | None]]:
    """(name, data file, rows) of a finished stage's output shards, in name order."""
    folder = Path(folder)
    out = []
    for f in shards(folder):
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
    depend on how rows arrived), under a temp name renamed into place by close()."""

    def __init__(self, path: Path, schema: pa.Schema | None):
        self.path = Path(path)
        self.tmp = self.path.with_name(self.path.name + ".tmp")
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
            self.tmp.parent.mkdir(parents=True, exist_ok=True)
            self.sink = pa.OSFile(str(self.tmp), "wb")
            self.writer = pa.ipc.new_stream(self.sink, self.schema)

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
        os.replace(self.tmp, self.path)


class ShardFiles:
    """One shard's output: kept rows to data/NAME.arrow, removed rows (id, reason,
    duplicate_of) to removed/NAME.arrow, then its marker shards/NAME.json, last."""

    def __init__(self, folder: Path, name: str, *, keep_removed_text: bool, schema: pa.Schema | None = None):
        self.folder = Path(folder)
        self.name = name
        self.keep_removed_text = keep_removed_text
        self.data = ArrowFile(self.folder / "data" / f"{name}.arrow", schema)
        self.removed = ArrowFile(self.folder / "removed" / f"{name}.arrow",
                                 REMOVED_SCHEMA_WITH_TEXT if keep_removed_text else REMOVED_SCHEMA)
        self.docs_in = 0
        self.reasons: Counter = Counter()

    def write(self, table: pa.Table) -> None:
        """Route a processed batch: rows with a reason go to removed/, the rest to data/."""
        self.docs_in += table.num_rows
        if REASON not in table.column_names:
            self.data.write(table.drop_columns([c for c in table.column_names if c.startswith("_")]))
            return
        reason = table[REASON]
        removed_mask = pc.is_valid(reason)
        n_removed = pc.sum(removed_mask).as_py() or 0
        kept = table.filter(pc.invert(removed_mask)) if n_removed else table
        # Private columns (reason, duplicate_of, the phi stage's original id) never reach data/.
        self.data.write(kept.drop_columns([c for c in kept.column_names if c.startswith("_")]))
        if n_removed:
            self._write_removed(table.filter(removed_mask))

    def _write_removed(self, removed: pa.Table) -> None:
        n = removed.num_rows
        dup = removed[DUPLICATE_OF] if DUPLICATE_OF in removed.column_names else pa.nulls(n, pa.string())
        cols = {"id": removed["id"], "reason": removed[REASON], "duplicate_of": dup}
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
        (self.folder / MARKERS).mkdir(exist_ok=True)
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

    def __init__(self, folder: Path, schema: pa.Schema | None, shard_size: int, prefix: str = ""):
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
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
    """The folder one stage writes, shard by shard. Document stages' shards are written by
    workers (ShardFiles, then a marker); here, the driver commits them. Global stages write
    through `write`, into the shard `begin_shard` named (their StageInputs calls it as each
    input shard starts), so their output keeps the input's shard names as well."""

    def __init__(self, folder: Path, *, shard_size: int, keep_removed_text: bool, fingerprint: str | None = None):
        self.final = Path(folder)
        self.tmp = self.final.with_name(self.final.name + ".tmp")
        self.shard_size = shard_size
        self.keep_removed_text = keep_removed_text
        if self.tmp.exists():
            resumable = fingerprint is not None and (self.tmp / FINGERPRINT).exists() and \
                (self.tmp / FINGERPRINT).read_text() == fingerprint
            if not resumable:
                shutil.rmtree(self.tmp)          # left by an interrupted run of another config
        self.tmp.mkdir(parents=True, exist_ok=True)
        (self.tmp / FINGERPRINT).write_text(fingerprint or "")
        self.schema: pa.Schema | None = None
        self.current: ShardFiles | None = None
        self.current_name: str | None = None
        self.pending_aside: dict[str, list] = {}
        self.shard_stats: dict[str, dict] = {}

    @property
    def folder(self) -> Path:
        """Where the stage may put extra files (inside the temp folder until commit)."""
        return self.tmp

    def done_shards(self) -> set[str]:
        return {p.stem for p in (self.tmp / MARKERS).glob("*.json")}

    # -- global stages: writes on the driver, into the current shard --
    def begin_shard(self, name: str) -> None:
        if self.current is not None and self.current.name != name:
            self._close_current()
        self.current_name = name

    def _open(self) -> ShardFiles:
        name = self.current_name or "00000"
        if self.current is None:
            if (self.tmp / MARKERS / f"{name}.json").exists():
                raise RuntimeError(f"{self.final.name}: shard {name} written twice")
            self.current = ShardFiles(self.tmp, name, keep_removed_text=self.keep_removed_text, schema=self.schema)
            self.current.set_aside(self.pending_aside.pop(name, []))
        return self.current

    def _close_current(self) -> None:
        if self.current is not None:
            self.schema = self.current.data.schema or self.schema
            self.current.close(self.shard_stats.pop(self.current.name, None))
            self.current = None

    def write(self, table: pa.Table) -> None:
        self._open().write(table)
        self.schema = self.current.data.schema

    def set_aside(self, rows: list[tuple[str, str]]) -> None:
        """Set-aside records of the current shard: written before its documents' removed rows."""
        if not rows:
            return
        if self.current is not None:
            self.current.set_aside(rows)
        else:
            self.pending_aside.setdefault(self.current_name or "00000", []).extend(rows)

    def finish_shards(self, names: list[str], schema: pa.Schema | None = None) -> None:
        """Every input shard has its output files: shards no row was written to are empty."""
        self._close_current()
        done = self.done_shards()
        for name in names:
            if name not in done:
                self.current_name = name
                f = ShardFiles(self.tmp, name, keep_removed_text=self.keep_removed_text, schema=self.schema or schema)
                f.set_aside(self.pending_aside.pop(name, []))
                f.close()

    def commit(self, stats: dict, input_shards: list[str] | None = None) -> dict:
        self._close_current()
        if input_shards is not None:
            self.finish_shards(input_shards)
        elif not self.done_shards():
            self.finish_shards(["00000"])
        markers = [read_json(p) for p in sorted((self.tmp / MARKERS).glob("*.json"))]
        reasons: Counter = Counter()
        for m in markers:
            reasons.update(m["removed"])
        stats = {"docs_in": sum(m["docs_in"] for m in markers), "docs_out": sum(m["docs_out"] for m in markers),
                 "removed": dict(sorted(reasons.items())), "shards": len(markers), **stats}
        removed_total = sum(reasons.values())
        if stats["docs_in"] != stats["docs_out"] + removed_total:
            raise RuntimeError(f"{self.final.name}: accounting broken: in {stats['docs_in']} != "
                               f"out {stats['docs_out']} + removed {removed_total}")
        for leftover in ("input", FINGERPRINT):
            path = self.tmp / leftover
            if path.is_dir():
                shutil.rmtree(path)
            elif path.exists():
                path.unlink()
        write_json(self.tmp / STATS, stats)
        (self.tmp / SUCCESS).write_text("")
        if self.final.exists():
            shutil.rmtree(self.final)
        os.replace(self.tmp, self.final)
        return stats

    def abort(self) -> None:
        if self.current is not None:
            self.current.abort()
            self.current = None
