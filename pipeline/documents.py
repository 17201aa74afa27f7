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


def mark_duplicates(stage, inputs, rep_of_row, reason: str) -> None:
    """Write every output shard (on the executor): a row whose representative (rep_of_row[row],
    an earlier row in input order, global numbering) is another row is removed with `reason`
    and `duplicate_of` set to the representative's id. The ids of representatives that have
    duplicates are asked of the shards that hold them, then each shard gets its marks."""
    import numpy as np

    n = len(rep_of_row)
    offsets = np.asarray(inputs.row_offsets() + [n], np.int64)
    spans = list(zip(offsets[:-1].tolist(), offsets[1:].tolist()))
    reps = np.flatnonzero(np.bincount(rep_of_row, minlength=n) > 1) if n else np.zeros(0, np.int64)
    asked = [{"rows": (reps[(reps >= lo) & (reps < hi)] - lo).tolist()} for lo, hi in spans]
    found = inputs.map(stage, "ids_of_rows", asked)
    id_of = dict(zip(reps.tolist(), [i for r in found for i in r["ids"]]))
    dups = np.flatnonzero(rep_of_row != np.arange(n))
    marks = []
    for lo, hi in spans:
        rows = dups[(dups >= lo) & (dups < hi)]
        marks.append({"removed_rows": (rows - lo).tolist(), "duplicate_of": [id_of[int(r)] for r in rep_of_row[rows]],
                      "reason": reason})
    inputs.map(stage, "apply_marks", marks)


def split_words(arr):
    """pc.utf8_split_whitespace, made deterministic. pyarrow 26 sometimes reads past a string
    that ends in whitespace and returns a stray token for it (found when Ray and local runs
    differed by one word in one document); trimming first gives the same words without that."""
    import pyarrow.compute as pc
    return pc.utf8_split_whitespace(pc.utf8_trim_whitespace(arr))
