"""Run report: report.html in the run folder, from the stages' stats."""
from __future__ import annotations

import html
from pathlib import Path

from pipeline.store import STATS, read_json


def load_stats(run_dir: Path) -> list[dict]:
    return [read_json(p) for p in sorted((run_dir / "stages").glob("*/" + STATS))]


def write_report(run_dir: Path) -> Path:
    run_dir = Path(run_dir)
    rows = []
    for s in load_stats(run_dir):
        removed = ", ".join(f"{html.escape(k)}: {v}" for k, v in s["removed"].items()) or "-"
        rows.append(f"<tr><td>{html.escape(s['stage'])}</td><td>{s['docs_in']}</td><td>{s['docs_out']}</td>"
                    f"<td>{removed}</td><td>{s['seconds']}</td></tr>")
    page = ("<!doctype html><meta charset='utf-8'><title>medprep run</title><h1>medprep run</h1>"
            "<table border=1><tr><th>stage</th><th>in</th><th>out</th><th>removed</th><th>s</th></tr>"
            + "".join(rows) + "</table>")
    out = run_dir / "report.html"
    out.write_text(page, encoding="utf-8")
    return out
