"""`make bench`: where grading time goes, and what a learner waits for after an edit.

Prints, per exercise, median wall times over several runs:
  * cold: the reference graded with an empty compilation cache;
  * warm: the same with a filled cache (the graders' own programs and the learner's hit it);
  * edit loop: what a learner waits for after saving a change: `python -m graders <id>` on a
    copy of the reference with a `* 1.0` in each computation that ends up compiled (the
    catalog's `edit`), so every program the learner writes misses the cache while the graders'
    own programs hit it: the learner's-loop issue's measure. Each run is forked from the fork
    server the previous run kept (graders/runner/kept_server.py), as `make grade` does;
  * no server kept: the same, each run starting its own fork server, as after 10 minutes away;
  * the floor: starting Python, importing JAX and running one op, and each edit loop as a
    multiple of it, taken pair by pair with a floor run before each edit run (the goal is at
    most 5x);
  * every program new: the same on a copy whose lines have moved, with file names and line
    numbers in the cache key, so that everything traced through the learner's module misses,
    its eager set-up ops (a model's initialisers) included: an upper bound.
Then, warm and with no server kept, the reference graded with and without --sandbox in turn, as
`batch` and the Gradescope autograder grade (issue 31's goal: at most 1.3x): the whole run, and each
exercise graded alone (the whole command). Then the whole package, warm, against the chapter's own self-check cells for Exercises 1-4
in one process (graders/course/chapter_cells.py), run in turn, with the kept server and without, and
the medians of their pairwise ratios.
A benchmark, not a test: it asserts nothing.
"""

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from graders import catalog, settings
from graders.course import chapter_cells
from graders.runner import grading, launch

EDIT_GOAL = 5.0  # an edit loop may take at most this many floors
BASELINE_PAIRS = 7  # at least this many (chapter, ours) pairs: each takes about 4 s


def _env(cache_dir: Path, metadata: bool = False, keep: bool = False) -> dict[str, str]:
    # The graders' stored figures (graders/kit/figure_store.py) live beside the compilation cache: cold means
    # neither holds anything. The fork server kept between runs (graders/runner/kept_server.py) only where
    # the figure is a learner's loop: cold and warm start theirs, as the chapter's cells do.
    env = dict(os.environ, JAX_COMPILATION_CACHE_DIR=str(cache_dir / "jax"),
               **{settings.EXPECTED_DIR: str(cache_dir / "expected")})
    env.pop(settings.NO_RESIDENT, None)
    if not keep:
        env[settings.NO_RESIDENT] = "1"
    if metadata:
        env["JAX_COMPILATION_CACHE_INCLUDE_METADATA_IN_KEY"] = "true"
    return env


def _grade(env: dict, ids: list[str], solutions: Path, jobs: int | None, *extra: str) -> tuple[float, dict]:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "results.json"
        command = [sys.executable, "-m", "graders", *ids, "--solutions", str(solutions), "--json", str(out), *extra]
        command += ["--jobs", str(jobs)] if jobs else []
        start = time.monotonic()
        proc = subprocess.run(command, cwd=catalog.ROOT, env=env, capture_output=True, text=True)
        wall = time.monotonic() - start
        if proc.returncode != 0:
            sys.exit(f"grading the reference failed (exit {proc.returncode}):\n{proc.stdout}{proc.stderr}")
        return wall, json.loads(out.read_text())["extra_data"]["exercises"]


def _stop_kept(env: dict) -> None:
    """Stop the fork server that runs of `python -m graders` in `env` were forked from."""
    from graders.runner import kept_server

    kept_server.stop(grading.Options(seed=grading.installation_seed()).env(env), sys.executable)


def _timed(command: list[str], env: dict) -> float:
    start = time.monotonic()
    subprocess.run(command, cwd=catalog.ROOT, env=env, check=True, capture_output=True)
    return time.monotonic() - start


def floor(runs: int, cache_dir: Path) -> float:
    env = launch.child_env(grading.CHECK_TIMEOUT, True, 0, base=_env(cache_dir))
    program = "import jax, jax.numpy as jnp; jnp.ones(1).block_until_ready()"
    return statistics.median(_timed([sys.executable, "-c", program], env) for _ in range(runs))


def series(label: str, runs: int, ids: list[str], jobs: int | None, cold: bool) -> dict:
    walls, per_ex = [], {i: [] for i in ids}
    compile_s = {i: [] for i in ids}
    with tempfile.TemporaryDirectory() as warm_dir:
        if not cold:
            _grade(_env(Path(warm_dir)), ids, catalog.ROOT / "reference", jobs)
        for _ in range(runs):
            with tempfile.TemporaryDirectory() as cold_dir:
                wall, exercises = _grade(_env(Path(cold_dir if cold else warm_dir)), ids, catalog.ROOT / "reference", jobs)
            walls.append(wall)
            for i in ids:
                per_ex[i].append(exercises[i]["seconds"])
                compile_s[i].append(exercises[i]["compile_seconds"])
            print(f"  {label}: {wall:.1f} s", file=sys.stderr)
    return {"wall": statistics.median(walls),
            "seconds": {i: statistics.median(v) for i, v in per_ex.items()},
            "compile": {i: statistics.median(v) for i, v in compile_s.items()}}


def edit_loop(runs: int, ids: list[str], cache_dir: Path, moved: bool = False,
              keep: bool = True) -> dict[str, tuple[float, float]]:
    """(wall time, multiple of the floor) of `python -m graders <id>` after an edit, per exercise:
    the reference with its catalog edit (a `* 1.0` in each of its compiled computations, one more
    each run, so each run's programs are new to the cache), or, with `moved`, the reference with
    its lines moved and file names and line numbers in the cache key (every program traced
    through the learner's code misses, its eager set-up ops included: an upper bound). Each run
    is paired with a floor run just before it, and the multiple is the median of the pairs'
    ratios: the machine's speed drifts (two floors measured a minute apart here: 0.68 s and
    1.05 s), and a ratio taken pair by pair does not move with it. With `keep`, as `make grade`
    runs: forked from the server kept between runs, which the first run (the one that fills
    the cache) starts; without, each run starts its own, as after 10 minutes away."""
    env = _env(cache_dir, metadata=moved, keep=keep)
    _grade(env, ids, catalog.ROOT / "reference", None)  # the graders' own programs, cached
    try:
        return _edit_runs(runs, ids, cache_dir, env, moved, "moved lines" if moved else
                          "edit loop" if keep else "edit loop, no server kept")
    finally:
        if keep:
            _stop_kept(env)


def _edit_runs(runs, ids, cache_dir, env, moved, label) -> dict[str, tuple[float, float]]:
    figures = {}
    for ex_id in ids:
        module = catalog.module_name(ex_id) + ".py"
        walls, ratios = [], []
        for run in range(runs):
            base = floor(1, cache_dir)
            with tempfile.TemporaryDirectory() as tmp:
                text = (catalog.ROOT / "reference" / module).read_text()
                if moved:
                    text = "#\n" * (run + 1) + text  # a new line count each run
                else:
                    text = catalog.edited(ex_id, text, times=run + 1)
                (Path(tmp) / module).write_text(text)
                walls.append(_timed([sys.executable, "-m", "graders", ex_id, "--solutions", tmp], env))
            ratios.append(walls[-1] / base)
        figures[ex_id] = (statistics.median(walls), statistics.median(ratios))
        print(f"  {label} {ex_id}: {figures[ex_id][0]:.1f} s, "
              f"{figures[ex_id][1]:.1f}x the floor", file=sys.stderr)
    return figures


SANDBOX_GOAL = 1.3  # issue 31: grading under --sandbox takes at most this many times as long


def sandboxed(runs: int, ids: list[str], jobs: int | None, cache_dir: Path) -> dict | None:
    """The reference graded warm without and with --sandbox, in turn (the machine's speed drifts,
    and a ratio taken pair by pair does not move with it), each run with a fork server of its own:
    a sandboxed run never keeps one; then each exercise alone, the same way. Medians of the walls,
    of each exercise's seconds, and of the ratios pair by pair. None where this machine cannot make
    the sandbox."""
    from graders.child import sandbox

    if sandbox.available():
        return None
    env = _env(cache_dir)
    for extra in ((), ("--sandbox",)):  # fills the cache, for both ways
        _grade(env, ids, catalog.ROOT / "reference", jobs, *extra)
    pairs = []
    for _ in range(runs):
        pairs.append(tuple(_grade(env, ids, catalog.ROOT / "reference", jobs, *extra) for extra in ((), ("--sandbox",))))
        print(f"  sandbox: {pairs[-1][0][0]:.1f} s, --sandbox {pairs[-1][1][0]:.1f} s", file=sys.stderr)
    # Each exercise graded alone, the whole command, as a learner or an instructor grades one: in the
    # run above, two exercises' judges and workers share the CPUs, so an exercise's own seconds there
    # also hold the other one's work (the figure in the last column).
    alone = {i: [] for i in ids}
    for _ in range(runs):
        for i in ids:
            walls = [_grade(env, [i], catalog.ROOT / "reference", jobs, *extra)[0] for extra in ((), ("--sandbox",))]
            alone[i].append(tuple(walls))
    median = statistics.median
    return {"plain": median(p[0] for p, _ in pairs), "sandbox": median(s[0] for _, s in pairs),
            "ratio": median(s[0] / p[0] for p, s in pairs),
            "alone": {i: (median(p for p, _ in alone[i]), median(s for _, s in alone[i]),
                          median(s / p for p, s in alone[i])) for i in ids},
            "seconds": {i: (median(p[1][i]["seconds"] for p, _ in pairs), median(s[1][i]["seconds"] for _, s in pairs),
                            median(s[1][i]["seconds"] / p[1][i]["seconds"] for p, s in pairs)) for i in ids}}


def baseline(runs: int, cache_dir: Path) -> dict[str, float]:
    """The chapter's self-checks in one process, and our graders for ex1-ex4 with a fork server
    of the run's own and with the one the previous run kept, all warm, run in turn (chapter,
    ours, ours kept, chapter, ...): the machine's speed drifts by 10-15% over minutes, and a
    ratio taken pair by pair does not move with it. Medians of each, and of the ratios."""
    ids = ["ex1", "ex2", "ex3", "ex4"]
    env = launch.child_env(grading.CHECK_TIMEOUT, True, 0, base=_env(cache_dir))
    command = chapter_cells.command(sys.executable)
    _timed(command, env)
    alone, kept = _env(cache_dir), _env(cache_dir, keep=True)
    _grade(alone, ids, catalog.ROOT / "reference", None)
    _grade(kept, ids, catalog.ROOT / "reference", None)  # starts the server the runs below keep
    rows = []
    try:
        for _ in range(max(runs, BASELINE_PAIRS)):
            chapter = _timed(command, env)
            rows.append((chapter, _grade(alone, ids, catalog.ROOT / "reference", None)[0],
                         _grade(kept, ids, catalog.ROOT / "reference", None)[0]))
    finally:
        _stop_kept(kept)
    return {"chapter": statistics.median(c for c, _, _ in rows),
            "alone": statistics.median(a for _, a, _ in rows), "kept": statistics.median(k for _, _, k in rows),
            "alone_ratio": statistics.median(a / c for c, a, _ in rows),
            "kept_ratio": statistics.median(k / c for c, _, k in rows)}


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m graders.course.bench", description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3, help="runs per figure (default 3)")
    parser.add_argument("--jobs", type=int, default=None, help="passed to the runner (default: its own)")
    parser.add_argument("--only", nargs="*", default=None, help="exercises to measure (default: all)")
    args = parser.parse_args()
    ids = args.only or catalog.available()
    print(f"benchmark: reference solutions, {len(ids)} exercises, {args.runs} runs per figure, "
          f"{os.cpu_count()} CPUs, {platform.machine()}, Python {platform.python_version()}", file=sys.stderr)
    with tempfile.TemporaryDirectory() as cache:
        cache_dir = Path(cache)
        base = floor(args.runs, cache_dir)
        cold = series("cold", args.runs, ids, args.jobs, cold=True)
        warm = series("warm", args.runs, ids, args.jobs, cold=False)
        edits = edit_loop(args.runs, ids, cache_dir / "edit")
        alone = edit_loop(args.runs, ids, cache_dir / "alone", keep=False)
        moved = edit_loop(args.runs, ids, cache_dir / "moved", moved=True)
        sandbox = sandboxed(args.runs, ids, args.jobs, cache_dir / "sandbox")
        base_line = baseline(args.runs, cache_dir / "baseline")
    shutil.rmtree(cache_dir, ignore_errors=True)

    print(f"\nMedian of {args.runs} runs, {time.strftime('%Y-%m-%d')}, {os.cpu_count()} CPUs ({platform.machine()}), "
          f"Python {platform.python_version()}, jobs={args.jobs or os.cpu_count()}. Cold and warm: wall time in the "
          "exercise's process (of which tracing + compiling) while all exercises are graded. Edit loop: "
          "`make grade EX=<id>` after a `* 1.0` in each of the reference's compiled computations, whole "
          "command, and as a multiple of the floor, the median of the ratios of each run to a floor run just before it; "
          "forked from the server the previous run kept, as `make grade` does, or (no server kept) with a server "
          "of its own, as after 10 minutes away. Every program new: the same with the lines moved and source lines "
          "in the cache key.\n")
    print(f"floor (start Python, import JAX, run one op): {base:.1f} s\n")
    print("| exercise | cold | warm | edit loop | edit loop / floor | no server kept | every program new |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")

    def over(ratio: float) -> str:
        return "" if ratio <= EDIT_GOAL else " (over the goal)"

    for i in ids:
        (edit, ratio), (solo, solo_ratio), (new, new_ratio) = edits[i], alone[i], moved[i]
        print(f"| {i} | {cold['seconds'][i]:.1f} s ({cold['compile'][i]:.1f} s) | "
              f"{warm['seconds'][i]:.1f} s ({warm['compile'][i]:.1f} s) | {edit:.1f} s | {ratio:.1f}x{over(ratio)} | "
              f"{solo:.1f} s ({solo_ratio:.1f}x{over(solo_ratio)}) | {new:.1f} s ({new_ratio:.1f}x) |")
    print(f"| **all, wall clock** | **{cold['wall']:.1f} s** | **{warm['wall']:.1f} s** | | | | |")
    if sandbox is None:
        print("\nunder --sandbox: not measured, this machine cannot make the sandbox")
    else:
        def goal(ratio: float) -> str:
            return "" if ratio <= SANDBOX_GOAL else f" (over {SANDBOX_GOAL}x)"

        print(f"\nwarm, no server kept, without and with --sandbox in turn, {args.runs} pairs: "
              f"whole run {sandbox['plain']:.1f} s and {sandbox['sandbox']:.1f} s, "
              f"{sandbox['ratio']:.2f}x{goal(sandbox['ratio'])} (the median of the ratios pair by pair)\n")
        print("Each exercise graded alone, the whole command, in turn: its wall time without and with --sandbox, "
              "the median of the ratios pair by pair. Last column: the exercise's own seconds in the whole runs "
              "above, where two exercises' judges and workers share the CPUs.\n")
        print("| exercise | without | --sandbox | ratio | in the whole run |")
        print("| --- | ---: | ---: | ---: | ---: |")
        for i in ids:
            plain, boxed, ratio = sandbox["alone"][i]
            in_run = sandbox["seconds"][i]
            print(f"| {i} | {plain:.2f} s | {boxed:.2f} s | {ratio:.2f}x{goal(ratio)} | "
                  f"{in_run[0]:.2f} s, {in_run[1]:.2f} s: {in_run[2]:.2f}x |")
    b = base_line
    print(f"\nex1-ex4, warm, against the chapter's self-check cells in one process ({b['chapter']:.2f} s), in turn, "
          f"{max(args.runs, BASELINE_PAIRS)} runs each: the graders forked from the server the previous run kept "
          f"{b['kept']:.2f} s ({b['kept_ratio']:.2f}x, the median of the ratios pair by pair), with a server of "
          f"the run's own {b['alone']:.2f} s ({b['alone_ratio']:.2f}x)")


if __name__ == "__main__":
    main()
