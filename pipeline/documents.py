"""The document schema (id, text, extra columns) and Arrow batch helpers."""
from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

ID = "id"
TEXT = "text"
# Column a stage sets to a removal reason; null means the document is kept.
REASON = "_reason"
# Column a dedup stage sets to the id of the document a removed one duplicates.
DUPLICATE_OF = "_duplicate_of"

REMOVED_SCHEMA = pa.schema([("id", pa.string()), ("reason", pa.string()), ("duplicate_of", pa.string())])
REMOVED_SCHEMA_WITH_TEXT = REMOVED_SCHEMA.append(pa.field("text", pa.string()))


def with_reason(table: pa.Table, reason: pa.Array | pa.ChunkedArray) -> pa.Table:
    """Set the removal-reason column, keeping an earlier reason where one is set."""
    if REASON in table.column_names:
        reason = pc.coalesce(table[REASON], reason)
        return table.set_column(table.column_names.index(REASON), REASON, reason)
    return table.append_column(REASON, reason)


def reasons_where(mask, reason: str, n: int) -> pa.Array:
    """A string array holding `reason` where mask is true and null elsewhere."""
    return pc.if_else(mask, pa.scalar(reason, pa.string()), pa.nulls(n, pa.string()))


def first_reason(table: pa.Table, rules: list[tuple[str, object]]) -> pa.Table:
    """Apply rules in order: a document gets the reason of the first rule it fails."""
    n = table.num_rows
    reason = pa.nulls(n, pa.string())
    for name, mask in rules:
        reason = pc.coalesce(reason, reasons_where(mask, name, n))
    return with_reason(table, reason)


def set_column(table: pa.Table, name: str, values) -> pa.Table:
    if name in table.column_names:
        return table.set_column(table.column_names.index(name), name, values)
    return table.append_column(name, values)
