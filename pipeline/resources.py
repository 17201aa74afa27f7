"""The files a run reads that ship with medprep, found in one place: the default configs
(configs/*.yaml), the KenLM model and its side file (data/models/), the PHI lists and the
learned detector (data/phi/), the hospital list (data/us-hospitals/), the small MEDLINE
sample the tiny config reads (data/samples/) and the PubMedQA items decontaminate checks
against (data/pubmedqa/).

Every such file is named by its path in the repository (`data/models/pubmed_lm.binary`), and
`resource(path)` says where it is: in an installed wheel, under the package's `_resources/`
folder (setup.py copies those folders there when it builds the wheel); in a checkout (an
editable install, or PYTHONPATH), the repository itself. Nothing else in the package builds a
path to a shipped file."""
from __future__ import annotations

from functools import lru_cache
from importlib.resources import files
from pathlib import Path

# The shipped folders, as setup.py's RESOURCES copies them (the same list: tests/test_install.py).
SHIPPED = ("configs", "data/models", "data/phi", "data/us-hospitals", "data/samples", "data/pubmedqa")


@lru_cache(maxsize=1)
def resource_root() -> Path:
    """The folder the repository paths of shipped files are relative to."""
    package = Path(str(files("pipeline")))
    packaged = package / "_resources"
    return packaged if packaged.is_dir() else package.resolve().parent


def resource(path: str) -> Path:
    """A shipped file by its repository path (`data/phi/surnames.txt.gz`)."""
    return resource_root() / path


def installed() -> bool:
    """Whether the shipped files come from a built wheel (not a checkout)."""
    return resource_root().name == "_resources"


def shipped_configs() -> dict[str, Path]:
    """The configs that ship with medprep, by name (`pubmed`: configs/pubmed.yaml)."""
    return {p.stem: p for p in sorted(resource("configs").glob("*.yaml"))}


def is_shipped_config(path: Path) -> bool:
    return path.resolve().parent == resource("configs").resolve()


def find_config(value: str) -> Path:
    """--config: a YAML file, or a shipped config when no such file exists here: by its name
    (`pubmed`, `tiny`) or by its repository path (`configs/pubmed.yaml`, as the docs write it,
    after a `pip install` outside the checkout)."""
    path = Path(value)
    if path.is_file():
        return path
    shipped = shipped_configs()
    if path.suffix in (".yaml", ".yml") or "/" in value:
        named = shipped.get(path.stem)
        same = named is not None and path.parent.as_posix() in ("configs", "./configs")
        return named if same else path
    return shipped.get(value, path)
