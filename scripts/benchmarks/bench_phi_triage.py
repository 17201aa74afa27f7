"""PHI triage benchmark (pipeline/phi/triage.py): the engine of each profile with and without
triage on the same texts, each variant in its own process.

    python scripts/benchmarks/bench_phi_triage.py        # = make bench-phi-triage; writes bench/phi_triage.json
    python scripts/benchmarks/bench_phi_triage.py --docs 500 --planted 100 --no-dev   # a quick look
    python scripts/benchmarks/bench_phi_triage.py --profiles clinical --out /tmp/t.json  # the clinical rows only

Sets: real abstracts (data/raw/pubmed21n1298, the default run's file; the first --docs English
abstracts), the planted abstracts of `scripts/evaluation/eval_phi.py --planted-abstracts` (--planted; the
same seed, 7, and offset), and the
two dev sets (../shared/data/deid-dev and asq-dev notes, unless --no-dev) through the
literature profile: text dense with names, the hardest case for its triage. The clinical profile
(`clinical`: NerTriage's place is taken by TokenTriage, spaCy tokenizing only the texts whose
tokens a recognizer reads) runs on the two dev sets.

Per set and variant (`full`, `triage`): docs per CPU-second of PhiEngine.redact_batch (what the
stage calls, batches of 500 as configs/pubmed.yaml; engine set-up excluded and given apart),
peak RSS of the process, and for `triage` the share of characters sent to spaCy's NER. Per set:
the documents whose redacted text or entity counts differ between the two, and the replaced
entities of the full engine only (`lost`, by type) and of the triage only (`added`): counts,
never values. On the sets with gold values (the dev sets, the planted abstracts), the gold values
left verbatim in each variant's output (eval_phi.py's value_survives) and those left only with the
triage (`gold_values_lost`) or only without it (`gold_values_gained`). `projected_default_run`
applies the abstracts' rates to the phi stage of the
default run (bench/default_run.json: its documents into phi, num_proc 2 of configs/pubmed.yaml).
The machine's load average is recorded at the start and the end: CPU-second rates hold on a
shared machine, wall times do not."""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
OUT = ROOT / "bench" / "phi_triage.json"
# The dev sets: data/<name> in the checkout, else ../shared/data/<name> beside it or the main checkout.
DEV_DIRS = [ROOT / "data", ROOT.parent / "shared" / "data", ROOT.parents[1] / "shared" / "data"]
BATCH = 500
# The planted set of `scripts/evaluation/eval_phi.py --planted-abstracts N` (its default seed).
PLANTED_SEED = 7


def load_set(name: str, n: int) -> tuple[list[str], list[list[str]] | None]:
    """The texts of a set and, where it has them, the gold values of each text."""
    if name == "abstracts":
        from scripts.evaluation.eval_phi import real_abstracts

        return real_abstracts(n), None
    if name == "planted_abstracts":
        from scripts.evaluation.eval_phi import real_abstracts
        from scripts.evaluation.eval_phi_formats import ABSTRACTS_OFFSET, make_planted_abstracts

        texts = real_abstracts(ABSTRACTS_OFFSET + n)[ABSTRACTS_OFFSET:]
        docs = make_planted_abstracts(texts, PLANTED_SEED)
        return [d["text"] for d in docs], [[e["value"] for e in d["gold"]] for d in docs]
    folder = next(d / name for d in DEV_DIRS if (d / name / "notes.jsonl").exists())
    docs = [json.loads(line) for line in (folder / "notes.jsonl").open()][:n]
    gold = json.loads((folder / "gold.json").read_text(encoding="utf-8"))
    return [d["text"] for d in docs], [[m["value"] for m in gold.get(d["id"], [])] for d in docs]


def make_engine(profile: str, variant: str):
    from pipeline.phi.engine import PhiEngine
    from pipeline.phi.triage import NerTriage, TokenTriage

    triage = None if variant == "full" else NerTriage() if profile == "literature" else TokenTriage()
    return PhiEngine(profile=profile, triage=triage).setup()


def worker(name: str, n: int, profile: str, variant: str, out: Path) -> None:
    """One variant on one set: per document the digest of the redacted text, the counts by type,
    whether it failed and the indices of its gold values left in the output to `out` (a
    temporary file the parent compares and deletes; no text, no value), and the measurements to
    stdout."""
    from scripts.evaluation.eval_phi import value_survives

    texts, gold = load_set(name, n)
    t0 = time.process_time()
    engine = make_engine(profile, variant)
    setup = time.process_time() - t0
    outputs, t0 = [], time.process_time()
    for i in range(0, len(texts), BATCH):
        new_texts, counts, failed = engine.redact_batch(texts[i : i + BATCH])
        outputs += [
            [hashlib.sha256(t.encode()).hexdigest(), dict(c), f, t] for t, c, f in zip(new_texts, counts, failed)
        ]
    cpu = time.process_time() - t0
    for k, row in enumerate(outputs):
        text = row.pop()
        row.append(None if gold is None else [j for j, v in enumerate(gold[k]) if value_survives(v, text)])
    out.write_text(json.dumps(outputs))
    counts = dict(engine.triage.counts) if engine.triage is not None else {}
    print(
        json.dumps(
            {
                "docs": len(texts),
                "chars": sum(map(len, texts)),
                "setup_cpu_seconds": round(setup, 2),
                "cpu_seconds": round(cpu, 2),
                "docs_per_cpu_second": round(len(texts) / cpu, 1),
                "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
                "triage": counts,
                **(
                    {}
                    if gold is None
                    else {"gold_values": sum(map(len, gold)), "gold_values_left": sum(len(r[3]) for r in outputs)}
                ),
            }
        )
    )


def compare(full: list, triaged: list) -> dict:
    """Documents whose redacted text differs, and the replaced entities the full engine made
    and the triaged one did not (`lost`) or the other way round (`added`), by type; gold values
    left only with the triage (`gold_values_lost`) or only without it (`gold_values_gained`)."""
    lost, added, differ = Counter(), Counter(), 0
    values_lost = values_gained = 0
    for (digest_a, counts_a, failed_a, left_a), (digest_b, counts_b, failed_b, left_b) in zip(full, triaged):
        if (digest_a, failed_a) != (digest_b, failed_b) or counts_a != counts_b:
            differ += 1
            lost.update(Counter(counts_a) - Counter(counts_b))
            added.update(Counter(counts_b) - Counter(counts_a))
        if left_a is not None:
            values_lost += len(set(left_b) - set(left_a))
            values_gained += len(set(left_a) - set(left_b))
    out = {
        "docs_differing": differ,
        "lost": dict(sorted(lost.items())),
        "added": dict(sorted(added.items())),
        "entities_full": sum(sum(c.values()) for _, c, _, _ in full),
        "docs_with_phi_full": sum(1 for _, c, _, _ in full if c),
    }
    if full and full[0][3] is not None:
        out.update(gold_values_lost=values_lost, gold_values_gained=values_gained)
    return out


def measure(name: str, n: int, work: Path, profile: str = "literature") -> dict:
    row = {}
    outputs = {}
    for variant in ("full", "triage"):
        out = work / f"{profile}-{name}-{variant}.json"
        proc = subprocess.run(
            [sys.executable, __file__, "--worker", name, str(n), profile, variant, str(out)],
            capture_output=True,
            text=True,
            cwd=ROOT,
        )
        if proc.returncode:
            raise SystemExit(f"{profile}/{name}/{variant} failed:\n{proc.stderr[-2000:]}")
        row[variant] = json.loads(proc.stdout.strip().splitlines()[-1])
        outputs[variant] = json.loads(out.read_text())
        out.unlink()
    tri = row["triage"]["triage"]
    row["triage"]["share_sent"] = round(tri["chars_sent"] / tri["chars_in"], 4) if tri.get("chars_in") else None
    row["speedup_docs_per_cpu_second"] = round(
        row["triage"]["docs_per_cpu_second"] / row["full"]["docs_per_cpu_second"], 2
    )
    row["difference"] = compare(outputs["full"], outputs["triage"])
    return row


def _git() -> dict:
    def run(*args):
        return subprocess.run(["git", *args], capture_output=True, text=True, cwd=ROOT).stdout.strip()

    return {"commit": run("rev-parse", "HEAD"), "dirty": bool(run("status", "--porcelain", "pipeline", "scripts"))}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--docs", type=int, default=2000, help="real abstracts")
    ap.add_argument("--planted", type=int, default=400, help="planted abstracts")
    ap.add_argument("--no-dev", action="store_true", help="skip the deid-dev and asq-dev notes")
    ap.add_argument(
        "--profiles",
        default="literature,clinical",
        help="comma-separated: literature (sets: abstracts, planted, the dev sets), clinical (the dev sets)",
    )
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--worker", nargs=5, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        name, n, profile, variant, out = args.worker
        worker(name, int(n), profile, variant, Path(out))
        return
    profiles = args.profiles.split(",")
    if set(profiles) - {"literature", "clinical"}:
        ap.error(f"--profiles: literature and/or clinical, not {args.profiles!r}")
    report = {
        "command": "python "
        + " ".join(
            [
                str(Path(sys.argv[0]).relative_to(ROOT) if Path(sys.argv[0]).is_absolute() else sys.argv[0]),
                *sys.argv[1:],
            ]
        ),
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "git": _git(),
        "cpus": os.cpu_count(),
        "load_average_start": [round(x, 2) for x in os.getloadavg()],
        "batch_size": BATCH,
        "profile": "literature",
        "planted_seed": PLANTED_SEED,
        "sets": {},
    }
    dev = [] if args.no_dev else [("deid-dev", 10**9), ("asq-dev", 10**9)]
    runs = []
    if "literature" in profiles:
        runs += [
            ("literature", name, n) for name, n in [("abstracts", args.docs), ("planted_abstracts", args.planted), *dev]
        ]
    if "clinical" in profiles:
        report["clinical"] = {"profile": "clinical", "sets": {}}
        runs += [("clinical", name, n) for name, n in dev]
    with tempfile.TemporaryDirectory() as tmp:
        for profile, name, n in runs:
            t0 = time.time()
            where = report["sets"] if profile == "literature" else report["clinical"]["sets"]
            where[name] = {**measure(name, n, Path(tmp), profile), "wall_seconds": round(time.time() - t0, 1)}
            print(profile, name, json.dumps(where[name]["difference"]), file=sys.stderr)
    report["load_average_end"] = [round(x, 2) for x in os.getloadavg()]
    if "abstracts" in report["sets"]:
        default_run = json.loads((ROOT / "bench" / "default_run.json").read_text())
        phi = next(s for s in default_run["stages"] if s["stage"] == "phi")
        rates = report["sets"]["abstracts"]
        report["projected_default_run"] = {
            "docs_into_phi": phi["docs_in"],
            "num_proc": 2,
            "measured_phi_seconds": phi["seconds"],
            "measured": f"bench/default_run.json ({default_run['date']})",
            **{
                f"phi_seconds_{v}": round(phi["docs_in"] / rates[v]["docs_per_cpu_second"] / 2, 1)
                for v in ("full", "triage")
            },
        }
    args.out.parent.mkdir(exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1, sort_keys=True) + "\n")
    summary = {
        f"{p}/{k}": {
            "full": v["full"]["docs_per_cpu_second"],
            "triage": v["triage"]["docs_per_cpu_second"],
            "share_sent": v["triage"]["share_sent"],
            **v["difference"],
        }
        for p, sets in (("literature", report["sets"]), ("clinical", report.get("clinical", {}).get("sets", {})))
        for k, v in sets.items()
    }
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
