"""Every `medprep` / `python -m pipeline` command in README.md and docs/ as written: each one parses
with the real command line (a renamed option or subcommand fails here), and the cheap ones run as
written, from a folder where their files exist: listing the stages, `init` on a JSON Lines file,
`inspect` and `report` of a finished run, one stage on a small input."""
from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT, write_jsonl
from pipeline.cli import build_parser, build_stage_parser

PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.M | re.S)
SHELL = ("", "bash", "sh", "console", "shell")
PREFIXES = ("medprep ", "python -m pipeline ", "python -m pipeline.stage ", ".venv/bin/python -m pipeline ")
# Words of a synopsis, not of a command: a placeholder in capitals, an alternative, an optional part.
SYNOPSIS = re.compile(r"\[|\||\.\.\.|\b(?:NAME|FILES?|DIR|RUN|YAML|DEST|PATH|C|S|R|X)\b")


def documented_commands() -> list[tuple[str, str]]:
    """(page, command) for each command line in a fenced block of the pages, comment removed."""
    out = []
    for page in PAGES:
        for language, block in FENCE.findall(page.read_text(encoding="utf-8")):
            if language not in SHELL:
                continue
            for line in block.splitlines():
                line = line.split("  #")[0].split(" # ")[0].strip()
                for part in line.split(" && "):
                    part = part.strip()
                    if part.startswith(PREFIXES) and not SYNOPSIS.search(part):
                        out.append((page.name, part))
    return out


def argv_of(command: str) -> tuple[str, list[str]]:
    words = shlex.split(command)
    if words[0] == "medprep":
        return ("stage", words[2:]) if words[1:2] == ["stage"] else ("main", words[1:])
    module = words[words.index("-m") + 1]
    return ("stage", words[words.index("-m") + 2:]) if module == "pipeline.stage" else ("main", words[3:])


COMMANDS = documented_commands()


def test_the_pages_document_commands():
    # Guards the extraction itself: the pages name these in code blocks.
    assert len(COMMANDS) >= 15
    assert {argv_of(c)[1][0] for _, c in COMMANDS if argv_of(c)[0] == "main"} >= {"run", "inspect", "init", "stages"}


@pytest.mark.parametrize("page, command", COMMANDS, ids=[f"{p}: {c}" for p, c in COMMANDS])
def test_each_documented_command_parses(page, command):
    kind, argv = argv_of(command)
    parser = build_stage_parser() if kind == "stage" else build_parser()
    try:
        parser.parse_args(argv)
    except SystemExit as exc:
        pytest.fail(f"{page}: `{command}` does not parse (exit {exc.code})")


def _cheap(command: str) -> bool:
    kind, argv = argv_of(command)
    if kind == "stage":
        return "--input" in argv and argv[0] in ("dedup_exact", "dedup")
    return argv[0] in ("stages", "inspect", "report", "init")


def test_the_cheap_ones_run_as_written(tmp_path, tiny_run):
    """From a folder holding what they name: runs/pubmed (a copy of the tiny run), my.jsonl,
    notes.jsonl and configs/ (the shipped ones)."""
    cwd = tmp_path / "here"
    shutil.copytree(tiny_run, cwd / "runs/pubmed")
    shutil.copytree(ROOT / "configs", cwd / "configs")
    docs = [{"id": f"d{i}", "pmid": str(30000000 + i), "journal": "J", "text": f"Abstract {i}. " * 30}
            for i in range(40)]
    write_jsonl(cwd / "my.jsonl", docs)
    write_jsonl(cwd / "notes.jsonl", [{"id": f"n{i}", "patient_id": "p1", "text": "Pt seen. " * 10} for i in range(5)])
    cheap = [c for _, c in COMMANDS if _cheap(c)]
    assert len(cheap) >= 6
    for command in dict.fromkeys(cheap):
        kind, argv = argv_of(command)
        argv = [str(tmp_path / "dd") if a == "/tmp/dd" else a for a in argv]
        module = ["-m", "pipeline.stage"] if kind == "stage" else ["-m", "pipeline"]
        if argv[0] == "init":
            for written in ("medprep.yaml",):
                (cwd / written).unlink(missing_ok=True)
            argv = argv + (["--profile", "literature"] if "--profile" not in argv else [])
        done = subprocess.run([sys.executable, *module, *argv], cwd=cwd, capture_output=True, text=True,
                              env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)})
        # The tiny run removed nothing for some reasons a page names: that is one line, not a failure.
        absent = argv[0] == "inspect" and "--reason" in argv and "no document was removed as" in done.stderr
        assert done.returncode == 0 or absent, f"`{command}`: exit {done.returncode}\n{done.stderr[-1500:]}"
        assert "Traceback" not in done.stderr, command


def test_every_shipped_config_a_page_names_exists():
    named = set()
    for page in PAGES:
        named |= set(re.findall(r"(?:--config |CONFIG=)configs/([\w-]+\.yaml)", page.read_text(encoding="utf-8")))
    missing = sorted(n for n in named if not (ROOT / "configs" / n).exists())
    assert not missing, missing


def test_paths_in_commands_exist_or_are_made_by_the_run():
    # A documented --config path that no shipped config has is a command that cannot run as written.
    for page, command in COMMANDS:
        for path in re.findall(r"--config (\S+\.ya?ml)", command):
            assert (ROOT / path).exists() or Path(path).name in ("medprep.yaml", "my.yaml", "c.yaml"), (page, command)
