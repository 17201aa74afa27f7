"""python -m pipeline run|stage|stages|init|fetch|report|inspect|cache: the `medprep` command (pipeline/cli.py)."""
from pipeline.cli import entry, main  # noqa: F401  (main: tests run the CLI in-process)

if __name__ == "__main__":
    entry()
