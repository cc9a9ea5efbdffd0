"""`make bench`: where grading time goes.

Grades the reference solutions several times with an empty compilation cache (cold) and with
a filled one (warm), then one exercise alone warm, and prints median wall times per exercise,
the share of them spent tracing and compiling, and the totals. A benchmark, not a test: it
asserts nothing and its figures go in the README's performance section.
"""

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from graders import catalog


def grade_once(cache_dir: Path, ids: list[str], jobs: int | None) -> tuple[float, dict]:
    env = dict(os.environ, JAX_COMPILATION_CACHE_DIR=str(cache_dir))
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "results.json"
        command = [sys.executable, "-m", "graders", *ids, "--solutions", str(catalog.ROOT / "reference"),
                   "--json", str(out)] + (["--jobs", str(jobs)] if jobs else [])
        start = time.monotonic()
        proc = subprocess.run(command, cwd=catalog.ROOT, env=env, capture_output=True, text=True)
        wall = time.monotonic() - start
        if proc.returncode != 0:
            sys.exit(f"grading the reference failed (exit {proc.returncode}):\n{proc.stdout}{proc.stderr}")
        return wall, json.loads(out.read_text())["extra_data"]["exercises"]


def series(label: str, runs: int, ids: list[str], jobs: int | None, cold: bool) -> dict:
    walls, per_ex = [], {i: {"seconds": [], "compile_seconds": []} for i in ids}
    with tempfile.TemporaryDirectory() as warm_dir:
        if not cold:
            grade_once(Path(warm_dir), ids, jobs)  # fill the cache
        for _ in range(runs):
            with tempfile.TemporaryDirectory() as cold_dir:
                wall, exercises = grade_once(Path(cold_dir if cold else warm_dir), ids, jobs)
            walls.append(wall)
            for i in ids:
                for key in ("seconds", "compile_seconds"):
                    per_ex[i][key].append(exercises[i][key])
            print(f"  {label}: {wall:.1f} s", file=sys.stderr)
    return {"wall": statistics.median(walls),
            "exercises": {i: {k: statistics.median(v) for k, v in d.items()} for i, d in per_ex.items()}}


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m graders.bench", description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3, help="runs per series (default 3)")
    parser.add_argument("--jobs", type=int, default=None, help="passed to the runner (default: its own)")
    parser.add_argument("--single", default="ex1", help="exercise timed alone, warm (default ex1)")
    args = parser.parse_args()
    ids = catalog.available()
    print(f"benchmark: reference solutions, {len(ids)} exercises, {args.runs} runs per series, "
          f"{os.cpu_count()} CPUs, {platform.machine()}, Python {platform.python_version()}", file=sys.stderr)
    cold = series("cold", args.runs, ids, args.jobs, cold=True)
    warm = series("warm", args.runs, ids, args.jobs, cold=False)
    single = series(f"warm {args.single} alone", args.runs, [args.single], args.jobs, cold=False)

    print(f"\nMedian of {args.runs} runs, {time.strftime('%Y-%m-%d')}, {os.cpu_count()} CPUs ({platform.machine()}), "
          f"jobs={args.jobs or os.cpu_count()}. Per exercise: wall time in its process (of which tracing + compiling).\n")
    print("| exercise | cold | warm |")
    print("| --- | ---: | ---: |")
    for i in ids:
        c, w = cold["exercises"][i], warm["exercises"][i]
        print(f"| {i} | {c['seconds']:.1f} s ({c['compile_seconds']:.1f} s) | {w['seconds']:.1f} s ({w['compile_seconds']:.1f} s) |")
    print(f"| **all, wall clock** | **{cold['wall']:.1f} s** | **{warm['wall']:.1f} s** |")
    print(f"\nwarm `make grade EX={args.single} SOLUTIONS=reference`: {single['wall']:.1f} s "
          f"(warm/cold for everything: {warm['wall'] / cold['wall']:.2f})")


if __name__ == "__main__":
    main()
