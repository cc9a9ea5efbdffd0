"""`python -m graders watch [--solutions DIR] [IDS...]`: grade once, then re-grade an exercise
each time its module is saved, as rustlings does. Polls file times (no dependency to install);
one fork server lives for the whole session, so a re-grade pays no library imports. Ctrl-C
exits with status 0."""

import argparse
import signal
import sys
import time
from pathlib import Path

from graders import catalog
from graders.app import arguments, report
from graders.runner import grading, launch
from graders.app.progress import Live

POLL = 0.3  # seconds between looks at the files
SETTLE = 0.2  # an editor may write a file in several steps: wait until it stops changing


def _stamp(path: Path):
    try:
        st = path.stat()
        return st.st_mtime_ns, st.st_size
    except OSError:
        return None


def progress(latest: dict[str, grading.ExerciseResult]) -> str:
    done = sum(r.status == "passed" for r in latest.values())
    points = sum(r.score for r in latest.values())
    most = sum(r.max_score for r in latest.values())
    line = f"{done}/{len(latest)} exercises complete, {points}/{most} points"
    todo = [r for r in latest.values() if r.status != "passed"]
    if todo:
        line += f". Next: {todo[0].ex_id} ({todo[0].module})"
    return line


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m graders watch",
                                     description="Grade, then re-grade each exercise whenever its file is saved.")
    parser.add_argument("ids", nargs="*", metavar="ID")
    parser.add_argument("--solutions", default="exercises")
    parser.add_argument("--jobs", type=arguments.positive(int), default=grading.Options().jobs)
    parser.add_argument("--timeout", type=arguments.positive(float), default=grading.DEFAULT_TIMEOUT)
    parser.add_argument("--no-cache", action="store_true")
    parser.add_argument("--seed", type=int, default=None)
    args = parser.parse_args(argv)
    # Started in the background by a non-interactive shell, SIGINT may arrive ignored.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    ids = arguments.exercise_ids(parser, args.ids)
    solutions = arguments.solutions_folder(parser, args.solutions).resolve()
    options = arguments.options_from(args)
    out = sys.stdout
    files = {i: solutions / f"{catalog.module_name(i)}.py" for i in ids}
    launcher = launch.launcher(ids, options.env(), options.fork, options.python)
    try:
        live = Live(out, progress_lines=True)
        live.line(report.header(Path(args.solutions), options.seed) + "; watching for changes (Ctrl-C to stop)")
        stamps = {i: _stamp(p) for i, p in files.items()}
        try:
            results = grading.grade_many(ids, solutions, options, on_done=live.done, on_event=live.event,
                                         launcher=launcher)
        finally:
            live.close()
        latest = {r.ex_id: r for r in results}
        out.write("\n" + report.body(results) + "\n" + progress(latest) + "\n")
        out.flush()
        while True:
            time.sleep(POLL)
            for ex_id, path in files.items():
                stamp = _stamp(path)
                if stamp == stamps[ex_id]:
                    continue
                time.sleep(SETTLE)
                while _stamp(path) != stamp:
                    stamp = _stamp(path)
                    time.sleep(SETTLE)
                stamps[ex_id] = stamp
                out.write(f"\n{path.name} changed: grading {ex_id}\n")
                out.flush()
                live = Live(out, progress_lines=True)
                try:
                    result = grading.grade_exercise(ex_id, solutions, options, launcher, live.event)
                finally:
                    live.close()
                latest[ex_id] = result
                out.write(report.body([result], verbose=True) + "\n" + progress(latest) + "\n")
                out.flush()
    except KeyboardInterrupt:
        out.write("\nstopped watching.\n")
        out.flush()
        return 0
    finally:
        launcher.close()
