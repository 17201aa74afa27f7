"""python -m pipeline inspect RUN: what a run removed, and why.

`--summary`: the funnel (per stage: in, out, removed by reason), from the stages' stats.json.
Otherwise the removed documents of a stage and reason (removed/*.arrow): id, reason,
duplicate_of, the stage's score columns and, where the run still holds it, the text.

Where scores come from: a filter stage stores its score columns for every input row
(cache/scores/..., named in its stats' cache_keys), found through the document's row in the
stage's input shard (the previous stage's data/NAME.arrow); a stage that stores none but
declares annotation columns (a rule filter) has them recomputed for the listed documents only,
with the stage's own code and the run's options. Texts: removed/ holds them with
keep_removed_text; otherwise the stage's input shard, while the run folder keeps it (keep: all).

Privacy: the documents of a stage that says they are private (its `privacy()`'s
`private_documents`: a de-identification stage with the clinical profile) and of every stage
before it in its chain are never shown (their texts, ids and fields are raw PHI, or pseudonyms
of them): asking for them is refused with one line; `--summary` gives their counts.
"""
from __future__ import annotations

import json
import re

import pyarrow as pa
import pyarrow.compute as pc

from pipeline.errors import UserError
from pipeline.finished_run import FinishedRun, FinishedStage
from pipeline.runpath import RunPath
from pipeline.shards import is_purged, read_shard, shard_paths

PREVIEW_CHARS = 300


def _command(run_dir, *args) -> str:
    return " ".join(["python -m pipeline inspect", str(run_dir), *args])


def _refusal(run: FinishedRun, s: FinishedStage) -> str:
    return (
        f"{run.dir}: stage '{s.label}' runs at or before its chain's clinical de-identification: its removed documents "
        f"hold PHI (or pseudonyms of their ids) and are not shown; '{_command(run.dir, '--summary')}' "
        "gives its counts by reason"
    )


def summary(run_dir) -> dict:
    run = FinishedRun(run_dir)
    return {
        "run": str(run.dir),
        "medprep": (run.manifest.get("versions") or {}).get("medprep"),
        "docs_read": run.docs_read,
        "docs_kept": run.docs_kept,
        "stages": [
            {
                "stage": s.label,
                "position": s.position,
                "docs_in": s.stats["docs_in"],
                "docs_out": s.stats["docs_out"],
                "removed": dict(s.stats["removed"]),
            }
            for s in run.stages
        ],
    }


def format_summary(data: dict) -> str:
    width = max(len(s["stage"]) for s in data["stages"]) + 3
    lines = [
        f"{data['run']}: {data['docs_read']:,} documents read, {data['docs_kept']:,} kept"
        + (f" (medprep {data['medprep']})" if data.get("medprep") else ""),
        f"{'stage':<{width}} {'in':>9} {'out':>9} {'removed':>9}  by reason",
    ]
    for s in data["stages"]:
        reasons = ", ".join(f"{r}: {n:,}" for r, n in sorted(s["removed"].items(), key=lambda kv: (-kv[1], kv[0])))
        lines.append(
            f"{s['position']:02d} {s['stage']:<{width - 3}} {s['docs_in']:>9,} {s['docs_out']:>9,} "
            f"{sum(s['removed'].values()):>9,}  {reasons or '-'}"
        )
    return "\n".join(lines)


def _quotas(sizes: list[int], limit: int) -> list[int]:
    """`limit` documents shared across groups of the given sizes, in turn, one at a time."""
    quotas = [0] * len(sizes)
    left = limit
    while left > 0 and any(q < n for q, n in zip(quotas, sizes)):
        for i, n in enumerate(sizes):
            if left and quotas[i] < n:
                quotas[i] += 1
                left -= 1
    return quotas


def _select(
    run: FinishedRun, stage: str | None, reason: str | None
) -> tuple[list[tuple[FinishedStage, str, int]], list[str]]:
    """(stage, reason, count) groups to list, and notes about stages left out."""
    chosen = run.find(stage) if stage is not None else run.stages
    if reason is not None:
        having = [s for s in chosen if reason in s.stats["removed"]]
        if not having:
            known = sorted({r for s in chosen for r in s.stats["removed"]})
            where = f"stage '{stage}'" if stage else "this run"
            raise UserError(
                f"{run.dir}: no document was removed as '{reason}' in {where} (reasons: {', '.join(known) or 'none'})"
            )
        chosen = having
    private = [s for s in chosen if run.is_private(s)]
    if private and len(private) == len(chosen):
        raise UserError(_refusal(run, private[0]))
    notes = [
        f"not shown: stage '{s.label}' runs at or before its chain's clinical de-identification (counts: "
        f"{_command(run.dir, '--summary')})"
        for s in private
        if s.stats["removed"]
    ]
    groups = [
        (s, r, n)
        for s in chosen
        if s not in private
        for r, n in sorted(s.stats["removed"].items())
        if reason is None or r == reason
    ]
    return groups, notes


def _removed_rows(s: FinishedStage, reason: str, count: int) -> list[dict]:
    """The first `count` removed rows of a reason, in shard order, with their shard's name."""
    out = []
    for path in shard_paths(s.folder, "removed"):
        for table in read_shard(path):
            hit = table.filter(pc.equal(table["reason"], reason))
            for row in hit.slice(0, count - len(out)).to_pylist():
                out.append({**row, "_shard": path.stem})
            if len(out) >= count:
                return out
    return out


def _input_rows(run: FinishedRun, s: FinishedStage, shard: str, ids: list[str]) -> tuple[pa.Table | None, list[int]]:
    """The listed documents as the stage read them (data/NAME.arrow of the stage before it: of
    every source's last stage for a shared tail's first), texts joined in, and their rows there;
    (None, []) where that shard is no longer in the run folder."""
    for prev in run.previous(s):
        path = prev.folder / "data" / f"{shard}.arrow"
        if is_purged(prev.folder) or not path.exists():
            continue
        table = pa.concat_tables(list(read_shard(path)))
        index = {}
        for i, doc_id in enumerate(table["id"].to_pylist()):
            index.setdefault(doc_id, i)
        rows = [index.get(i, -1) for i in ids]
        found = [r for r in rows if r >= 0]
        return table.take(pa.array(found, pa.int64())), rows
    return None, []


def _stage_instance(run: FinishedRun, s: FinishedStage):
    """The stage with the run's options, for recomputing its columns (None if it cannot be built)."""
    from pipeline.stages import REGISTRY
    from pipeline.stages.base import RunContext

    if s.options is None or s.name not in REGISTRY:
        return None
    cls = REGISTRY[s.name]
    try:
        config = cls.Config.model_validate(s.options)
    except Exception:
        return None
    return cls(config, RunContext(run_dir=run.dir, seed=0))


def _attach_details(run: FinishedRun, s: FinishedStage, docs: list[dict]) -> str | None:
    """Score columns and texts for the listed documents of one stage; returns where the scores
    came from (stored, recomputed) or None."""
    from pipeline.stages import REGISTRY
    from pipeline.stages.base import DocumentStage

    cls = REGISTRY[s.name] if s.name in REGISTRY else None
    stored = next((k for k in s.stats.get("cache_keys", []) if k.startswith("cache/scores/")), None)
    cache_folder = ((run.manifest.get("config") or {}).get("cache") or {}).get("folder")
    cache_root = RunPath.of(cache_folder) if cache_folder else run.dir
    source = None
    stage = None
    by_shard: dict[str, list[dict]] = {}
    for doc in docs:
        by_shard.setdefault(doc["_shard"], []).append(doc)
    for shard, group in by_shard.items():
        table, rows = _input_rows(run, s, shard, [d["id"] for d in group])
        located = [d for d, r in zip(group, rows) if r >= 0]
        if not located:
            continue
        for i, d in enumerate(located):
            if d.get("text") is None:
                d["text"] = table["text"][i].as_py()
        if stored and cls is not None and cls.score_columns:
            path = cache_root / stored / f"{shard}.arrow"
            if path.exists():
                with path.open_stream() as src:
                    scores = pa.ipc.open_stream(src).read_all()
                picked = scores.take(pa.array([r for r in rows if r >= 0], pa.int64())).to_pylist()
                for d, row in zip(located, picked):
                    d["scores"] = row
                source = "stored"
                continue
        if cls is not None and issubclass(cls, DocumentStage) and not cls.rewrites_text and table is not None:
            stage = stage or _stage_instance(run, s)
            if stage is None:
                continue
            columns = [f.name for f in stage.output_fields()]
            if not columns:
                continue
            stage.setup()
            out = stage.process(table)
            for d, row in zip(located, out.select(columns).to_pylist()):
                d["scores"] = row
            source = "recomputed"
    return source


def removed_documents(run_dir, stage: str | None = None, reason: str | None = None, limit: int = 20) -> dict:
    if limit < 1:
        raise UserError(f"--limit {limit}: must be at least 1")
    run = FinishedRun(run_dir)
    groups, notes = _select(run, stage, reason)
    quotas = _quotas([n for _, _, n in groups], limit)
    documents = []
    for (s, r, _), q in zip(groups, quotas):
        if not q:
            continue
        docs = _removed_rows(s, r, q)
        source = _attach_details(run, s, docs)
        for d in docs:
            documents.append(
                {
                    "stage": s.label,
                    "position": s.position,
                    "reason": r,
                    "id": d["id"],
                    "duplicate_of": d.get("duplicate_of"),
                    "shard": d["_shard"],
                    "scores": d.get("scores"),
                    "scores_from": source if d.get("scores") else None,
                    "text": d.get("text"),
                }
            )
    return {
        "run": str(run.dir),
        "stage": stage,
        "reason": reason,
        "limit": limit,
        "matching": sum(n for _, _, n in groups),
        "shown": len(documents),
        "documents": documents,
        "notes": notes,
    }


def _value(v) -> str:
    return f"{v:.4g}" if isinstance(v, float) else str(v)


def format_documents(data: dict, chars: int = PREVIEW_CHARS) -> str:
    lines = [
        f"{data['shown']:,} of {data['matching']:,} removed documents"
        + (f" of stage '{data['stage']}'" if data["stage"] else "")
        + (f" with reason '{data['reason']}'" if data["reason"] else "")
    ]
    for d in data["documents"]:
        head = f"[{d['position']:02d} {d['stage']}] {d['reason']}  id={d['id']}"
        if d["duplicate_of"]:
            head += f"  duplicate_of={d['duplicate_of']}"
        lines.append(head)
        if d["scores"]:
            lines.append(
                f"    {d['scores_from']} scores: " + "  ".join(f"{k}={_value(v)}" for k, v in d["scores"].items())
            )
        if d["text"] is not None:
            text = re.sub(r"\s+", " ", d["text"]).strip()
            lines.append("    text: " + (text if chars <= 0 or len(text) <= chars else text[:chars] + " ..."))
        else:
            lines.append("    text: not in the run folder (keep_removed_text: true keeps removed texts)")
    return "\n".join(lines)


def reason_commands(run: FinishedRun) -> list[list]:
    """(stage, reason, documents, the command that lists them) for the report."""
    rows = []
    for s in run.stages:
        for r, n in sorted(s.stats["removed"].items()):
            command = (
                "not listed: at or before its chain's clinical de-identification"
                if run.is_private(s)
                else _command(run.dir, "--stage", s.label, "--reason", r)
            )
            rows.append([s.label, r, f"{n:,}", command])
    return rows


def main(args) -> None:
    """The `inspect` subcommand (its arguments parsed by the CLI)."""
    import sys

    if args.summary:
        data = summary(args.run_dir)
        print(json.dumps(data, indent=2) if args.json else format_summary(data))
        return
    data = removed_documents(args.run_dir, args.stage, args.reason, args.limit)
    for note in data["notes"]:
        print(note, file=sys.stderr)
    print(json.dumps(data, indent=2, ensure_ascii=False) if args.json else format_documents(data, args.chars))
