"""python -m pipeline inspect RUN: what a run removed, and why.

`--summary`: the funnel (per stage: in, out, removed by reason), from the stages' stats.json.
Otherwise the removed documents of a stage and reason (removed/*.arrow): id, reason,
duplicate_of, the stage's score columns and, where the run still holds it, the text.

Where scores come from: a filter stage stores its score columns for every input row
(cache/scores/..., named in its stats' cache_keys), found through the document's row in the
stage's input shard (the previous stage's data/NAME.arrow); a stage that stores none but
declares annotation columns (heuristics) has them recomputed for the listed documents only,
with the stage's own code and the run's options. Texts: removed/ holds them with
keep_removed_text; otherwise the stage's input shard, while the run folder keeps it (keep: all).

Privacy: the documents of a stage that says they are private (`private_documents`: a phi stage
with the clinical profile) and of every stage before it are never shown (their texts, ids and
fields are raw PHI, or pseudonyms of them): asking for them is refused with one line;
`--summary` gives their counts.
"""
from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.compute as pc

from pipeline.errors import UserError
from pipeline.runpath import RunPath, as_run_path, read_json
from pipeline.shards import STATS, is_purged, read_shard, shard_paths

PREVIEW_CHARS = 300


def _command(run_dir, *args) -> str:
    return " ".join(["python -m pipeline inspect", str(run_dir), *args])


class Run:
    """A run folder as inspect reads it: the stages' stats in chain order and the manifest."""

    def __init__(self, run_dir):
        self.dir = as_run_path(run_dir)
        if not (self.dir / "stages").is_dir():
            raise UserError(f"{run_dir}: not a run folder (no stages/)")
        from pipeline.shards import chain_order
        self.stats = sorted((read_json(p) for p in (self.dir / "stages").glob("*/" + STATS)), key=chain_order)
        if not self.stats:
            raise UserError(f"{run_dir}: no stage has finished yet (no stages/*/stats.json)")
        manifest = self.dir / "manifest.json"
        self.manifest = read_json(manifest) if manifest.exists() else {}

    def folder(self, s: dict) -> RunPath:
        return self.dir / "stages" / s.get("folder", f"{s['position']:02d}_{s['stage']}")

    def previous(self, s: dict) -> dict | None:
        # A source's stage follows its own source's (a shared tail's first stage: the last source's).
        before = [p for p in self.stats if p["position"] < s["position"]
                  and (s.get("source") is None or p.get("source") == s.get("source"))]
        return before[-1] if before else None

    def private_until(self) -> int:
        """The last chain position whose documents inspect never shows (0: none): that of the
        last stage that says its documents and those of the stages before it are private
        (`private_documents`: phi's clinical profile)."""
        private = [s["position"] for s in self.stats if (stage := _stage_object(self, s)) is not None
                   and stage.private_documents()]
        return max(private, default=0)

    def stage_options(self, s: dict) -> dict | None:
        """The stage's options as the run's config gave them (None without a manifest)."""
        entries = (self.manifest.get("config") or {}).get("stages") or []
        if len(entries) >= s["position"]:
            entry = entries[s["position"] - 1]
            if isinstance(entry, str):
                return {}
            if isinstance(entry, dict) and s["stage"] in entry:
                return entry[s["stage"]] or {}
        return None

    def refusal(self, s: dict) -> str:
        return (f"{self.dir}: stage '{s['stage']}' runs at or before phi in a clinical run: its removed documents "
                f"hold PHI (or pseudonyms of their ids) and are not shown; '{_command(self.dir, '--summary')}' "
                "gives its counts by reason")


def summary(run_dir) -> dict:
    run = Run(run_dir)
    return {"run": str(run.dir), "medprep": (run.manifest.get("versions") or {}).get("medprep"),
            "docs_read": run.stats[0]["docs_in"], "docs_kept": run.stats[-1]["docs_out"],
            "stages": [{"stage": s["stage"], "position": s["position"], "docs_in": s["docs_in"],
                        "docs_out": s["docs_out"], "removed": dict(s["removed"])} for s in run.stats]}


def format_summary(data: dict) -> str:
    width = max(len(s["stage"]) for s in data["stages"]) + 3
    lines = [f"{data['run']}: {data['docs_read']:,} documents read, {data['docs_kept']:,} kept"
             + (f" (medprep {data['medprep']})" if data.get("medprep") else ""),
             f"{'stage':<{width}} {'in':>9} {'out':>9} {'removed':>9}  by reason"]
    for s in data["stages"]:
        reasons = ", ".join(f"{r}: {n:,}" for r, n in sorted(s["removed"].items(), key=lambda kv: (-kv[1], kv[0])))
        lines.append(f"{s['position']:02d} {s['stage']:<{width - 3}} {s['docs_in']:>9,} {s['docs_out']:>9,} "
                     f"{sum(s['removed'].values()):>9,}  {reasons or '-'}")
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


def _select(run: Run, stage: str | None, reason: str | None) -> tuple[list[tuple[dict, str, int]], list[str]]:
    """(stats, reason, count) groups to list, and notes about stages left out."""
    chosen = run.stats
    if stage is not None:
        chosen = [s for s in run.stats if stage in (s["stage"], run.folder(s).name)]
        if not chosen:
            raise UserError(f"{run.dir}: no stage '{stage}' in this run (its stages: "
                            f"{', '.join(s['stage'] for s in run.stats)})")
    if reason is not None:
        having = [s for s in chosen if reason in s["removed"]]
        if not having:
            known = sorted({r for s in chosen for r in s["removed"]})
            where = f"stage '{stage}'" if stage else "this run"
            raise UserError(f"{run.dir}: no document was removed as '{reason}' in {where} (reasons: "
                            f"{', '.join(known) or 'none'})")
        chosen = having
    limit = run.private_until()
    private = [s for s in chosen if s["position"] <= limit]
    if private and (stage is not None or len(private) == len(chosen)):
        raise UserError(run.refusal(private[0]))
    notes = [f"not shown: stage '{s['stage']}' runs at or before phi in a clinical run (counts: "
             f"{_command(run.dir, '--summary')})" for s in private if s["removed"]]
    groups = [(s, r, n) for s in chosen if s["position"] > limit
              for r, n in sorted(s["removed"].items()) if reason is None or r == reason]
    return groups, notes


def _removed_rows(run: Run, s: dict, reason: str, count: int) -> list[dict]:
    """The first `count` removed rows of a reason, in shard order, with their shard's name."""
    out = []
    for path in shard_paths(run.folder(s), "removed"):
        for table in read_shard(path):
            hit = table.filter(pc.equal(table["reason"], reason))
            for row in hit.slice(0, count - len(out)).to_pylist():
                out.append({**row, "_shard": path.stem})
            if len(out) >= count:
                return out
    return out


def _input_rows(run: Run, s: dict, shard: str, ids: list[str]) -> tuple[pa.Table | None, list[int]]:
    """The listed documents as the stage read them (the previous stage's data/NAME.arrow, texts
    joined in) and their rows there; (None, []) where that shard is no longer in the run folder."""
    prev = run.previous(s)
    if prev is None:
        return None, []
    path = run.folder(prev) / "data" / f"{shard}.arrow"
    if is_purged(run.folder(prev)) or not path.exists():
        return None, []
    table = pa.concat_tables(list(read_shard(path)))
    index = {}
    for i, doc_id in enumerate(table["id"].to_pylist()):
        index.setdefault(doc_id, i)
    rows = [index.get(i, -1) for i in ids]
    found = [r for r in rows if r >= 0]
    return table.take(pa.array(found, pa.int64())), rows


def _stage_object(run: Run, s: dict):
    """The stage of a stats entry with the run's options, or its defaults where they no longer
    validate or the run has no manifest (None for a stage this installation does not know)."""
    from pipeline.stages import REGISTRY
    if s["stage"] not in REGISTRY:
        return None
    cls = REGISTRY[s["stage"]]
    for options in (run.stage_options(s) or {}, {}):
        try:
            return cls(cls.Config.model_validate(options), None)
        except ValueError:
            continue
    return None


def _stage_instance(run: Run, s: dict):
    """The stage with the run's options, for recomputing its columns (None if it cannot be built)."""
    from pipeline.stages import REGISTRY
    from pipeline.stages.base import RunContext
    options = run.stage_options(s)
    if options is None or s["stage"] not in REGISTRY:
        return None
    cls = REGISTRY[s["stage"]]
    try:
        config = cls.Config.model_validate(options)
    except Exception:
        return None
    ctx = RunContext(run_dir=run.dir, seed=0)
    return cls(config, ctx)


def _attach_details(run: Run, s: dict, docs: list[dict]) -> str | None:
    """Score columns and texts for the listed documents of one stage; returns where the scores
    came from (stored, recomputed) or None."""
    from pipeline.stages import REGISTRY
    from pipeline.stages.base import DocumentStage
    cls = REGISTRY[s["stage"]] if s["stage"] in REGISTRY else None
    stored = next((k for k in s.get("cache_keys", []) if k.startswith("cache/scores/")), None)
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
    run = Run(run_dir)
    groups, notes = _select(run, stage, reason)
    quotas = _quotas([n for _, _, n in groups], limit)
    documents = []
    for (s, r, _), q in zip(groups, quotas):
        if not q:
            continue
        docs = _removed_rows(run, s, r, q)
        source = _attach_details(run, s, docs)
        for d in docs:
            documents.append({"stage": s["stage"], "position": s["position"], "reason": r, "id": d["id"],
                              "duplicate_of": d.get("duplicate_of"), "shard": d["_shard"],
                              "scores": d.get("scores"), "scores_from": source if d.get("scores") else None,
                              "text": d.get("text")})
    return {"run": str(run.dir), "stage": stage, "reason": reason, "limit": limit,
            "matching": sum(n for _, _, n in groups), "shown": len(documents), "documents": documents,
            "notes": notes}


def _value(v) -> str:
    return f"{v:.4g}" if isinstance(v, float) else str(v)


def format_documents(data: dict, chars: int = PREVIEW_CHARS) -> str:
    lines = [f"{data['shown']:,} of {data['matching']:,} removed documents"
             + (f" of stage '{data['stage']}'" if data["stage"] else "")
             + (f" with reason '{data['reason']}'" if data["reason"] else "")]
    for d in data["documents"]:
        head = f"[{d['position']:02d} {d['stage']}] {d['reason']}  id={d['id']}"
        if d["duplicate_of"]:
            head += f"  duplicate_of={d['duplicate_of']}"
        lines.append(head)
        if d["scores"]:
            lines.append(f"    {d['scores_from']} scores: "
                         + "  ".join(f"{k}={_value(v)}" for k, v in d["scores"].items()))
        if d["text"] is not None:
            text = " ".join(d["text"].split())
            lines.append("    text: " + (text if chars <= 0 or len(text) <= chars else text[:chars] + " ..."))
        else:
            lines.append("    text: not in the run folder (keep_removed_text: true keeps removed texts)")
    return "\n".join(lines)


def reason_commands(run_dir, stats: list[dict], manifest: dict) -> list[list]:
    """(stage, reason, documents, the command that lists them) for the report."""
    run = Run(run_dir)
    limit = run.private_until()
    rows = []
    for s in stats:
        for r, n in sorted(s["removed"].items()):
            command = ("not listed: at or before phi in a clinical run" if s["position"] <= limit
                       else _command(run.dir, "--stage", s["stage"], "--reason", r))
            rows.append([s["stage"], r, f"{n:,}", command])
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
