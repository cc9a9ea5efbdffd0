"""The command line: `python -m graders [IDS...] [options]`, `python -m graders watch ...`,
`python -m graders batch ...`. Parses, then hands over to grading, watch or batch."""

import argparse
import json
import os
import sys
import threading
import time
from pathlib import Path

from graders import catalog
from graders.app import arguments
from graders.runner import grading

USAGE_ERROR = 2
INTERRUPTED = 130  # as a shell reports a command stopped by Ctrl-C


def grade_command(argv: list[str]) -> int:
    begun = time.monotonic()
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
    deadline = args.deadline if args.deadline is not None else args.budget
    if deadline is not None:
        options.deadline = begun + deadline
    try:
        after_due = arguments.after_due(ids, args.after_due)
    except ValueError as exc:
        parser.error(str(exc))
    shown = Path(args.label) if args.label else solutions
    missing = grading.missing_modules(solutions, ids)
    start = time.monotonic()
    # Started before anything else here: the fork server imports the libraries (most of a run's
    # start-up) while this process imports the report and prints the header.
    launcher = options.launcher(ids)
    from graders.app import report

    def write_json(results: list[grading.ExerciseResult]) -> None:
        head = report.header(shown, options.seed, isolation, missing)
        text = report.body(results, verbose=args.verbose or len(ids) == 1)
        if after_due:
            # What students see before the due date: nothing of the exercises and checks shown after it.
            text = report.body(report.before_due(results, after_due), verbose=args.verbose or len(ids) == 1)
        extra = {"graded_folder": str(shown), "missing": missing, **({"isolation": isolation} if isolation else {})}
        data = report.results_json(results, head + "\n\n" + text, time.monotonic() - start, options.seed, extra,
                                   after_due)
        partial = Path(args.json).with_name(Path(args.json).name + ".part")
        partial.write_text(json.dumps(data, indent=2))
        partial.replace(args.json)  # never half a file, whenever this process is stopped

    done: dict[str, grading.ExerciseResult] = {}

    def so_far() -> list[grading.ExerciseResult]:
        """Every exercise: graded, missing, or not graded (yet): what results.json says if the run is
        stopped now. (A missing module is found without starting anything.)"""
        return [done.get(i) or (grading.grade_exercise(i, solutions, options) if f"{catalog.module_name(i)}.py" in missing
                                else grading.not_graded(i, grading.OUT_OF_TIME)) for i in ids]

    lock = threading.Lock()

    def on_done(result: grading.ExerciseResult) -> None:
        live.done(result)
        if args.json and options.deadline is not None:
            # A run with a deadline may be stopped from outside (run_autograder's last resort): the
            # file is complete after each exercise, the ones not graded yet each check with 0.
            with lock:
                done[result.ex_id] = result
                write_json(so_far())

    try:
        from graders.app.progress import Live

        live = Live(sys.stdout)
        if args.json and options.deadline is not None:
            write_json(so_far())
        live.line(report.header(shown, options.seed, isolation, missing))
        live.line(f"  grading {' '.join(catalog.longest_first(ids))}; each row appears when its exercise is done")
        try:
            results = grading.grade_many(ids, solutions.resolve(), options, on_done=on_done, on_event=live.event,
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
        with lock:
            write_json(results)
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
