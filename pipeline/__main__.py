"""python -m pipeline run|stages|report|inspect|cache

To run or rerun one stage or a group (dedup, filters) instead of the whole chain:
python -m pipeline.stage NAME --config C (see python -m pipeline.stage --help)."""
from __future__ import annotations

import argparse
import sys

from pipeline.cli_common import user_errors
from pipeline.config import CONFIG_HELP


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m pipeline", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run the whole chain of a config",
                         description="Run every stage of a config's chain; finished stages with the same "
                                     "config and input are skipped.")
    run.add_argument("--config", required=True, metavar="YAML", help=CONFIG_HELP)
    run.add_argument("--input", nargs="+", help="input files instead of the config's input.paths "
                                                "(relative to the current directory)")
    run.add_argument("--output", help="run folder instead of the config's output_dir")
    run.add_argument("--text-unit", choices=["file", "line"],
                     help="plain-text input: one document per file, or one per non-empty line "
                          "(overrides input.text_unit)")
    run.add_argument("--force", action="store_true", help="rerun finished stages too")
    run.add_argument("--executor", choices=["local", "ray"],
                     help="who runs the shard tasks (overrides executor.kind): local processes, or Ray "
                          "(a local Ray instance, or the cluster at executor.address)")
    sub.add_parser("stages", help="list the stages and groups")
    rep = sub.add_parser("report", help="(re)write report.html of a run folder")
    rep.add_argument("run_dir")
    cache = sub.add_parser("cache", help="list (or prune) the run's cache of per-document results",
                           description="List the cache's keys (cache/<kind>/<namespace>) with their sizes and "
                                       "whether a finished stage of the run uses them. --prune removes those no "
                                       "finished stage lists, then the oldest entries while the cache is over "
                                       "cache.max_mb. Do not prune while the run is running.")
    cache.add_argument("--config", required=True, metavar="YAML", help=CONFIG_HELP)
    cache.add_argument("--output", help="run folder instead of the config's output_dir")
    cache.add_argument("--prune", action="store_true", help="remove unused namespaces, then trim to cache.max_mb")
    insp = sub.add_parser("inspect", help="list the documents a run removed, by stage and reason (or --summary)",
                          description="Removed documents of a run folder with their reason, the stage's score "
                                      "columns and, where the run kept it, their text; --summary prints the funnel. "
                                      "In a clinical run nothing of phi or the stages before it is shown.")
    insp.add_argument("run_dir", metavar="RUN")
    insp.add_argument("--stage", help="a stage name (or its NN_name folder)")
    insp.add_argument("--reason", help="a removal reason (as --summary lists them)")
    insp.add_argument("--limit", type=int, default=20, help="documents to list in all (default 20)")
    insp.add_argument("--chars", type=int, default=300, help="characters of text per document (0: all)")
    insp.add_argument("--summary", action="store_true", help="the funnel: per stage in, out, removed by reason")
    insp.add_argument("--json", action="store_true", help="one JSON document on stdout, for scripts")
    args = parser.parse_args(argv)

    with user_errors():
        if args.command == "stages":
            from pipeline.stages import CHAIN_ORDER, GROUPS, REGISTRY
            for name in CHAIN_ORDER:
                print(f"{name:14s} {REGISTRY[name].summary}")
            for group, members in GROUPS.items():
                print(f"{group:14s} group: {' -> '.join(members)}")
        elif args.command == "run":
            from pipeline.config import load_config
            from pipeline.runner import run_chain
            config = load_config(args.config, input_paths=args.input, output_dir=args.output,
                                 text_unit=args.text_unit, executor=args.executor)
            manifest = run_chain(config, force=args.force)
            print(f"done: {config.output_dir} ({manifest.get('sequences', 0)} sequences, "
                  f"{manifest.get('tokens', 0)} tokens)", file=sys.stderr)
        elif args.command == "cache":
            from pipeline.cache import cache_root, describe, prune
            from pipeline.config import load_config
            config = load_config(args.config, output_dir=args.output, check_inputs=False)
            if args.prune:
                removed = prune(config)
                for line in removed:
                    print(f"removed {line}")
                print(f"pruned: {len(removed)} removed", file=sys.stderr)
            entries = describe(config)
            for e in entries:
                print(f"{e['key']}  {e['files']} files  {e['bytes'] / 2**20:.1f} MB  "
                      f"{'in use' if e['in_use'] else 'unused'}")
            total = sum(e["bytes"] for e in entries)
            print(f"{cache_root(config) / 'cache'}: {total / 2**20:.1f} MB of {config.run.cache.max_mb} MB",
                  file=sys.stderr)
        elif args.command == "inspect":
            from pipeline.inspect import main as inspect_main
            inspect_main(args)
        elif args.command == "report":
            from pipeline.errors import UserError
            from pipeline.report import write_report
            from pipeline.storage import RunPath
            if not (RunPath.of(args.run_dir) / "stages").is_dir():
                raise UserError(f"{args.run_dir}: not a run folder (no stages/)")
            print(write_report(RunPath.of(args.run_dir)))


if __name__ == "__main__":
    main()
