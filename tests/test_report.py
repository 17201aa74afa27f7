"""The run report of a small real run: its figures match stats.json and the manifest, and no
PHI reaches it."""
import html
import json
import re

import pytest

from conftest import read_arrow_dir, run_cli, write_config, write_jsonl


def _figures(page: str) -> dict:
    blob = re.search(r'<script type="application/json" id="figures">(.*?)</script>', page, re.S).group(1)
    return json.loads(html.unescape(blob))


@pytest.mark.slow
def test_report_matches_stats(tiny_run):
    run = tiny_run
    page = (run / "report.html").read_text()
    figures = _figures(page)
    stats = [json.loads(p.read_text()) for p in sorted((run / "stages").glob("*/stats.json"))]
    assert figures["funnel"] == [[s["stage"], s["docs_in"], s["docs_out"]] for s in stats]
    assert figures["removed"] == {s["stage"]: s["removed"] for s in stats}
    manifest = json.loads((run / "manifest.json").read_text())
    assert figures["sequences"] == manifest["sequences"] and figures["steps_per_epoch"] == manifest["steps_per_epoch"]
    phi = next(s for s in stats if s["stage"] == "phi")
    assert figures["phi_entities"] == phi["entities"]
    for s in stats:                                      # the visible funnel table shows the same numbers
        assert f"<td>{s['stage']}</td><td>{s['docs_in']}</td><td>{s['docs_out']}</td>" in page
    # One PNG each: funnel, language score, perplexity, document length, PHI entities (when any).
    assert page.count("<img") == 4 + bool(phi["entities"])

    # Token figures, recomputed from the run's tokenizer and the documents that reached the split.
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(str(run / "tokenizer/tokenizer.json"))
    for term, n in figures["domain_terms"].items():
        assert n == len(tok.encode(" " + term, add_special_tokens=False).ids)
        assert f"<td>{term}</td><td>{n}</td>" in page
    texts = read_arrow_dir(run / "stages/09_split/data")["text"].to_pylist()
    tokens = sum(len(e.ids) for e in tok.encode_batch(texts, add_special_tokens=False))
    assert figures["tokens_per_word"] == round(tokens / sum(len(t.split()) for t in texts), 3)

    # Removed examples: up to two per reason of every stage, each really removed there for it.
    section = page.split("<h2>Removed examples", 1)[1]
    examples = [tuple(html.unescape(c) for c in row) for row in
                re.findall(r"<tr><td>(.*?)</td><td>(.*?)</td><td>(.*?)</td><td>(.*?)</td></tr>", section, re.S)]
    shown = {}
    for stage, reason, doc_id, text in examples:
        shown.setdefault((stage, reason), []).append(doc_id)
        if stage == "normalize" and reason == "no_abstract":
            assert text == "(no text: set aside by the reader)"
    for s in stats:
        if s["stage"] in ("tokenizer", "pack") or not s["removed"]:
            continue
        removed = read_arrow_dir(run / "stages" / f"{s['position']:02d}_{s['stage']}" / "removed")
        reason_of = dict(zip(removed["id"].to_pylist(), removed["reason"].to_pylist()))
        for reason, n in s["removed"].items():
            ids = shown.get((s["stage"], reason), [])
            assert len(ids) == min(n, 2) and all(reason_of[i] == reason for i in ids), (s["stage"], reason)
    assert ("normalize", "no_abstract") in shown


def test_removed_examples_are_redacted(tmp_path):
    note = "Patient: Eleanor Vasquez-Hale, SSN 219-09-9999, phone (617) 555-0199."
    # The long document passes the filters: a run that keeps nothing ends in an error, not a report.
    kept = ("The cohort was followed for cardiovascular outcomes over five years. Incident heart failure, "
            "stroke and death were recorded by trained nurses at each annual visit in three regional hospitals, "
            "and blood pressure, weight and medication use were measured with the same protocol throughout.")
    rows = [{"id": "short", "text": note}, {"id": "long", "text": kept}]
    src = write_jsonl(tmp_path / "in.jsonl", rows)
    cfg = write_config(tmp_path / "c.yaml", f"input: {{paths: [{src}]}}\noutput_dir: {tmp_path / 'run'}\n"
                                            "stages: [normalize, {heuristics: {min_words: 20}}, phi]\n")
    run_cli("-m", "pipeline", "run", "--config", str(cfg))
    page = (tmp_path / "run/report.html").read_text()
    from pipeline.phi.placeholders import PLACEHOLDERS
    assert "<td>too_few_words</td>" in page
    assert html.escape(PLACEHOLDERS["PERSON"]) in page and html.escape(PLACEHOLDERS["US_SSN"]) in page
    for value in ("Eleanor", "Vasquez", "219-09-9999", "555-0199"):
        assert value not in page
