"""The command line: `python -m graders [IDS...] [options]`, `python -m graders watch ...`,
`python -m graders batch ...`. Parses, then hands over to grading, watch or batch."""

import argparse
import json
import os
import sys
import time
from pathlib import Path

from graders import catalog
from graders.app import arguments
from graders.runner import grading

USAGE_ERROR = 2
INTERRUPTED = 130  # as a shell reports a command stopped by Ctrl-C


def grade_command(argv: list[str]) -> int:
    parser = arguments.grade_parser()
    args = parser.parse_args(argv)
    ids = arguments.exercise_ids(parser, args.ids)
    solutions = arguments.solutions_folder(parser, args.solutions)
    if args.sandbox:
        from graders.child import sandbox

        why_not = sandbox.available()
        if why_not:
            parser.error(why_not)  # refuses: grading unconfined would be a promise not kept
    options = arguments.options_from(args)
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
    return 0 if all(r.status in ("passed", grading.ON_SUBMISSION) for r in results) else 1


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["watch"]:
        from graders.app import watch

        return watch.main(argv[1:])
    if argv[:1] == ["batch"]:
        from graders.course import batch

        return batch.main(argv[1:])
    return grade_command(argv)
