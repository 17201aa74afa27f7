"""Stage folders on disk: Arrow shards, removed/, stats.json, _SUCCESS, atomic by rename.

A stage writes into `<folder>.tmp`, then writes stats.json and _SUCCESS, then renames the
folder into place. A stage killed midway leaves only the .tmp folder, which the next run
deletes: a stage without _SUCCESS is rerun from scratch.
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


class ShardWriter:
    """Writes tables into numbered Arrow IPC stream shards of at most `shard_size` rows."""

    def __init__(self, folder: Path, schema: pa.Schema | None, shard_size: int, prefix: str = ""):
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        self.schema = schema
        self.shard_size = shard_size
        self.prefix = prefix
        self.pending: list[pa.Table] = []
        self.pending_rows = 0
        self.shard_index = 0
        self.rows_in_shard = 0
        self.sink = None
        self.writer = None
        self.rows = 0

    def write(self, table: pa.Table) -> None:
        if table.num_rows == 0:
            return
        if self.schema is None:
            self.schema = table.schema
        if table.schema.names != self.schema.names:
            table = self._conform(table)
        try:
            table = table.cast(self.schema)
        except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError):
            # Arrow's message quotes the value that failed to convert: a document's field,
            # possibly PHI. Name the columns and types instead.
            from pipeline.errors import UserError
            bad = [f"{f.name} ({table.schema.field(f.name).type} vs {f.type})" for f in self.schema
                   if table.schema.field(f.name).type != f.type]
            raise UserError(f"{self.folder}: column types differ from the first batch's: {', '.join(bad)}; "
                            "input files must have the same column types") from None
        self.pending.append(table)
        self.pending_rows += table.num_rows
        while self.pending_rows >= WRITE_CHUNK:
            self._emit(WRITE_CHUNK)

    def _conform(self, table: pa.Table) -> pa.Table:
        """A batch with other columns than the shard schema: a column the schema lacks would be
        lost, so it is an error; a schema column the batch lacks is null in it."""
        extra = [c for c in table.column_names if c not in self.schema.names]
        if extra:
            from pipeline.errors import UserError
            raise UserError(f"{self.folder}: column {', '.join(repr(c) for c in extra)} is not in the columns "
                            f"of the first batch ({', '.join(self.schema.names)}); input files must have "
                            "the same columns")
        n = table.num_rows
        return pa.table([table[f.name] if f.name in table.column_names else pa.nulls(n, f.type)
                         for f in self.schema], names=self.schema.names)

    def _emit(self, n: int) -> None:
        buf = pa.concat_tables(self.pending)
        chunk, rest = buf.slice(0, n), buf.slice(n)
        self.pending = [rest] if rest.num_rows else []
        self.pending_rows = rest.num_rows
        while chunk.num_rows:
            if self.writer is None:
                path = self.folder / f"{self.prefix}{self.shard_index:05d}.arrow"
                self.sink = pa.OSFile(str(path), "wb")
                self.writer = pa.ipc.new_stream(self.sink, self.schema)
            room = self.shard_size - self.rows_in_shard
            part, chunk = chunk.slice(0, room), chunk.slice(room)
            for batch in part.combine_chunks().to_batches():
                self.writer.write_batch(batch)
            self.rows_in_shard += part.num_rows
            self.rows += part.num_rows
            if self.rows_in_shard >= self.shard_size:
                self._close_shard()

    def _close_shard(self) -> None:
        if self.writer is not None:
            self.writer.close()
            self.sink.close()
            self.writer = self.sink = None
            self.shard_index += 1
            self.rows_in_shard = 0

    def close(self) -> None:
        if self.pending_rows:
            self._emit(self.pending_rows)
        self._close_shard()


class StageOutput:
    """The folder one stage writes: kept documents, removed rows with reasons, and stats."""

    def __init__(self, folder: Path, *, shard_size: int, keep_removed_text: bool):
        self.final = Path(folder)
        self.tmp = self.final.with_name(self.final.name + ".tmp")
        if self.tmp.exists():
            shutil.rmtree(self.tmp)          # left by an interrupted run
        self.tmp.mkdir(parents=True)
        self.keep_removed_text = keep_removed_text
        self.data = ShardWriter(self.tmp / "data", None, shard_size)
        self.removed = ShardWriter(self.tmp / "removed", REMOVED_SCHEMA_WITH_TEXT if keep_removed_text
                                   else REMOVED_SCHEMA, shard_size)
        self.docs_in = 0
        self.reasons: Counter = Counter()

    @property
    def folder(self) -> Path:
        """Where the stage may put extra files (inside the temp folder until commit)."""
        return self.tmp

    def set_schema(self, schema: pa.Schema) -> None:
        self.data.schema = schema

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
        drop = [c for c in kept.column_names if c.startswith("_")]
        self.data.write(kept.drop_columns(drop))
        if n_removed:
            removed = table.filter(removed_mask)
            self._write_removed(removed)

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
        t = pa.table({"id": pa.array(ids, pa.string()), REASON: pa.array(reasons, pa.string())})
        self._write_removed(t)

    def commit(self, stats: dict) -> dict:
        self.data.close()
        self.removed.close()
        stats = {"docs_in": self.docs_in, "docs_out": self.data.rows,
                 "removed": dict(sorted(self.reasons.items())), **stats}
        removed_total = sum(self.reasons.values())
        if stats["docs_in"] != stats["docs_out"] + removed_total:
            raise RuntimeError(f"{self.final.name}: accounting broken: in {stats['docs_in']} != "
                               f"out {stats['docs_out']} + removed {removed_total}")
        write_json(self.tmp / STATS, stats)
        (self.tmp / SUCCESS).write_text("")
        if self.final.exists():
            shutil.rmtree(self.final)
        os.replace(self.tmp, self.final)
        return stats

    def abort(self) -> None:
        for w in (self.data, self.removed):
            try:
                w.close()
            except Exception:
                pass
