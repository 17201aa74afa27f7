"""The document schema (id, text, extra columns) and Arrow batch helpers."""
from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

ID = "id"
TEXT = "text"
# A multi-source run's column naming each document's source (docs/sources.md).
SOURCE = "source"
# Column a stage sets to a removal reason; null means the document is kept.
REASON = "_reason"
# Column a dedup stage sets to the id of the document a removed one duplicates.
DUPLICATE_OF = "_duplicate_of"

# Column a dedup stage sets, in a multi-source run, to the source of the document kept.
DUPLICATE_OF_SOURCE = "_duplicate_of_source"

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


def source_of_shard(name: str) -> str | None:
    """The source a shard of a multi-source run comes from (its name is SOURCE.K), else None."""
    return name.split(".", 1)[0] if "." in name else None


def row_sources(inputs) -> list[str | None]:
    """The source of each input shard (a multi-source run's), in shard order."""
    return [source_of_shard(shard.name) for shard in inputs.shards]


def priority_problems(priority: list[str] | None, sources: list[str]) -> list[str]:
    """A dedup stage's `priority` against the run's sources (for Stage.source_problems)."""
    if not priority:
        return []
    if not sources:
        return ["priority: says whose copy survives among sources, but the config has one input (no sources:)"]
    unknown = [p for p in priority if p not in sources]
    if unknown:
        return [f"priority: unknown source {', '.join(map(repr, unknown))} (sources: {', '.join(sources)})"]
    if len(set(priority)) != len(priority):
        return ["priority: a source is listed twice"]
    return []


def by_priority(inputs, rep_of_row, priority: list[str] | None):
    """Each row's representative chosen again within its group (the rows sharing one) by the
    sources' `priority`: the first row, in input order, of the highest-priority source present
    (a source not named ranks after those named). Without a priority: as given."""
    import numpy as np
    if not priority or not len(rep_of_row):
        return rep_of_row
    rank_of = {name: i for i, name in enumerate(priority)}
    sizes = [shard.rows for shard in inputs.shards]
    rank = np.repeat(np.asarray([rank_of.get(src, len(priority)) for src in row_sources(inputs)], np.int64), sizes)
    rows = np.arange(len(rep_of_row))
    order = np.lexsort((rows, rank, rep_of_row))
    group = rep_of_row[order]
    first = np.concatenate([[True], group[1:] != group[:-1]])
    best_of_group = np.empty(len(rep_of_row), np.int64)
    best_of_group[group[first]] = order[first]
    return best_of_group[rep_of_row]


def mark_duplicates(stage, inputs, rep_of_row, reason: str, reason_of_row=None) -> None:
    """Write every output shard (on the executor): a row whose representative (rep_of_row[row],
    an earlier row in input order, global numbering) is another row is removed with `reason`
    (or, where `reason_of_row` holds one, that row's own) and `duplicate_of` set to the
    representative's id. The ids of representatives that have duplicates are asked of the
    shards that hold them, then each shard gets its marks."""
    import numpy as np

    n = len(rep_of_row)
    offsets = np.asarray(inputs.row_offsets() + [n], np.int64)
    spans = list(zip(offsets[:-1].tolist(), offsets[1:].tolist()))
    reps = np.flatnonzero(np.bincount(rep_of_row, minlength=n) > 1) if n else np.zeros(0, np.int64)
    asked = [{"rows": (reps[(reps >= lo) & (reps < hi)] - lo).tolist()} for lo, hi in spans]
    found = inputs.map(stage.ids_of_rows, asked)
    id_of = dict(zip(reps.tolist(), [i for r in found for i in r["ids"]]))
    dups = np.flatnonzero(rep_of_row != np.arange(n))
    sources = row_sources(inputs)
    marks = []
    for lo, hi in spans:
        rows = dups[(dups >= lo) & (dups < hi)]
        marks.append({"removed_rows": (rows - lo).tolist(), "duplicate_of": [id_of[int(r)] for r in rep_of_row[rows]],
                      "reason": reason})
        if reason_of_row is not None:
            marks[-1]["reasons"] = [r or reason for r in reason_of_row[rows].tolist()]
        if any(sources):
            # A multi-source run: the source of the document each one duplicates.
            shard_of = np.searchsorted(offsets, rep_of_row[rows], side="right") - 1
            marks[-1]["duplicate_of_source"] = [sources[i] for i in shard_of.tolist()]
    inputs.map(stage.apply_marks, marks)


def split_words(arr):
    """pc.utf8_split_whitespace, made deterministic. pyarrow 26 sometimes reads past a string
    that ends in whitespace and returns a stray token for it (found when Ray and local runs
    differed by one word in one document); trimming first gives the same words without that."""
    import pyarrow.compute as pc
    return pc.utf8_split_whitespace(pc.utf8_trim_whitespace(arr))
