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


def write_marked_duplicates(tables, output, rep_of_row, reason: str) -> None:
    """Stream the input once more and write it: a row whose representative (rep_of_row[row],
    an earlier row in input order) is another row is removed with `reason` and `duplicate_of`
    set to the representative's id. Only representatives that have duplicates keep their id."""
    import numpy as np

    has_dups = np.bincount(rep_of_row, minlength=len(rep_of_row)) > 1
    ids_of_rep: dict[int, str] = {}
    row0 = 0
    for table in tables:
        m = table.num_rows
        reps = rep_of_row[row0:row0 + m]
        is_dup = reps != np.arange(row0, row0 + m)
        ids = table["id"]
        for i in np.flatnonzero(has_dups[row0:row0 + m]):
            ids_of_rep[row0 + int(i)] = ids[int(i)].as_py()
        if is_dup.any():
            dup_of = [ids_of_rep[int(r)] if d else None for r, d in zip(reps, is_dup)]
            table = table.append_column(REASON, pa.array(np.where(is_dup, reason, None), pa.string()))
            table = table.append_column(DUPLICATE_OF, pa.array(dup_of, pa.string()))
        output.write(table)
        row0 += m
