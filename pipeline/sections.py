"""A stage's part of the run report (report.html), and what it is made of: PNG plots
(matplotlib, embedded) and HTML tables. Stages build their Section from their stats in
`report_section`; pipeline/report.py lays the sections out."""
from __future__ import annotations

import base64
import html
import io
from dataclasses import dataclass, field

import numpy as np


@dataclass
class Section:
    """A titled block of the report (`title`, and its HTML `body`), the numbers it shows (merged
    into the page's JSON, id="figures"), and plots shown together under "Scores and lengths".
    `subsections` are further titled blocks of the same stage, after this one."""
    title: str = ""
    body: str = ""
    figures: dict = field(default_factory=dict)
    plots: list[str] = field(default_factory=list)
    subsections: list["Section"] = field(default_factory=list)


def pyplot():
    import matplotlib
    matplotlib.use("Agg")            # files only, no display
    import matplotlib.pyplot as plt
    return plt


def png(fig) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90, bbox_inches="tight")
    pyplot().close(fig)
    return "<img alt='figure' src='data:image/png;base64," + base64.b64encode(buf.getvalue()).decode() + "'>"


def hist(values, title, xlabel, line=None, log=False) -> str:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(5.2, 2.8))
    values = np.asarray(values, dtype=float)
    values = values[np.isfinite(values)]
    if log:
        values = np.log10(np.maximum(values, 1e-9))
        xlabel = f"log10 {xlabel}"
        line = np.log10(line) if line else None
    ax.hist(values, bins=50, color="#4C78A8")
    if line is not None:
        ax.axvline(line, color="#E45756", linestyle="--", label="threshold")
        ax.legend()
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    ax.set_ylabel("documents")
    return png(fig)


def bars(labels, values, title, horizontal=True) -> str:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.4, max(2.2, 0.32 * len(labels) + 0.8)))
    if horizontal:
        ax.barh(labels[::-1], values[::-1], color="#4C78A8")
        for i, v in enumerate(values[::-1]):
            ax.text(v, i, f" {v:,}", va="center", fontsize=8)
    else:
        ax.bar(labels, values, color="#4C78A8")
    ax.set_title(title)
    return png(fig)


def table(header, rows) -> str:
    head = "".join(f"<th>{html.escape(str(h))}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in r) + "</tr>" for r in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def column(sample, name: str):
    """A column of the report's sample of kept documents as numpy, or None where it is absent."""
    if sample is None or name not in sample.column_names:
        return None
    return sample[name].to_numpy(zero_copy_only=False)
