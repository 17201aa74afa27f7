"""python -m pipeline.stage NAME --config C [--input PATH ...] [--output DIR] [--force]

Runs one stage (or a group such as `dedup`) from the previous stage's output in the run
folder, or from any supported file given with --input."""
from __future__ import annotations

import argparse

from pipeline.cli_common import user_errors
from pipeline.config import CONFIG_HELP


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m pipeline.stage", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("name", help="a stage or group name (python -m pipeline stages)")
    parser.add_argument("--config", required=True, metavar="YAML", help=CONFIG_HELP)
    parser.add_argument("--input", nargs="+", help="input files for the (first) stage "
                                                   "(relative to the current directory)")
    parser.add_argument("--output", help="write the stage folder here instead of the run folder")
    parser.add_argument("--text-unit", choices=["file", "line"],
                        help="plain-text input: one document per file, or one per non-empty line")
    parser.add_argument("--force", action="store_true", help="rerun even if finished")
    parser.add_argument("--executor", choices=["local", "ray"],
                        help="who runs the shard tasks (overrides executor.kind)")
    args = parser.parse_args(argv)
    with user_errors():
        from pipeline.config import load_config
        from pipeline.runner import expand_names, run_stage, stage_dirs_for
        from pipeline.storage import RunPath

        config = load_config(args.config, text_unit=args.text_unit, check_inputs=False, executor=args.executor)
        specs = expand_names(config, [args.name])
        # Only a stage that reads the source needs the config's input files to exist.
        if args.input is None and specs[0] is config.stages[0]:
            load_config(args.config, text_unit=args.text_unit, check_inputs=True)
        dirs = stage_dirs_for(config)
        if args.output:
            out = RunPath.of(args.output, direct=config.output_dir.direct)
            for spec in specs:
                dirs[spec.name] = out if len(specs) == 1 else out / spec.folder
        for i, spec in enumerate(specs):
            run_stage(config, spec, input_paths=args.input if i == 0 else None,
                      output_dir=dirs[spec.name] if args.output else None, force=args.force,
                      stage_dirs=dirs)


if __name__ == "__main__":
    main()
