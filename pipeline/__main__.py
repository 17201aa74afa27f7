"""python -m pipeline run|stage|stages|init|fetch|report|inspect|cache: the `medprep` command (pipeline/cli.py)."""
from pipeline.cli import main

if __name__ == "__main__":
    main()
