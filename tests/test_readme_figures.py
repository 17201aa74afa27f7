"""README figures agree with the result files, and a changed figure is caught."""
import re

from conftest import ROOT, run_cli


def test_readme_figures_match_result_files():
    proc = run_cli("scripts/readme_figures.py", "--check", check=False)
    assert proc.returncode == 0, proc.stderr


def test_check_names_a_changed_figure(tmp_path):
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    blocks = re.findall(r"<!-- figures:([\w-]+) -->\n(.*?)<!-- /figures:\1 -->", readme, re.S)
    assert {"bench-stages", "bench-chains", "heuristics-table", "minhash-scale"} <= {name for name, _ in blocks}
    # Change one number inside the heuristics table: the check must fail and name that block.
    name, body = next((nm, b) for nm, b in blocks if nm == "heuristics-table")
    number = re.search(r"\d+\.\d+ %", body)[0]
    changed = body.replace(number, "9" + number, 1)
    path = tmp_path / "README.md"
    path.write_text(readme.replace(body, changed), encoding="utf-8")
    proc = run_cli("scripts/readme_figures.py", "--check", "--readme", str(path), check=False)
    assert proc.returncode == 1
    assert "figures block 'heuristics-table' is stale" in proc.stderr and "9" + number in proc.stderr
    # --write puts the figure back.
    run_cli("scripts/readme_figures.py", "--write", "--readme", str(path))
    assert path.read_text(encoding="utf-8") == readme
    # An inline figure tied to a result file is checked too.
    inline = tmp_path / "inline.md"
    inline.write_text("ratio <!-- fig results.json:ours_vs_datatrove_docs_per_cpu_s .1f -->0.0<!-- /fig -->x\n")
    proc = run_cli("scripts/readme_figures.py", "--check", "--readme", str(inline), check=False)
    assert proc.returncode == 1 and "results.json:ours_vs_datatrove_docs_per_cpu_s is stale" in proc.stderr
