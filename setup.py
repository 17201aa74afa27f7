"""The wheel carries the files a run reads as package data: setuptools' build step copies the
repository's shipped folders into pipeline/_resources/ of the build (the checkout keeps them
where they are; pipeline/resources.py finds them in either place). Everything else is in
pyproject.toml."""
import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

# pipeline/resources.py's SHIPPED (tests/test_install.py checks the two agree).
RESOURCES = ("configs", "data/models", "data/phi", "data/us-hospitals", "data/samples", "data/pubmedqa")
# Labelled corpora that only the detector's training and the PHI evaluation read: not in the wheel.
NOT_SHIPPED = ("uner-ewt", "web-ner", "litbank", "news")


class BuildWithResources(build_py):
    def run(self):
        super().run()
        if self.editable_mode:           # an editable install reads the checkout's own files
            return
        here = Path(__file__).resolve().parent
        target = Path(self.build_lib) / "pipeline" / "_resources"
        for folder in RESOURCES:
            src = here / folder
            if not src.is_dir():
                raise SystemExit(f"setup.py: {src} is missing: the wheel ships it")
            shutil.rmtree(target / folder, ignore_errors=True)
            shutil.copytree(src, target / folder, ignore=shutil.ignore_patterns("*.tmp", "__pycache__", *NOT_SHIPPED))


setup(cmdclass={"build_py": BuildWithResources})
