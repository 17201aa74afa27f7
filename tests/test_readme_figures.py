"""The figures in README.md and docs/ agree with the result files, and a changed figure is caught."""
import re
import shutil

from conftest import ROOT, run_cli

BLOCK = re.compile(r"<!-- figures:([\w-]+) -->\n(.*?)<!-- /figures:\1 -->", re.S)


def test_readme_figures_match_result_files():
    # No arguments: README.md and every docs page.
    proc = run_cli("scripts/readme_figures.py", "--check", check=False)
    assert proc.returncode == 0, proc.stderr


def test_check_names_a_changed_figure(tmp_path):
    text = (ROOT / "docs" / "filters.md").read_text(encoding="utf-8")
    blocks = dict(BLOCK.findall(text))
    # Change one number inside the heuristics table: the check must fail and name that block.
    body = blocks["heuristics-table"]
    number = re.search(r"\d+\.\d+ %", body)[0]
    path = tmp_path / "filters.md"
    path.write_text(text.replace(body, body.replace(number, "9" + number, 1)), encoding="utf-8")
    proc = run_cli("scripts/readme_figures.py", "--check", str(path), check=False)
    assert proc.returncode == 1
    assert "figures block 'heuristics-table' is stale" in proc.stderr and "9" + number in proc.stderr
    # --write puts the figure back.
    run_cli("scripts/readme_figures.py", "--write", str(path))
    assert path.read_text(encoding="utf-8") == text
    # An inline figure tied to a result file is checked too; one in backticks is an example.
    inline = tmp_path / "inline.md"
    inline.write_text("ratio <!-- fig results.json:ours_vs_datatrove_docs_per_cpu_s .1f -->0.0<!-- /fig -->x, "
                      "written `<!-- fig FILE:PATH FORMAT -->VALUE<!-- /fig -->`\n")
    proc = run_cli("scripts/readme_figures.py", "--check", str(inline), check=False)
    assert proc.returncode == 1 and "results.json:ours_vs_datatrove_docs_per_cpu_s is stale" in proc.stderr
    assert "FILE:PATH" not in proc.stderr


def test_default_check_reads_readme_and_every_docs_page(tmp_path):
    """Without file arguments the checker reads README.md and docs/**/*.md: a stale figure in
    any docs page (one that exists only in the copy, too) fails naming the page."""
    shutil.copy(ROOT / "README.md", tmp_path / "README.md")
    shutil.copytree(ROOT / "docs", tmp_path / "docs")
    page = tmp_path / "docs" / "tokenizer.md"
    original = page.read_text(encoding="utf-8")
    marker = "<!-- fig default_run.json:tokenizer.comparison.gpt2.vocab_size , -->"
    value = re.search(re.escape(marker) + r"(.*?)<!-- /fig -->", original)[1]
    page.write_text(original.replace(marker + value, marker + "1", 1), encoding="utf-8")
    new_page = tmp_path / "docs" / "extra" / "new.md"
    new_page.parent.mkdir()
    new_page.write_text("<!-- fig default_run.json:sequences , -->1<!-- /fig -->\n", encoding="utf-8")
    readme = tmp_path / "README.md"
    seqs = "<!-- fig default_run.json:sequences , -->"
    text = readme.read_text(encoding="utf-8")
    readme.write_text(re.sub(re.escape(seqs) + r".*?<!--", lambda m: seqs + "1<!--", text, count=1), encoding="utf-8")
    proc = run_cli("scripts/readme_figures.py", "--check", "--root", str(tmp_path), check=False)
    assert proc.returncode == 1
    stale = [line.split(": figure ")[0] for line in proc.stderr.splitlines() if "is stale" in line]
    assert sorted(stale) == ["README.md", "docs/extra/new.md", "docs/tokenizer.md"], proc.stderr
    run_cli("scripts/readme_figures.py", "--write", "--root", str(tmp_path))
    assert page.read_text(encoding="utf-8") == original
    assert readme.read_text(encoding="utf-8") == (ROOT / "README.md").read_text(encoding="utf-8")


def test_every_figures_block_is_on_a_page():
    """Moving text between README and docs/ must not drop a checked table: every renderer's
    block is on some page, and the measurement pages keep their figures."""
    names = {}
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]:
        for name, _ in BLOCK.findall(page.read_text(encoding="utf-8")):
            names[name] = page.name
    proc = run_cli("-c", "import sys; sys.path.insert(0, 'scripts'); import readme_figures as r; print(' '.join(r.RENDERERS))")
    assert set(proc.stdout.split()) == set(names), names
    inline = {p.name: len(re.findall(r"<!-- fig ", p.read_text(encoding="utf-8")))
              for p in [ROOT / "README.md", *(ROOT / "docs").glob("*.md")]}
    assert inline["README.md"] >= 5 and inline["phi.md"] >= 20 and inline["tokenizer.md"] >= 20, inline
