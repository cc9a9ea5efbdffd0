"""The command line: `python -m graders [IDS...] [options]`, `python -m graders watch ...`,
`python -m graders batch ...`. Parses, then hands over to grading, watch or batch."""

import argparse
import json
import os
import sys
import time
from pathlib import Path

from graders import catalog
from graders.runner import grading

USAGE_ERROR = 2
INTERRUPTED = 130  # as a shell reports a command stopped by Ctrl-C


def _positive(kind):
    def parse(text: str):
        value = kind(text)
        if value <= 0:
            raise argparse.ArgumentTypeError(f"must be positive, got {text}")
        return value
    return parse


def _ids(parser: argparse.ArgumentParser, ids: list[str]) -> list[str]:
    unknown = [i for i in ids if i not in catalog.available()]
    if unknown:
        parser.error(f"unknown exercise id(s): {' '.join(unknown)}; choose from {' '.join(catalog.available())}")
    return list(dict.fromkeys(ids)) or catalog.available()


def _solutions(parser: argparse.ArgumentParser, folder: str) -> Path:
    if not Path(folder).is_dir():
        parser.error(f"--solutions {folder}: no such folder")
    return Path(folder)


def grade_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m graders", description="Grade the exercises.",
        epilog="Also: `python -m graders watch [--solutions DIR] [IDS...]` re-grades on save; "
               "`python -m graders batch SUBMISSIONS --out DIR` grades a class.")
    parser.add_argument("ids", nargs="*", metavar="ID", help=f"exercises to grade: {' '.join(catalog.available())} (default: all)")
    parser.add_argument("--solutions", default="exercises", help="folder holding the modules (default: exercises)")
    parser.add_argument("--json", metavar="PATH", help="also write Gradescope's results.json here")
    parser.add_argument("--jobs", type=_positive(int), default=os.cpu_count() or 1, help="exercises graded at once (default: CPUs)")
    parser.add_argument("--timeout", type=_positive(float), default=grading.DEFAULT_TIMEOUT,
                        help=f"seconds per exercise (default: {grading.DEFAULT_TIMEOUT:g})")
    parser.add_argument("--budget", type=_positive(float), default=None, metavar="SECONDS",
                        help="instead of --timeout: split this many seconds among the exercises by their typical "
                             "cost (with --jobs 1, the whole run ends within it; the autograder uses it)")
    parser.add_argument("--no-cache", action="store_true", help="do not use the persistent compilation cache")
    parser.add_argument("--seed", type=int, default=None,
                        help="seed of the configurations drawn at grading time (default: this installation's; the report prints it)")
    parser.add_argument("-v", "--verbose", action="store_true", help="list every check, passed or not")
    parser.add_argument("--label", default=None, metavar="TEXT",
                        help="how the report names the graded folder (default: --solutions as given); the autograder "
                             "names it inside the submission")
    parser.add_argument("--sandbox", action="store_true",
                        help="confine the learner's code: own namespaces, read-only root without reference/ "
                             "or secrets, user nobody (root only; see README)")
    return parser


def options_from(args) -> grading.Options:
    seed = grading.installation_seed() if args.seed is None else args.seed
    return grading.Options(timeout=args.timeout, cache=not args.no_cache, seed=seed, jobs=args.jobs,
                           sandbox=getattr(args, "sandbox", False), keep_server=True)


def grade_command(argv: list[str]) -> int:
    parser = grade_parser()
    args = parser.parse_args(argv)
    ids = _ids(parser, args.ids)
    solutions = _solutions(parser, args.solutions)
    if args.sandbox:
        from graders.child import sandbox

        why_not = sandbox.available()
        if why_not:
            parser.error(why_not)  # refuses: grading unconfined would be a promise not kept
    options = options_from(args)
    isolation = ""
    if args.sandbox:
        isolation = sandbox.level()  # the strongest this machine allows
    if args.budget is not None:
        try:
            options.limits = grading.budget_limits(ids, args.budget)
        except ValueError as exc:
            parser.error(str(exc))
    shown = Path(args.label) if args.label else solutions
    missing = grading.missing_modules(solutions, ids)
    start = time.monotonic()
    # Started before anything else here: the fork server imports the libraries (most of a run's
    # start-up) while this process imports the report and prints the header.
    launcher = options.launcher(ids)
    try:
        from graders.app import report
        from graders.app.progress import Live

        live = Live(sys.stdout)
        live.line(report.header(shown, options.seed, isolation, missing))
        live.line(f"  grading {' '.join(catalog.longest_first(ids))}; each row appears when its exercise is done")
        try:
            results = grading.grade_many(ids, solutions.resolve(), options, on_done=live.done, on_event=live.event,
                                         launcher=launcher)
        finally:
            live.close()
    except KeyboardInterrupt:
        sys.stdout.write("\ninterrupted: the exercises still running were stopped; nothing was reported.\n")
        sys.stdout.flush()
        return INTERRUPTED
    finally:
        launcher.close()
    # One exercise graded on its own lists every check: the learner sees what was verified.
    text = report.body(results, verbose=args.verbose or len(ids) == 1)
    sys.stdout.write("\n" + text)
    sys.stdout.flush()
    if args.json:
        full = report.header(shown, options.seed, isolation, missing) + "\n\n" + text
        extra = {"graded_folder": str(shown), "missing": missing, **({"isolation": isolation} if isolation else {})}
        Path(args.json).write_text(json.dumps(
            report.results_json(results, full, time.monotonic() - start, options.seed, extra), indent=2))
    return 0 if all(r.status == "passed" for r in results) else 1


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["watch"]:
        from graders.app import watch

        return watch.main(argv[1:])
    if argv[:1] == ["batch"]:
        from graders.course import batch

        return batch.main(argv[1:])
    return grade_command(argv)
