"""The runner's command-line arguments, shared by `python -m graders` (graders/app/cli.py) and
`python -m graders watch` (graders/app/watch.py)."""

import argparse
import os
from pathlib import Path

from graders import catalog
from graders.runner import grading


def positive(kind):
    def parse(text: str):
        value = kind(text)
        if value <= 0:
            raise argparse.ArgumentTypeError(f"must be positive, got {text}")
        return value
    return parse


def exercise_ids(parser: argparse.ArgumentParser, ids: list[str]) -> list[str]:
    unknown = [i for i in ids if i not in catalog.available()]
    if unknown:
        parser.error(f"unknown exercise id(s): {' '.join(unknown)}; choose from {' '.join(catalog.available())}")
    return list(dict.fromkeys(ids)) or catalog.available()


def solutions_folder(parser: argparse.ArgumentParser, folder: str) -> Path:
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
    parser.add_argument("--jobs", type=positive(int), default=os.cpu_count() or 1, help="exercises graded at once (default: CPUs)")
    parser.add_argument("--timeout", type=positive(float), default=grading.DEFAULT_TIMEOUT,
                        help=f"seconds per exercise (default: {grading.DEFAULT_TIMEOUT:g})")
    parser.add_argument("--budget", type=positive(float), default=None, metavar="SECONDS",
                        help="instead of --timeout: split this many seconds among the exercises by their typical "
                             "cost (with --jobs 1, the whole run ends within it; the autograder uses it)")
    parser.add_argument("--deadline", type=positive(float), default=None, metavar="SECONDS",
                        help="the whole run ends within this many seconds: an exercise cut short reads 'timed out', "
                             "one not reached 'not graded', each check with 0 (default with --budget: the budget)")
    parser.add_argument("--after-due", nargs="+", default=[], metavar="ID[:CHECK]",
                        help="in --json's results.json, these exercises (or single checks) are shown to students "
                             "only after the due date (Gradescope's visibility after_due_date), and the report "
                             "shown before it says nothing of them")
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


def after_due(ids: list[str], specs: list[str]) -> set[tuple[str, str]]:
    """--after-due's (exercise, check) pairs (graders/runner/points.py reads them)."""
    from graders.runner.points import after_due as chosen

    return chosen(ids, specs)
