"""`medprep erase` against a fresh run (docs/cli.md, "erase"): a config's run, then the same run with
documents erased, then a fresh run on its input without them; prints both times (wall and CPU) and
whether final/ is byte-identical (the dataset card aside), and writes bench/erase.json.

    python scripts/benchmarks/erase_check.py --config configs/medbot.yaml --ids IDS.txt
    python scripts/benchmarks/erase_check.py --config C --patients PATIENTS.txt

The input without the documents: JSON lines files are written without their lines; a MEDLINE XML
file without their <PubmedArticle> records (the others byte for byte) and, under a `limit`, the
limit less the records taken out (the same first documents).

--notes-by-patient: the config's dev notes (data/deid-dev/notes.jsonl, ids PATIENT-NOTE) get a
patient_id field from their ids, phi carries it on (group_field) and split splits by it, so that
--patients has patients to erase on a config whose notes have no patient field (configs/medbot.yaml).
Its other sources and its mix go: split cannot split a shared tail by a field one source lacks."""
from __future__ import annotations

import argparse
import gzip
import json
import re
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]


def _timed(cmd: list[str]) -> dict:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    done = subprocess.run(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if done.returncode:
        sys.exit(f"{' '.join(cmd[2:4])} failed ({done.returncode}):\n{done.stderr[-2000:]}")
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"seconds": round(time.perf_counter() - t0, 2), "cpu_seconds": round(cpu, 2)}


def _without_jsonl(path: Path, out: Path, ids: set[str], by: str | None, patients: set[str]) -> int:
    dropped = 0
    with open(path, encoding="utf-8") as src, open(out, "w", encoding="utf-8") as dst:
        for line in src:
            row = json.loads(line) if line.strip() else None
            if row is not None and (str(row.get("id")) in ids or (by and str(row.get(by)) in patients)):
                dropped += 1
                continue
            dst.write(line)
    return dropped


def _without_xml(path: Path, out: Path, ids: set[str]) -> int:
    pmids = {i.split(":", 1)[1] for i in ids if i.startswith("pmid:")}
    text = gzip.open(path, "rt", encoding="utf-8").read()
    parts = re.split(r"(?=  <PubmedArticle>)", text)
    kept, dropped = [], 0
    for part in parts:
        m = re.search(r"<PMID[^>]*>(\d+)</PMID>", part) if part.startswith("  <PubmedArticle>") else None
        if m and m.group(1) in pmids:
            dropped += 1
            continue
        kept.append(part)
    with gzip.open(out, "wt", encoding="utf-8") as fh:
        fh.write("".join(kept))
    return dropped


def _by_patient(raw: dict, work: Path) -> Path:
    """The config with its dev notes by patient (--notes-by-patient), written into `work`."""
    notes = work / "notes_by_patient.jsonl"
    with open(ROOT / "data/deid-dev/notes.jsonl", encoding="utf-8") as src, open(notes, "w", encoding="utf-8") as dst:
        for line in src:
            row = json.loads(line)
            dst.write(json.dumps({"id": row["id"], "patient_id": row["id"].split("-")[0], "text": row["text"]}) + "\n")
    raw["sources"] = {k: v for k, v in raw["sources"].items() if v["input"]["paths"] == ["data/deid-dev/notes.jsonl"]}
    raw.pop("mix", None)
    for src in raw["sources"].values():
        src["input"] = {**src["input"], "paths": [str(notes)], "columns": ["patient_id"]}
        for entry in src["stages"]:
            if "phi" in entry:
                entry["phi"] = {**entry["phi"], "group_field": "patient_id"}
    for entry in raw["stages"]:
        options = next(iter(entry.values()))
        if isinstance(options, dict) and "priority" in options:
            options["priority"] = [p for p in options["priority"] if p in raw["sources"]]
        if "split" in entry:
            entry["split"] = {**entry["split"], "by": "patient_id"}
    path = work / "by_patient.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


def _final_files(run: Path) -> dict[str, bytes]:
    final = run / "final"
    return {p.relative_to(final).as_posix(): p.read_bytes() for p in sorted(final.rglob("*"))
            if p.is_file() and p.relative_to(final).as_posix() != "README.md"}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", required=True)
    what = ap.add_mutually_exclusive_group(required=True)
    what.add_argument("--ids")
    what.add_argument("--patients")
    ap.add_argument("--notes-by-patient", action="store_true")
    ap.add_argument("--work", default="bench/work/erase")
    ap.add_argument("--out", default="bench/erase.json")
    args = ap.parse_args()
    work = ROOT / args.work
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    values = {v.strip() for v in Path(args.ids or args.patients).read_text().splitlines() if v.strip()}
    raw = yaml.safe_load((ROOT / args.config).read_text())
    asked_config = args.config
    if args.notes_by_patient:
        args.config = str(_by_patient(raw, work))
    by = next((s["split"].get("by") for s in raw.get("stages", []) if isinstance(s, dict) and "split" in s), None)
    med = [sys.executable, "-m", "pipeline"]
    run = work / "run"
    first = _timed(med + ["run", "--config", args.config, "--output", str(run), "--no-progress"])
    erase = _timed(med + ["erase", str(run), "--ids" if args.ids else "--patients",
                          str(Path(args.ids or args.patients).resolve()), "--no-progress"])
    # The input without them.
    sources = raw["sources"] if "sources" in raw else {None: {"input": raw["input"]}}
    ids = values if args.ids else set()
    patients = values if args.patients else set()
    for name, src in sources.items():
        inp = src["input"]
        new_paths = []
        for p in inp["paths"]:
            path = ROOT / p
            out = work / f"input-{name or 'main'}-{path.name}"
            if path.name.endswith(".jsonl"):
                dropped = _without_jsonl(path, out, ids, by, patients)
            elif ".xml" in path.name:
                dropped = _without_xml(path, out, ids)
                if inp.get("limit"):
                    inp["limit"] -= dropped
            elif path.is_dir() and not {v for v in ids if v.startswith("pmc:")}:
                out, dropped = path, 0          # full texts (JATS), none of them asked: as they are
            else:
                raise SystemExit(f"{path}: only JSON lines, MEDLINE XML and unasked JATS folders are filtered here")
            new_paths.append(str(out))
        inp["paths"] = new_paths
    cfg = work / "fresh.yaml"
    cfg.write_text(yaml.safe_dump(raw, sort_keys=False))
    fresh_run = work / "fresh"
    fresh = _timed(med + ["run", "--config", str(cfg), "--output", str(fresh_run), "--no-progress"])
    a, b = _final_files(run), _final_files(fresh_run)
    same = a == b
    receipt = json.loads(sorted((run / "erasures").glob("*.json"))[-1].read_text())
    result = {"config": asked_config, "notes_by_patient": args.notes_by_patient,
              "kind": "ids" if args.ids else "patients", "values": len(values),
              "documents": receipt["documents"], "run": first, "erase": erase, "fresh": fresh,
              "erase_share_of_fresh_seconds": round(erase["seconds"] / fresh["seconds"], 3),
              "erase_share_of_fresh_cpu": round(erase["cpu_seconds"] / fresh["cpu_seconds"], 3),
              "final_identical": same, "final_files": len(a),
              "differing": sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))}
    out = ROOT / args.out
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    sys.exit(0 if same else 1)


if __name__ == "__main__":
    main()
