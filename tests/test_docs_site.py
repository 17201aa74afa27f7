"""The docs site builds with `mkdocs build --strict` (a warning is an error: a page left out of
the nav, a link to a missing page or anchor), and README's links into docs/ land on real pages
and headings."""
import re
import shutil

from conftest import ROOT, run_cli

LINK = re.compile(r"\]\(([^)\s]+)\)")


def build(config, site):
    return run_cli("-m", "mkdocs", "build", "--strict", "--config-file", str(config), "--site-dir", str(site),
                   check=False, timeout=120)


def test_site_builds_strict_and_readme_links_resolve(tmp_path):
    site = tmp_path / "site"
    proc = build(ROOT / "mkdocs.yml", site)
    assert proc.returncode == 0, proc.stderr
    assert "WARNING" not in proc.stderr, proc.stderr
    pages = sorted(p.stem for p in (ROOT / "docs").glob("*.md"))
    for page in pages:
        assert (site / ("index.html" if page == "index" else f"{page}/index.html")).is_file(), page
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    targets = [t for t in LINK.findall(readme) if "://" not in t]
    assert any(t.startswith("docs/") for t in targets)
    for target in targets:
        path, _, anchor = target.partition("#")
        assert (ROOT / path).exists(), f"README links to {target}: no such file"
        if path.startswith("docs/") and path.endswith(".md") and anchor:
            stem = path[len("docs/"):-len(".md")]
            html = (site / ("index.html" if stem == "index" else f"{stem}/index.html")).read_text(encoding="utf-8")
            assert f'id="{anchor}"' in html, f"README links to {target}: no such heading"


def test_strict_build_fails_on_a_broken_anchor(tmp_path):
    # The validation settings in mkdocs.yml are what make a broken anchor a warning.
    shutil.copy(ROOT / "mkdocs.yml", tmp_path / "mkdocs.yml")
    shutil.copytree(ROOT / "docs", tmp_path / "docs")
    with open(tmp_path / "docs" / "index.md", "a", encoding="utf-8") as f:
        f.write("\nSee [the shards](run-folder.md#no-such-heading).\n")
    proc = build(tmp_path / "mkdocs.yml", tmp_path / "site")
    assert proc.returncode != 0
    assert "no-such-heading" in proc.stderr, proc.stderr
