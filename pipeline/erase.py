"""`medprep erase RUN --ids FILE | --patients FILE`: documents out of a finished run folder.

What a fresh run on the input without those documents would compute, without running the
per-document stages again:
1. the documents to erase: the ids given (input ids, one per line), or every document whose
   patient field (split's `by`) holds a value given, read from the source and from the stages'
   outputs; each id also under its keyed pseudonym (the phi stage's key), the form it has after phi;
2. every stage before the first whole-corpus stage (normalize ... phi: per-document results,
   which do not depend on the other documents) loses their rows, in data/ and removed/, shard by
   shard (texts' row references renumbered, markers and stats.json recounted); so do the filter
   stages' stored scores (row by row with their input shard), phi's cache (its redacted texts)
   and the phi crosswalk; caches whose entries cannot be told apart by document (tokenizer word
   counts, another configuration's scores or phi results) are removed;
3. the whole-corpus stages (dedup, decontaminate, split, tokenizer, pack) run again, from those
   outputs, as the run computed them; then the manifest, report and dataset card;
4. a receipt, erasures/<time>.json: when, how many documents, keyed digests of the values asked
   for (never a value), the digests of final/ before and after.

A shard keeps its name and its other documents: a fresh run cuts its input into shards by count,
so its shard boundaries differ, but nothing after the per-document stages depends on where a
shard ends (dedup, split, tokenizer and pack see the documents in corpus order), so final/ is
the fresh run's byte for byte (the dataset card aside: it tells the run's counters).
"""
from __future__ import annotations

import base64
import csv
import hashlib
import hmac
import json
import os
import shutil
import tempfile
import time
from collections import Counter
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pipeline.cache import keys_in_use
from pipeline.errors import UserError
from pipeline.runpath import RunPath, read_json, write_json
from pipeline.shards import (
    MARKERS,
    STATS,
    TEXT_FILE,
    TEXT_ROW,
    ArrowFile,
    counts_by_source,
    is_done,
    is_purged,
)

ERASURES = "erasures"
# Written before an erasure changes anything, removed after its receipt: an erasure cut short.
PENDING = "PENDING"
# Beside it, what a retry needs of the shards the erasure cut short had replaced (stage folder /
# shard name .json: the shard's digest before, its rows' keep mask): their row maps, for the
# references of later stages' shards not yet renumbered. Row numbers only; removed with PENDING.
REPLACED = "PENDING.rows"
# Cache kinds whose entries derive from no document of the corpus (a benchmark's n-grams): kept.
CORPUS_FREE_CACHES = ("benchmarks",)


# ---- what to erase -----------------------------------------------------------------------------

def read_values(path: str, what: str) -> list[str]:
    """One value a line (UTF-8; surrounding whitespace and blank lines ignored)."""
    p = Path(path)
    if not p.is_file():
        raise UserError(f"--{what}: file not found: {path}")
    try:
        lines = p.read_text(encoding="utf-8").splitlines()
    except UnicodeDecodeError:
        raise UserError(f"--{what}: {path} is not UTF-8 text (one value a line)") from None
    values = list(dict.fromkeys(v.strip() for v in lines if v.strip()))
    if not values:
        raise UserError(f"--{what}: {path} holds no value (one a line)")
    return values


def load_run_config(run_dir: Path):
    """The run's own config (manifest.json's, after overrides), its output_dir the run folder."""
    import yaml

    from pipeline.config import load_config
    manifest = read_json(RunPath.of(run_dir) / "manifest.json")
    if not isinstance(manifest, dict) or not isinstance(manifest.get("config"), dict):
        raise UserError(f"{run_dir}: manifest.json holds no config (not a finished run of this medprep)")
    config_file = manifest.get("config_file")
    try:
        # The run's config file, as it was (its keys' order, its name, for the card) ...
        config = load_config(config_file, output_dir=str(run_dir), check_inputs=False)
        if json.loads(json.dumps(config.raw, sort_keys=True)) == json.loads(json.dumps(
                {**manifest["config"], "output_dir": str(run_dir)}, sort_keys=True)):
            return config, manifest
    except Exception:
        pass
    # ... else the manifest's (its keys sorted).
    raw = dict(manifest["config"])
    if isinstance(raw.get("sources"), dict):
        # manifest.json's keys are sorted; the sources' order is the run's (its stages' order),
        # which the stages' order, and so the manifest and the card, follow.
        order = list(dict.fromkeys(s.get("source") for s in manifest.get("stages") or [] if s.get("source")))
        raw["sources"] = {name: raw["sources"][name] for name in
                          [n for n in order if n in raw["sources"]] + [n for n in raw["sources"] if n not in order]}
    with tempfile.TemporaryDirectory(prefix="medprep-erase-") as tmp:
        path = Path(tmp) / "config.yaml"
        path.write_text(yaml.safe_dump(raw, sort_keys=False), encoding="utf-8")
        config = load_config(path, output_dir=str(run_dir), check_inputs=False)
    config.source = config_file or config.source
    return config, manifest


def split_stages(config) -> tuple[list, list]:
    """(stages filtered in place, stages run again): a whole-corpus stage, and every stage after
    one, run again; the per-document stages before them are filtered."""
    from pipeline.runner import bare_stage
    from pipeline.stages.base import DocumentStage
    rerun: list = []
    for spec in config.stages:
        if not isinstance(bare_stage(spec), DocumentStage) or any(p in rerun for p in config.previous(spec)):
            rerun.append(spec)
    return [s for s in config.stages if s not in rerun], rerun


def check_finished(config, run_dir: Path, config_file: str) -> None:
    """Every stage finished (or purged by the phi stage after the run, as it does), documents kept.
    After an erasure cut short (erasures/PENDING), the stages it runs again may be unfinished."""
    from pipeline.runner import bare_stage, stage_dirs_for
    if config.run.keep == "final":
        raise UserError(f"{run_dir}: the run kept only final/ (keep: final), so its stages' documents, which "
                        "erase re-derives final/ from, are gone; rerun it on the input without those documents")
    dirs = stage_dirs_for(config)
    pending = (run_dir / ERASURES / PENDING).exists()
    rerun = {s.key for s in split_stages(config)[1]}
    purged_ok = set()
    for chain in config.chains().values():
        for i, spec in enumerate(chain):
            privacy = bare_stage(spec).privacy()
            if privacy is not None and privacy.purges_earlier_stages():
                purged_ok.update(s.key for s in chain[:i])
    for spec in config.stages:
        folder = dirs[spec.key]
        if is_done(folder) or (is_purged(folder) and spec.key in purged_ok) or (pending and spec.key in rerun):
            continue
        raise UserError(f"{run_dir}: stage {spec.key} has not finished ({folder.name}); finish the run first "
                        f"('medprep run --config {config_file} --output {run_dir}')")


def _privacies(config) -> list:
    """The privacy duties (Privacy) of the run's stages that have them, in chain order."""
    from pipeline.runner import bare_stage
    return [p for p in (bare_stage(spec).privacy() for spec in config.stages) if p is not None]


def id_keys(config) -> list[tuple[object, bytes]]:
    """(privacy duties, key) of every stage that renames ids to keyed pseudonyms."""
    return [(p, p.key()) for p in _privacies(config) if p.renames_ids()]


def receipt_key(config) -> bytes:
    """The key of the receipt's digests: the first keyed stage's, else the default PHI key."""
    from pipeline.phi.secret import load_phi_key
    for privacy in _privacies(config):
        key = privacy.key()
        if key is not None:
            return key
    return load_phi_key(None)


def with_pseudonyms(values: set[str], keys: list[bytes]) -> set[str]:
    from pipeline.stages.phi.identifiers import pseudonymize
    out = set(values)
    for key in keys:
        out.update(p for p in pseudonymize(sorted(values), key) if p is not None)
    return out


def patient_ids(config, patients: list[str], keys: list[bytes]) -> tuple[set[str], int]:
    """Ids of every document whose patient field (split's `by`) holds one of `patients`: from each
    source that reads that column, and from every stage output that carries it (a pseudonym there);
    and how many of the patients had one."""
    from pipeline.readers import read_documents
    from pipeline.runner import bare_stage
    by = next(filter(None, (bare_stage(spec).group_field() for spec in config.stages)), None)
    if by is None:
        raise UserError("--patients: the run's split has no `by` field (split: {by: FIELD}), so it knows no "
                        "patients; give the documents with --ids")
    wanted = with_pseudonyms(set(patients), keys)
    ids: set[str] = set()
    seen: set[str] = set()
    for source, input_cfg in config.inputs.items():
        if by not in input_cfg.columns:
            continue
        try:
            for batch in read_documents(input_cfg, config.run.batch_size):
                table = batch.table if hasattr(batch, "table") else batch
                if by not in table.column_names:
                    break
                hit = pc.is_in(table[by].cast(pa.string()), value_set=pa.array(sorted(wanted), pa.string()))
                ids.update(table.filter(hit)["id"].to_pylist())
                seen.update(table.filter(hit)[by].cast(pa.string()).to_pylist())
        except (OSError, UserError):
            pass                                   # the source is gone: the stages' outputs below
    from pipeline.runner import stage_dirs_for
    for folder in stage_dirs_for(config).values():
        for shard in sorted((folder.local / "data").glob("*.arrow")):
            table = _read(shard)
            if by in table.column_names:
                hit = pc.is_in(table[by].cast(pa.string()), value_set=pa.array(sorted(wanted), pa.string()))
                ids.update(table.filter(hit)["id"].to_pylist())
                seen.update(table.filter(hit)[by].cast(pa.string()).to_pylist())
    return ids, sum(1 for p in patients if p in seen or with_pseudonyms({p}, keys) & seen)


# ---- the stages' files ---------------------------------------------------------------------------

def _read(path: Path) -> pa.Table:
    with pa.OSFile(str(path)) as fh:
        return pa.ipc.open_stream(fh).read_all()


def _write(path: Path, table: pa.Table, schema: pa.Schema) -> None:
    """A shard written as the stage writes it (record batches of WRITE_CHUNK rows, zstd), under a
    temp name renamed into place."""
    out = ArrowFile(RunPath.of(path), schema)
    out.write(table)
    out.close()


def _file_sha256(path: Path) -> str:
    with open(path, "rb") as fh:
        return hashlib.file_digest(fh, "sha256").hexdigest()


def _keep_mask(table: pa.Table, match: pa.Array) -> np.ndarray:
    if table.num_rows == 0 or "id" not in table.column_names:
        return np.ones(table.num_rows, bool)
    hit = pc.is_in(table["id"], value_set=match).to_numpy(zero_copy_only=False)
    return ~hit.astype(bool)


def _renumber(old_keep: np.ndarray) -> np.ndarray:
    """New row of every old row (-1: erased)."""
    new = np.cumsum(old_keep) - 1
    return np.where(old_keep, new, -1)


class StageEraser:
    """Takes the documents out of the per-document stages' folders, in chain order."""

    def __init__(self, stages_dir: Path, match: set[str], replaced_dir: Path):
        self.stages_dir = stages_dir
        self.replaced_dir = replaced_dir
        self.match = pa.array(sorted(match), pa.string())
        # "FOLDER/data/NAME.arrow" of a text-holding shard that lost rows -> new row of each old row.
        self.row_maps: dict[str, np.ndarray] = {}
        # (stage folder, shard name) -> keep mask of its data rows (as they were).
        self.data_masks: dict[tuple[str, str], np.ndarray] = {}
        self.erased_texts: dict[str, list[str]] = {}      # stage folder -> texts of erased rows (text holders)
        self.counts: dict[str, dict] = {}                 # stage folder -> erased rows in data / removed
        self.found: set[str] = set()                      # the ids (raw or pseudonyms) erased rows had

    def erase_stage(self, folder: Path) -> None:
        name = folder.name
        data_erased = 0 if (folder / "data").is_dir() else None
        texts: list[str] = []
        for shard in sorted((folder / "data").glob("*.arrow")) if data_erased is not None else ():
            table = _read(shard)
            refs = TEXT_ROW in table.column_names
            keep = self._replaced_keep(shard)
            if keep is not None:
                # Replaced by the try cut short: its rows as they were, for the references into it
                # and the stored scores; its marker recounted unless that try got to it.
                self.data_masks[(name, shard.stem)] = keep
                if "text" in table.column_names and not refs and not keep.all():
                    self.row_maps[f"{name}/data/{shard.name}"] = _renumber(keep)
                marker = folder / MARKERS / f"{shard.stem}.json"
                if marker.exists() and json.loads(marker.read_text())["docs_out"] != table.num_rows:
                    self._recount_marker(folder, shard.stem, data_out=table.num_rows, erased_in=int((~keep).sum()))
                continue
            keep = _keep_mask(table, self.match)
            self.data_masks[(name, shard.stem)] = keep
            if not keep.all():
                self.found.update(table.filter(pa.array(~keep))["id"].to_pylist())
            remap = refs and any(f in self.row_maps for f in pc.unique(table[TEXT_FILE]).to_pylist())
            if keep.all() and not remap:
                continue
            if "text" in table.column_names and not keep.all():
                texts.extend(table.filter(pa.array(~keep))["text"].to_pylist())
            schema = table.schema
            kept = table.filter(pa.array(keep))
            if refs and remap:
                rows = kept[TEXT_ROW].to_numpy(zero_copy_only=False).astype(np.int64)
                new = rows.copy()
                for f in pc.unique(kept[TEXT_FILE]).to_pylist():
                    if f in self.row_maps:
                        at = pc.equal(kept[TEXT_FILE], f).to_numpy(zero_copy_only=False)
                        new[at] = self.row_maps[f][rows[at]]
                if (new < 0).any():
                    raise UserError(f"{shard}: a kept row refers to an erased text (an erasure of other documents "
                                    "cut short): finish that one first (the same medprep erase again)")
                kept = kept.set_column(kept.schema.get_field_index(TEXT_ROW), TEXT_ROW, pa.array(new, pa.int64()))
            if "text" in table.column_names and not refs and not keep.all():
                self.row_maps[f"{name}/data/{shard.name}"] = _renumber(keep)
            self._save_keep(shard, keep)                 # before the shard changes: a retry's only record
            _write(shard, kept, schema)
            data_erased += int((~keep).sum())
            self._recount_marker(folder, shard.stem, data_out=kept.num_rows, erased_in=int((~keep).sum()))
        removed_erased = 0
        for shard in sorted((folder / "removed").glob("*.arrow")):
            table = _read(shard)
            keep = _keep_mask(table, self.match)
            if keep.all():
                continue
            gone = table.filter(pa.array(~keep))
            self.found.update(gone["id"].to_pylist())
            if "text" in gone.column_names:
                texts.extend(t for t in gone["text"].to_pylist() if t is not None)
            _write(shard, table.filter(pa.array(keep)), table.schema)
            removed_erased += len(gone)
            self._recount_marker(folder, shard.stem, reasons=Counter(gone["reason"].to_pylist()),
                                 erased_in=len(gone))
        self.erased_texts[name] = texts
        self.counts[name] = {"data": data_erased, "removed": removed_erased}

    def _replaced_path(self, shard: Path) -> Path:
        return self.replaced_dir / shard.parent.parent.name / f"{shard.name}.json"

    def _save_keep(self, shard: Path, keep: np.ndarray) -> None:
        path = self._replaced_path(shard)
        path.parent.mkdir(parents=True, exist_ok=True)
        write_json(RunPath.of(path), {"sha256": _file_sha256(shard), "rows": len(keep),
                                      "keep": base64.b64encode(np.packbits(keep)).decode("ascii")})

    def _replaced_keep(self, shard: Path) -> np.ndarray | None:
        """The keep mask of a shard a try cut short replaced, else None (never reached, or not
        replaced yet: its digest is the one saved, as the shard is replaced whole by a rename)."""
        path = self._replaced_path(shard)
        if not path.exists():
            return None
        saved = json.loads(path.read_text())
        if saved["sha256"] == _file_sha256(shard):
            return None
        bits = np.frombuffer(base64.b64decode(saved["keep"]), np.uint8)
        return np.unpackbits(bits, count=saved["rows"]).astype(bool)

    def _recount_marker(self, folder: Path, shard: str, *, data_out: int | None = None, erased_in: int = 0,
                        reasons: Counter | None = None) -> None:
        path = folder / MARKERS / f"{shard}.json"
        if not path.exists():
            return
        marker = json.loads(path.read_text())
        marker["docs_in"] -= erased_in
        if data_out is not None:
            marker["docs_out"] = data_out
        for reason, n in (reasons or {}).items():
            left = marker["removed"].get(reason, 0) - n
            if left > 0:
                marker["removed"][reason] = left
            else:
                marker["removed"].pop(reason, None)
        write_json(RunPath.of(path), marker)


def recount_stats(folder: Path, next_docs_in: int | None) -> int:
    """stats.json's counts again: from the shards' markers; a purged stage, without them, from
    what it passed on (the next stage's docs_in, `next_docs_in`) and its removed/ records, so a
    recount after an erasure cut short is right too. Returns its docs_in."""
    stats_path = folder / STATS
    stats = json.loads(stats_path.read_text())
    markers = {p.stem: json.loads(p.read_text()) for p in sorted((folder / MARKERS).glob("*.json"))}
    if markers:
        reasons: Counter = Counter()
        for m in markers.values():
            reasons.update(m["removed"])
        stats["docs_in"] = sum(m["docs_in"] for m in markers.values())
        stats["docs_out"] = sum(m["docs_out"] for m in markers.values())
        stats["removed"] = dict(sorted((k, v) for k, v in reasons.items() if v))
        if "docs_by_source" in stats:
            stats["docs_by_source"] = counts_by_source(markers.items())
    elif next_docs_in is not None:
        reasons = Counter()
        for shard in sorted((folder / "removed").glob("*.arrow")):
            reasons.update(_read(shard)["reason"].to_pylist())
        stats["removed"] = dict(sorted(reasons.items()))
        stats["docs_out"] = next_docs_in
        stats["docs_in"] = next_docs_in + sum(reasons.values())
    write_json(RunPath.of(stats_path), stats)
    return stats["docs_in"]


# ---- caches ---------------------------------------------------------------------------------

def erase_scores(cache_dir: Path, score_masks: dict[str, dict | None]) -> None:
    """The filter stages' stored scores: a folder a filtered stage uses (`score_masks`, by its
    cache key) loses the erased rows, aligned with its input shards (keep masks by shard name);
    any other folder (scores of another configuration, whose input is not at hand), or one whose
    masks are not at hand, is removed."""
    root = cache_dir / "scores"
    for folder in sorted(root.glob("*/*")) if root.is_dir() else ():
        masks = score_masks.get(f"cache/scores/{folder.parent.name}/{folder.name}")
        if masks is None:
            shutil.rmtree(folder)
            continue
        for path in sorted(folder.glob("*.arrow")):
            keep = masks.get(path.stem)
            if keep is None or keep.all():
                continue
            table = _read(path)
            if table.num_rows == int(keep.sum()):
                continue                              # cut down already, by this erasure cut short
            if table.num_rows != len(keep):
                path.unlink()                         # out of step with its input: scored again when needed
                continue
            sink = pa.BufferOutputStream()
            with pa.ipc.new_stream(sink, table.schema) as writer:
                writer.write_table(table.filter(pa.array(keep)))
            RunPath.of(path).write_bytes(sink.getvalue().to_pybytes())


def erase_phi_cache(cache_dir: Path, used: set[str], texts: set[str]) -> None:
    """phi's cache: entries of the namespaces the run's phi stages use lose the redacted texts of
    the erased documents; other namespaces (another configuration's, not at hand) are removed."""
    root = cache_dir / "phi"
    match = pa.array(sorted(texts), pa.string())
    for ns in sorted(root.glob("*")) if root.is_dir() else ():
        if f"cache/phi/{ns.name}" not in used:
            shutil.rmtree(ns)
            continue
        for path in sorted(ns.glob("*.arrow")):
            from pipeline.cache import arrow_file_bytes, read_arrow_file
            table = read_arrow_file(RunPath.of(path))
            if table is None:
                path.unlink()
                continue
            hit = pc.is_in(table["text"], value_set=match).to_numpy(zero_copy_only=False).astype(bool)
            if not hit.any():
                continue
            if hit.all():
                path.unlink()
            else:
                RunPath.of(path).write_bytes(arrow_file_bytes(table.filter(pa.array(~hit))))


def mark_unread(folder: Path) -> list[Path]:
    """The entry files under `folder`, each with its access time set to 0: reading one sets it
    again (relatime, the default, updates an access time older than the modification time), so
    afterwards those still at 0 were not read. On a filesystem that keeps no access times none
    looks read, and all are removed: the safe side."""
    out = []
    for path in sorted(folder.rglob("*.arrow")) if folder.is_dir() else ():
        st = path.stat()
        os.utime(path, ns=(0, st.st_mtime_ns))
        out.append(path)
    return out


def remove_unread(paths: list[Path]) -> None:
    for path in paths:
        try:
            if path.stat().st_atime_ns == 0:
                path.unlink()
        except FileNotFoundError:
            pass


def erase_crosswalk(path: str, match: set[str]) -> int:
    """The crosswalk (pseudonym, id) without the erased documents' rows, written as phi writes it
    (mode 0600, temp name renamed into place). Returns the rows taken out."""
    from pipeline.stages.phi.identifiers import write_private_csv
    p = Path(path)
    if not p.is_file():
        return 0
    with open(p, encoding="utf-8", newline="") as fh:
        rows = list(csv.reader(fh))
    if not rows:
        return 0
    keep = [r for r in rows[1:] if not (set(r) & match)]
    write_private_csv(p, rows[0], keep)
    return len(rows) - 1 - len(keep)


# ---- digests and receipt --------------------------------------------------------------------

def final_digest(run_dir: Path) -> str | None:
    """sha256 over final/'s files (path and content) but README.md, the dataset card."""
    final = run_dir / "final"
    if not final.is_dir():
        return None
    h = hashlib.sha256()
    for f in sorted(p for p in final.rglob("*") if p.is_file() and p.relative_to(final).as_posix() != "README.md"):
        h.update(f.relative_to(final).as_posix().encode() + b"\0")
        with open(f, "rb") as fh:
            h.update(hashlib.file_digest(fh, "sha256").digest())
    return h.hexdigest()


def keyed_digests(values: list[str], key: bytes, kind: str) -> list[str]:
    return sorted(hmac.new(key, f"medprep-erase:{kind}:{v}".encode("utf-8"), hashlib.sha256).hexdigest()[:32]
                  for v in values)


def write_receipt(run_dir: Path, receipt: dict) -> Path:
    folder = run_dir / ERASURES
    folder.mkdir(exist_ok=True)
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S.%fZ")
    path = folder / f"{stamp}.json"
    tmp = folder / f".{stamp}.json.tmp"
    tmp.write_text(json.dumps(receipt, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    os.replace(tmp, path)
    return path


# ---- the command ----------------------------------------------------------------------------

def erase(run_dir: str, ids_file: str | None = None, patients_file: str | None = None, report: bool = False) -> dict:
    """Erase documents from a finished run folder (the module docstring); returns the receipt."""
    if bool(ids_file) == bool(patients_file):
        raise UserError("give the documents to erase: --ids FILE or --patients FILE (one value a line)")
    run = Path(run_dir)
    if not (run / "stages").is_dir():
        raise UserError(f"{run_dir}: not a run folder (no stages/)")
    if not (run / "manifest.json").is_file():
        raise UserError(f"{run_dir}: the run has not finished (no manifest.json); finish it first")
    values = read_values(ids_file or patients_file, "ids" if ids_file else "patients")
    config, manifest = load_run_config(run)
    if config.output_dir.local is None:
        raise UserError(f"{run_dir}: erase works on a run folder on this machine's disk")
    check_finished(config, run, manifest.get("config_file") or "C")
    from pipeline.preflight import run_folder_lock
    with run_folder_lock(config.output_dir):
        return _erase(config, manifest, run, values, by_patient=bool(patients_file), report=report)


def _erase(config, manifest: dict, run: Path, values: list[str], *, by_patient: bool, report: bool) -> dict:
    from pipeline.runner import run_stage, stage_dirs_for
    t0 = time.perf_counter()
    cpu0 = time.process_time()
    before = final_digest(run)
    keys = [k for _, k in id_keys(config)]
    raw_ids, matched = patient_ids(config, values, keys) if by_patient else (set(values), 0)
    match = with_pseudonyms(raw_ids, keys)
    dirs = stage_dirs_for(config)

    filtered, rerun = split_stages(config)
    # Cut short from here on, the run folder says so: the stages run again lose _SUCCESS (a
    # `medprep run` would otherwise skip them, leaving final/ as it was), final/ and report.html
    # (which hold the documents) go, and erasures/PENDING lets the same command finish the job.
    (run / ERASURES).mkdir(exist_ok=True)
    if not (run / ERASURES / PENDING).exists():
        shutil.rmtree(run / ERASURES / REPLACED, ignore_errors=True)     # not this erasure's
    (run / ERASURES / PENDING).write_text("an erasure was cut short: run the same medprep erase again\n")
    for spec in rerun:
        (dirs[spec.key].local / "_SUCCESS").unlink(missing_ok=True)
    shutil.rmtree(run / "final", ignore_errors=True)
    (run / "report.html").unlink(missing_ok=True)

    eraser = StageEraser(run / "stages", match, run / ERASURES / REPLACED)
    for spec in filtered:
        eraser.erase_stage(dirs[spec.key].local)
    # Erased documents each stage read: its own erased rows (data and removed); a purged stage,
    # without data/, the erased documents the next stage of its chain read, plus its removed ones.
    erased_in: dict[str, int] = {}
    for chain in config.chains().values():
        own = [s for s in chain if s in filtered]
        following = 0
        for spec in reversed(own):
            c = eraser.counts[dirs[spec.key].name]
            erased_in[spec.key] = (c["data"] if c["data"] is not None else following) + c["removed"]
            following = erased_in[spec.key]
    for source, chain in config.chains().items():
        own = [s for s in chain if s in filtered and s.source == source]
        next_docs_in = None
        for spec in reversed(own):
            next_docs_in = recount_stats(dirs[spec.key].local, next_docs_in)
    for spec in filtered:                      # a shared tail's own per-document stages
        if spec.source is None and config.multi_source:
            recount_stats(dirs[spec.key].local, None)
    documents = sum(erased_in.get(s.key, 0) for s in filtered if config.reads_source(s))

    # Caches.
    cache_dir = Path(str(config.run.cache.folder)) / "cache" if config.run.cache.folder else run / "cache"
    used = keys_in_use(RunPath.of(run))
    # Each stored-scores folder a filtered stage uses, with the keep masks of its input shards
    # (the previous stages' data rows as they were), or None where they are not at hand.
    score_masks: dict[str, dict | None] = {}
    for spec in filtered:
        stats = json.loads((dirs[spec.key].local / STATS).read_text())
        previous = config.previous(spec)
        masks = None
        if previous and all(dirs[p.key].local.joinpath("data").is_dir() for p in previous):
            names = {dirs[p.key].name for p in previous}
            masks = {shard: m for (folder, shard), m in eraser.data_masks.items() if folder in names}
        for key in stats.get("cache_keys") or []:
            if key.startswith("cache/scores/"):
                score_masks[key] = masks
    erase_scores(cache_dir, score_masks)
    phi_texts = {t for spec in filtered if spec.name == "phi" for t in eraser.erased_texts[dirs[spec.key].name]}
    for spec in rerun:                           # a phi stage after a whole-corpus one: its texts before it reruns
        if spec.name == "phi":
            for shard in sorted((dirs[spec.key].local / "data").glob("*.arrow")):
                table = _read(shard)
                if "text" in table.column_names:
                    phi_texts.update(table.filter(pa.array(~_keep_mask(table, eraser.match)))["text"].to_pylist())
    erase_phi_cache(cache_dir, used, phi_texts)
    if cache_dir.is_dir():
        for kind in sorted(cache_dir.iterdir()):
            if kind.name not in ("scores", "phi", "tokenizer_compare", "tokenizer_words", *CORPUS_FREE_CACHES):
                shutil.rmtree(kind)                   # a kind erase does not know: its entries cannot be told apart
    words = cache_dir / "tokenizer_words"
    unread = mark_unread(words)
    for privacy, _ in id_keys(config):
        if privacy.crosswalk_file():
            erase_crosswalk(privacy.crosswalk_file(), match | raw_ids)
    for leftover in (run / "stages").glob("*.tmp"):
        shutil.rmtree(leftover) if leftover.is_dir() else leftover.unlink()

    if not by_patient:
        matched = sum(1 for v in values if v in eraser.found or with_pseudonyms({v}, keys) & eraser.found)
    t_filtered = time.perf_counter()
    # The whole-corpus stages again, from the per-document stages' outputs.
    from pipeline.executor import make_executor
    executor = make_executor(config.run.executor, config.run.num_proc)
    worker_cpu = 0.0
    try:
        for spec in rerun:
            stats = run_stage(config, spec, force=True, stage_dirs=dirs, executor=executor)
            worker_cpu += stats.get("worker_cpu_seconds", 0.0)
        executor_info = executor.describe()
    finally:
        executor.close()
    used = keys_in_use(RunPath.of(run))
    # The tokenizer's word counts are keyed by the texts counted: the entries the rerun read are
    # those of shards without an erased document; the others (and other namespaces) go.
    remove_unread(unread)
    for ns in sorted(words.glob("*")) if words.is_dir() else ():
        if f"cache/tokenizer_words/{ns.name}" not in used:
            shutil.rmtree(ns)
    compare = cache_dir / "tokenizer_compare"
    for entry in sorted(compare.glob("*")) if compare.is_dir() else ():
        if f"cache/tokenizer_compare/{entry.name}" not in used:
            shutil.rmtree(entry)

    t_rerun = time.perf_counter()
    _finish_run(config, manifest, dirs, executor_info, report and config.run.report)
    after = final_digest(run)
    seconds = time.perf_counter() - t0
    receipt = {
        "when": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "medprep": __import__("pipeline").__version__,
        "asked": {"kind": "patients" if by_patient else "ids", "values": len(values),
                  "keyed_digests": keyed_digests(values, receipt_key(config), "patient" if by_patient else "id"),
                  "digest": "HMAC-SHA256 (first 128 bits) of 'medprep-erase:KIND:VALUE' under the run's PHI key"},
        "documents": documents,
        # Ids asked for that named a document (under either name); patients: that had one.
        "values_matched": matched,
        "documents_by_stage": {s.key: erased_in[s.key] for s in filtered},
        "stages_rerun": [s.key for s in rerun],
        "final_digest": {"before": before, "after": after,
                         "what": "sha256 over final/'s files (path, sha256) but README.md, the dataset card"},
        "seconds": round(seconds, 3),
        "seconds_by_step": {"filter": round(t_filtered - t0, 3), "rerun": round(t_rerun - t_filtered, 3),
                            "finish": round(time.perf_counter() - t_rerun, 3)},
        # This process's CPU seconds and the rerun stages' workers'.
        "cpu_seconds": round(time.process_time() - cpu0 + worker_cpu, 3),
    }
    receipt["path"] = str(write_receipt(run, receipt).relative_to(run))
    # Before PENDING: without it, a later erasure would take them for its own.
    shutil.rmtree(run / ERASURES / REPLACED, ignore_errors=True)
    (run / ERASURES / PENDING).unlink(missing_ok=True)
    return receipt


def _finish_run(config, old_manifest: dict, dirs: dict, executor_info: dict, write_report_too: bool) -> None:
    """manifest.json, report.html and the dataset card from the stages' stats, as a run ends."""
    from pipeline.card import write_card
    from pipeline.finished_run import FinishedRun
    from pipeline.runner import bare_stage, run_folder_size, write_manifest
    all_stats = [read_json(dirs[s.key] / STATS) for s in config.stages]
    manifest = write_manifest(config, all_stats, old_manifest.get("seconds", 0.0), executor_info)
    report = config.output_dir.local / "report.html"
    if write_report_too:
        from pipeline.report import write_report
        write_report(config.output_dir)
    else:
        # It shows removed documents' texts and the old counts; rewriting it takes as long as the
        # rest of the erasure (its plots, phi's redactor): `medprep report RUN` or --report.
        report.unlink(missing_ok=True)
    for spec in config.stages:
        privacy = bare_stage(spec).privacy()
        if privacy is None:
            continue
        fields = privacy.after_chain([(s.folder, dirs[s.key]) for s in config.before(spec)])
        (manifest["sources"][spec.source] if spec.source else manifest).update(fields)
    write_card(config, FinishedRun(config.output_dir, manifest))
    manifest["run_folder"] = run_folder_size(config, all_stats)
    write_json(config.output_dir / "manifest.json", manifest)
