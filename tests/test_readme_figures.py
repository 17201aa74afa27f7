"""The figures in README.md and docs/ agree with the result files, and a changed figure is caught."""
import re
import shutil

from conftest import ROOT, run_cli

BLOCK = re.compile(r"<!-- figures:([\w-]+) -->\n(.*?)<!-- /figures:\1 -->", re.S)


def test_readme_figures_match_result_files():
    # No arguments: README.md and every docs page.
    proc = run_cli("scripts/figures/readme_figures.py", "--check", check=False)
    assert proc.returncode == 0, proc.stderr


def test_check_names_a_changed_figure(tmp_path):
    text = (ROOT / "docs" / "filters.md").read_text(encoding="utf-8")
    blocks = dict(BLOCK.findall(text))
    # Change one number inside the heuristics table: the check must fail and name that block.
    body = blocks["heuristics-table"]
    number = re.search(r"\d+\.\d+ %", body)[0]
    path = tmp_path / "filters.md"
    path.write_text(text.replace(body, body.replace(number, "9" + number, 1)), encoding="utf-8")
    proc = run_cli("scripts/figures/readme_figures.py", "--check", str(path), check=False)
    assert proc.returncode == 1
    assert "figures block 'heuristics-table' is stale" in proc.stderr and "9" + number in proc.stderr
    # --write puts the figure back.
    run_cli("scripts/figures/readme_figures.py", "--write", str(path))
    assert path.read_text(encoding="utf-8") == text
    # An inline figure tied to a result file is checked too; one in backticks is an example.
    inline = tmp_path / "inline.md"
    inline.write_text("ratio <!-- fig results.json:ours_vs_datatrove_docs_per_cpu_s .1f -->0.0<!-- /fig -->x, "
                      "written `<!-- fig FILE:PATH FORMAT -->VALUE<!-- /fig -->`\n")
    proc = run_cli("scripts/figures/readme_figures.py", "--check", str(inline), check=False)
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
    proc = run_cli("scripts/figures/readme_figures.py", "--check", "--root", str(tmp_path), check=False)
    assert proc.returncode == 1
    stale = [line.split(": figure ")[0] for line in proc.stderr.splitlines() if "is stale" in line]
    assert sorted(stale) == ["README.md", "docs/extra/new.md", "docs/tokenizer.md"], proc.stderr
    run_cli("scripts/figures/readme_figures.py", "--write", "--root", str(tmp_path))
    assert page.read_text(encoding="utf-8") == original
    assert readme.read_text(encoding="utf-8") == (ROOT / "README.md").read_text(encoding="utf-8")


def test_every_figures_block_is_on_a_page():
    """Moving text between README and docs/ must not drop a checked table: every renderer's
    block is on some page, and the measurement pages keep their figures."""
    names = {}
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]:
        for name, _ in BLOCK.findall(page.read_text(encoding="utf-8")):
            names[name] = page.name
    proc = run_cli(
        "-c", "import scripts.figures.readme_figures as r; print(' '.join(r.RENDERERS))"
    )
    assert set(proc.stdout.split()) == set(names), names
    inline = {
        p.name: len(re.findall(r"<!-- fig ", p.read_text(encoding="utf-8")))
        for p in [ROOT / "README.md", *(ROOT / "docs").glob("*.md")]
    }
    assert inline["README.md"] >= 5 and inline["phi.md"] >= 20 and inline["tokenizer.md"] >= 20, inline


def _subset(part, whole) -> bool:
    """Every key `part` sets is in `whole` with the same value (nested mappings compared key by key)."""
    if isinstance(part, dict):
        return isinstance(whole, dict) and all(k in whole and _subset(v, whole[k]) for k, v in part.items())
    return part == whole


def test_readme_is_a_newcomers_page(tmp_path):
    """README.md: at most 200 lines, a ```yaml config starting in its first 120 lines that is a
    valid excerpt of configs/pubmed.yaml, and no figure in its first 60 (the first screen)."""
    import yaml

    from pipeline.config import load_config
    from pipeline.stages import REGISTRY

    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 200, f"README.md has {len(lines)} lines"
    early = [n for n, line in enumerate(lines[:60], 1) if "<!-- fig" in line]
    assert not early, f"figure macros on README lines {early}"
    start = next((i for i, line in enumerate(lines) if line.strip() == "```yaml"), None)
    assert start is not None and start < 120, "no ```yaml block starting in README's first 120 lines"
    end = next(i for i in range(start + 1, len(lines)) if lines[i].strip() == "```")
    text = "\n".join(lines[start + 1 : end])
    config = yaml.safe_load(text)
    names = [next(iter(entry)) for entry in config["stages"]]
    assert names and all(name in REGISTRY for name in names), names
    # Valid as a config file (as a user would save it), input files aside.
    path = tmp_path / "readme.yaml"
    path.write_text(text, encoding="utf-8")
    assert [s.name for s in load_config(path, check_inputs=False).stages] == names
    # An excerpt of the default config: the same stages in order, every option it sets as there.
    full = yaml.safe_load((ROOT / "configs" / "pubmed.yaml").read_text(encoding="utf-8"))
    assert names == [next(iter(entry)) for entry in full["stages"]]
    assert _subset({k: v for k, v in config.items() if k != "stages"}, full)
    for short, entry in zip(config["stages"], full["stages"]):
        assert _subset(short, entry), short
