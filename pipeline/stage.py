"""python -m pipeline.stage NAME ...: run one stage or group (the command is in pipeline/cli.py).
This module is only the command's name; the stage contract is pipeline/stages/base.py."""
from pipeline.cli import stage_main

if __name__ == "__main__":
    stage_main()
