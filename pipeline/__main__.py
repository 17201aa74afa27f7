"""python -m pipeline run|stages|report|inspect|cache (the command is in pipeline/cli.py)."""
from pipeline.cli import main

if __name__ == "__main__":
    main()
