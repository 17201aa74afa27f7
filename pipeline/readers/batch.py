"""What every reader yields: batches of documents with the records set aside beside them."""
from __future__ import annotations

from dataclasses import dataclass, field

import pyarrow as pa


@dataclass
class ReaderBatch:
    table: pa.Table                                      # documents: id, text, extras
    set_aside: list[tuple[str, str]] = field(default_factory=list)   # (id or file:line, reason)


class RowBatcher:
    """Collects rows (dicts) into Arrow batches with a fixed schema."""

    def __init__(self, schema: pa.Schema, batch_size: int):
        self.schema = schema
        self.batch_size = batch_size
        self.rows: list[dict] = []
        self.set_aside: list[tuple[str, str]] = []

    def add(self, row: dict) -> ReaderBatch | None:
        self.rows.append(row)
        return self.flush() if len(self.rows) >= self.batch_size else None

    def aside(self, where: str, reason: str) -> None:
        self.set_aside.append((where, reason))

    def each(self, rows):
        """Batches of `rows` (dicts) as they fill, then the last one: a reader's whole loop
        (what the row generator sets aside meanwhile travels with the next batch)."""
        for row in rows:
            out = self.add(row)
            if out:
                yield out
        out = self.flush()
        if out:
            yield out

    def flush(self) -> ReaderBatch | None:
        if not self.rows and not self.set_aside:
            return None
        batch = ReaderBatch(pa.Table.from_pylist(self.rows, schema=self.schema), self.set_aside)
        self.rows, self.set_aside = [], []
        return batch
