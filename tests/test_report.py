"""The run report of a small real run: its figures match stats.json and the manifest, and no
PHI reaches it."""
import html
import json
import re

from conftest import ROOT, run_cli, write_config, write_jsonl


def _figures(page: str) -> dict:
    blob = re.search(r'<script type="application/json" id="figures">(.*?)</script>', page, re.S).group(1)
    return json.loads(html.unescape(blob))


def test_report_matches_stats(tmp_path):
    cfg = write_config(tmp_path / "c.yaml", (ROOT / "configs/tiny.yaml").read_text()
                       .replace("limit: 300", "limit: 120").replace("output_dir: runs/tiny", f"output_dir: {tmp_path / 'run'}"))
    run_cli("-m", "pipeline", "run", "--config", str(cfg))
    run = tmp_path / "run"
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
    assert page.count("<img") >= 4 and "myocardial" in page
    assert "no_abstract" in page                         # removed examples by reason


def test_removed_examples_are_redacted(tmp_path):
    note = "Patient: Eleanor Vasquez-Hale, SSN 219-09-9999, phone (617) 555-0199."
    rows = [{"id": "short", "text": note}, {"id": "long", "text": " ".join(["The cohort was followed for outcomes."] * 30)}]
    src = write_jsonl(tmp_path / "in.jsonl", rows)
    cfg = write_config(tmp_path / "c.yaml", f"input: {{paths: [{src}]}}\noutput_dir: {tmp_path / 'run'}\n"
                                            "stages: [normalize, {heuristics: {min_words: 20}}, phi]\n")
    run_cli("-m", "pipeline", "run", "--config", str(cfg))
    page = (tmp_path / "run/report.html").read_text()
    assert "too_few_words" in page and "[NAME]" in page and "[SSN]" in page
    for value in ("Eleanor", "Vasquez", "219-09-9999", "555-0199"):
        assert value not in page
