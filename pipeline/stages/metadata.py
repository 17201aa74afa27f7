"""metadata: rules over the documents' own columns, no model. What the source says about a
record decides, not its text: a retracted paper, the notice that retracts one, an erratum
(`retraction`, from the MEDLINE reader), an article language not wanted (`language`), a study
of animals only (`mesh`: "Animals" without "Humans"), a full text whose licence is not wanted
(`license`, from the JATS reader). Each rule is a removal reason of its own.

A rule needs its column: where a document has none (clinical notes, JSON Lines without such a
field) or holds a null there (an empty `language` too), that rule keeps it; except `license`,
where a null means no open licence was stated, which is a reason to remove. `stats.json` counts,
per rule, the documents it could not check (`unchecked`)."""
from __future__ import annotations

from typing import Annotated

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pydantic import Field, StringConstraints

from pipeline.documents import first_reason
from pipeline.errors import UserError
from pipeline.stages.base import DocumentStage, StageConfig


class MetadataConfig(StageConfig):
    drop_retracted: bool = True             # retraction == "retracted": removed as `retracted`
    drop_retraction_notices: bool = True    # retraction == "retraction_notice": `retraction_notice`
    drop_errata: bool = True                # retraction == "erratum": `erratum`
    # Values of the `language` column to keep (MEDLINE: the article's language, three letters:
    # "eng"); other values go as `language`. None: every language is kept.
    languages: list[Annotated[str, StringConstraints(strip_whitespace=True, min_length=1)]] | None = \
        Field(default=None, min_length=1)
    drop_animal_only: bool = False          # MeSH "Animals" and no "Humans": `animal_only`
    # Licence families to keep (the JATS reader's `license`: cc-by, cc-by-nc, cc0, public-domain,
    # ...); others go as `license`, and so does a null there: no open licence stated.
    licenses: list[Annotated[str, StringConstraints(strip_whitespace=True, min_length=1)]] | None = \
        Field(default=None, min_length=1)


# (option, reason, the value of the `retraction` column it removes), in the order rules apply.
RETRACTION_RULES = (
    ("drop_retracted", "retracted", "retracted"),
    ("drop_retraction_notices", "retraction_notice", "retraction_notice"),
    ("drop_errata", "erratum", "erratum"),
)


def _strings(table: pa.Table, name: str):
    """The column as strings, or None where the batch has no such column."""
    if name not in table.column_names:
        return None
    column = table[name]
    kind = column.type
    if pa.types.is_dictionary(kind):
        kind = kind.value_type
    if not (pa.types.is_string(kind) or pa.types.is_large_string(kind) or pa.types.is_null(kind)):
        raise UserError(f"metadata: column '{name}' is {column.type}, not a string column")
    return column.cast(pa.string())


def _string_lists(table: pa.Table, name: str):
    """The column as one list<string> array, or None where the batch has no such column."""
    if name not in table.column_names:
        return None
    column = table[name]
    kind = column.type
    ok = pa.types.is_null(kind) or (
        (pa.types.is_list(kind) or pa.types.is_large_list(kind))
        and (pa.types.is_string(kind.value_type) or pa.types.is_large_string(kind.value_type)))
    if not ok:
        raise UserError(f"metadata: column '{name}' is {column.type}, not a list of strings")
    return column.cast(pa.list_(pa.string())).combine_chunks()


def _holds(lists: pa.Array, value: str) -> np.ndarray:
    """Per row, whether its list holds `value` (a null list holds nothing), without a loop."""
    found = np.zeros(len(lists), dtype=bool)
    rows = pc.filter(pc.list_parent_indices(lists), pc.equal(pc.list_flatten(lists), value))
    found[rows.to_numpy(zero_copy_only=False)] = True
    return found


class Metadata(DocumentStage):
    name = "metadata"
    summary = ("rules over the input's columns: retracted papers, retraction notices, errata, language, animal-only, "
               "licence")
    Config = MetadataConfig

    def rules(self, table: pa.Table) -> list[tuple[str, object]]:
        """(reason, mask) of every rule that is on and whose column the batch has."""
        cfg = self.config
        rules = []
        retraction = _strings(table, "retraction")
        if retraction is not None:
            rules += [(reason, pc.equal(retraction, value)) for option, reason, value in RETRACTION_RULES
                      if getattr(cfg, option)]
        if cfg.languages is not None:
            language = _strings(table, "language")
            if language is not None:
                known = pc.and_(pc.is_valid(language), pc.not_equal(language, ""))
                rules.append(("language", pc.and_(known, pc.invert(pc.is_in(language, pa.array(cfg.languages))))))
        if cfg.drop_animal_only:
            mesh = _string_lists(table, "mesh")
            if mesh is not None:
                rules.append(("animal_only", pa.array(_holds(mesh, "Animals") & ~_holds(mesh, "Humans"))))
        if cfg.licenses is not None:
            licence = _strings(table, "license")
            if licence is not None:
                rules.append(("license", pc.invert(pc.fill_null(pc.is_in(licence, pa.array(cfg.licenses)), False))))
        return [(reason, pc.fill_null(mask, False)) for reason, mask in rules]

    def process(self, table: pa.Table) -> pa.Table:
        return first_reason(table, self.rules(table))

    def batch_stats(self, table: pa.Table) -> dict:
        """Per rule that is on, the documents it could not check: no column, or a null (or
        empty language) there. A null `retraction` is a record with none: checked."""
        n, cfg = table.num_rows, self.config
        unchecked = {}
        if any(getattr(cfg, option) for option, _, _ in RETRACTION_RULES) and "retraction" not in table.column_names:
            unchecked["retraction"] = n
        if cfg.languages is not None:
            language = _strings(table, "language")
            known = 0 if language is None else \
                pc.sum(pc.fill_null(pc.not_equal(language, ""), False).cast(pa.int64())).as_py() or 0
            unchecked["language"] = n - known
        if cfg.drop_animal_only:
            mesh = _string_lists(table, "mesh")
            unchecked["mesh"] = n if mesh is None else mesh.null_count
        if cfg.licenses is not None and "license" not in table.column_names:
            unchecked["license"] = n
        return {f"unchecked.{k}": v for k, v in unchecked.items() if v}

    def finish_stats(self, totals: dict, inputs) -> dict:
        unchecked = {k.split(".", 1)[1]: v for k, v in totals.items() if k.startswith("unchecked.")}
        return {"unchecked": dict(sorted(unchecked.items()))}

    def report_section(self, stats, run):
        from pipeline.sections import Section, table
        cfg = self.config
        removed, unchecked = stats.get("removed", {}), stats.get("unchecked", {})
        # (reason, option as set, what it removes, whether it is on, the column it reads)
        rules = [(reason, f"{option}: {str(getattr(cfg, option)).lower()}", f"retraction = {value}",
                  getattr(cfg, option), "retraction") for option, reason, value in RETRACTION_RULES]
        rules.append(("language", f"languages: {', '.join(cfg.languages) if cfg.languages else 'all'}",
                      "language not listed", cfg.languages is not None, "language"))
        rules.append(("animal_only", f"drop_animal_only: {str(cfg.drop_animal_only).lower()}",
                      "mesh has Animals, not Humans", cfg.drop_animal_only, "mesh"))
        rules.append(("license", f"licenses: {', '.join(cfg.licenses) if cfg.licenses else 'all'}",
                      "license not listed (or none stated)", cfg.licenses is not None, "license"))
        body = ("<p>Rules over the documents' own columns (MEDLINE's metadata), one removal reason each. "
                "A document without a rule's column, or with a null there, is kept by that rule "
                "(unchecked).</p>")
        body += table(["reason", "option", "removes", "removed", "unchecked"],
                      [[reason, option, what, f"{removed.get(reason, 0):,}" if on else "-",
                        f"{unchecked.get(column, 0):,}" if on else "-"] for reason, option, what, on, column in rules])
        counts = {reason: removed.get(reason, 0) for reason, *_ in rules}
        return Section("Metadata rules", body, figures={"metadata_removed": counts})
