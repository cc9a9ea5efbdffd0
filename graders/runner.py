"""`python -m graders [IDS...] [--solutions DIR] [--json PATH] [--jobs N] [--timeout S]`

The parent process: starts one child per exercise (graders/child.py), reads the outcome of
each check from a pipe as it finishes, awards the points declared in the grader files, and
prints the report (and optionally Gradescope's results.json). It never imports JAX.
"""

import argparse
import json
import os
import secrets
import signal
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from graders import catalog
from graders.spec import read_checks

DEFAULT_TIMEOUT = 300.0  # seconds of wall clock per exercise
CHECK_TIMEOUT = 120.0  # seconds per check (pytest-timeout), capped by the exercise's limit
OUTPUT_LINES = 15  # lines of the learner's own printing shown for a crashed exercise
OUTPUT_CHARS = 1500


@dataclass
class CheckResult:
    name: str
    points: int
    outcome: str = "not_run"  # passed / failed / not_attempted / not_run
    message: str = ""
    seconds: float = 0.0  # from the check's start to its outcome, as seen by the parent

    @property
    def score(self) -> int:
        return self.points if self.outcome == "passed" else 0


@dataclass
class ExerciseResult:
    ex_id: str
    status: str = "error"  # passed / partial / not attempted / error / timed out
    reason: str = ""
    checks: list[CheckResult] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    output: str = ""
    seconds: float = 0.0
    compile_seconds: float = 0.0  # tracing, lowering and XLA compilation inside the child
    backend_seconds: float = 0.0  # of which XLA compilation (what the persistent cache can save)

    @property
    def score(self) -> int:
        return sum(c.score for c in self.checks)

    @property
    def max_score(self) -> int:
        return sum(c.points for c in self.checks)


SEED_FILE = catalog.ROOT / ".cache" / "seed"


def installation_seed() -> int:
    """The seed drawn once per installation, kept beside the compilation cache: a configuration
    drawn from it cannot be looked up in the package's text, and the graders' own programs for
    it stay in the cache from one `make grade` to the next."""
    try:
        return int(SEED_FILE.read_text().strip())
    except (OSError, ValueError):
        seed = secrets.randbelow(1_000_000)
        try:
            SEED_FILE.parent.mkdir(parents=True, exist_ok=True)
            SEED_FILE.write_text(f"{seed}\n")
        except OSError:
            pass  # a read-only package still grades, with a seed of its own each run
        return seed


def child_env(check_timeout: float, cache: bool, seed: int = 0) -> dict[str, str]:
    env = dict(os.environ)
    env["GRADERS_SEED"] = str(seed)
    flags = env.get("XLA_FLAGS", "")
    if "xla_force_host_platform_device_count" not in flags:
        env["XLA_FLAGS"] = (flags + " --xla_force_host_platform_device_count=8").strip()
    env.setdefault("JAX_PLATFORMS", "cpu")
    env["PYTHONPATH"] = str(catalog.ROOT)
    env["PYTHONDONTWRITEBYTECODE"] = "1"  # nothing written into the learner's folder
    env["GRADERS_CHECK_TIMEOUT"] = f"{check_timeout:g}"
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    if cache:
        # The user's own cache directory wins; either way the graders' programs are small and
        # compile in well under JAX's default 1 s threshold, so cache them all.
        env.setdefault("JAX_COMPILATION_CACHE_DIR", str(catalog.ROOT / ".cache" / "jax"))
        env.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
        env.setdefault("JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES", "0")
    else:
        env.pop("JAX_COMPILATION_CACHE_DIR", None)
        env["JAX_ENABLE_COMPILATION_CACHE"] = "false"
    return env


def _tail(path: Path) -> str:
    size = path.stat().st_size
    if size == 0:
        return ""
    with open(path, "rb") as f:
        f.seek(max(0, size - 64 * 1024))
        text = f.read().decode("utf-8", "replace")
    lines = text.rstrip().splitlines()[-OUTPUT_LINES:]
    shown = "\n".join(line[:200] for line in lines)[-OUTPUT_CHARS:]
    if size > len(shown):
        shown = f"[{size:,} bytes printed; the last lines:]\n" + shown
    return shown


def _run_child(ex_id: str, solutions: Path, timeout: float, cache: bool, seed: int):
    """Run one grading child; returns (events, timed_out, returncode, output tail)."""
    read_fd, write_fd = os.pipe()
    env = child_env(min(CHECK_TIMEOUT, timeout), cache, seed)
    env["GRADERS_RESULT_FD"] = str(write_fd)
    events: list[dict] = []

    def reader():
        with os.fdopen(read_fd, "r", encoding="utf-8", errors="replace") as pipe:
            for line in pipe:
                try:
                    event = json.loads(line)
                except ValueError:
                    continue
                if isinstance(event, dict):
                    event["_at"] = time.monotonic()
                    events.append(event)

    with tempfile.TemporaryDirectory(prefix="graders-") as tmp:
        out_path = Path(tmp) / "output"
        with open(out_path, "wb") as out:
            proc = subprocess.Popen(
                [sys.executable, "-m", "graders.child", ex_id, str(solutions)],
                cwd=catalog.ROOT, env=env, stdin=subprocess.DEVNULL, stdout=out,
                stderr=subprocess.STDOUT, pass_fds=(write_fd,), start_new_session=True)
        os.close(write_fd)
        thread = threading.Thread(target=reader, daemon=True)
        thread.start()
        timed_out = False
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
        # Whatever the learner's code started (threads, grandchildren) goes with the group.
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()
        thread.join(timeout=5)
        return list(events), timed_out, proc.returncode, _tail(out_path)


def _how_it_ended(returncode: int) -> str:
    if returncode is not None and returncode < 0:
        try:
            return f"killed by signal {signal.Signals(-returncode).name}"
        except ValueError:
            return f"killed by signal {-returncode}"
    return f"exit code {returncode}"


def grade_exercise(ex_id: str, solutions: Path, timeout: float, cache: bool = True, seed: int = 0) -> ExerciseResult:
    start = time.monotonic()
    checks = [CheckResult(c.name, c.points) for c in read_checks(catalog.grader_file(ex_id))]
    result = ExerciseResult(ex_id, checks=checks)
    module_file = solutions / f"{catalog.module_name(ex_id)}.py"
    if not module_file.is_file():
        result.reason = f"missing: there is no {module_file.name} in {solutions}/"
        return _finish(result, start, "not run: " + result.reason)

    events, timed_out, returncode, output = _run_child(ex_id, solutions, timeout, cache, seed)
    result.output = output
    by_name = {c.name: c for c in checks}
    running, started, done, problem, tampered = None, 0.0, False, "", None
    for event in events:
        kind = event.get("event")
        if kind == "start":
            running, started = event.get("check"), event["_at"]
        elif kind == "outcome" and event.get("check") in by_name:
            check = by_name[event["check"]]
            if event.get("outcome") in ("passed", "failed", "not_attempted"):
                check.outcome, check.message = event["outcome"], str(event.get("message", ""))
                check.seconds = event["_at"] - started
        elif kind == "note":
            result.notes.append(str(event.get("text", "")))
        elif kind == "import_error":
            problem = f"could not import {module_file.name}: {event.get('message', '')}"
        elif kind == "child_error":
            problem = str(event.get("message", ""))
        elif kind == "tampered":
            tampered = event.get("names", [])
        elif kind == "timing":
            result.backend_seconds = float(event.get("compile", 0.0))
            result.compile_seconds = float(event.get("trace", 0.0)) + result.backend_seconds
        elif kind == "done":
            done = True

    at = f" while running check '{running}'" if running else " while importing your module"
    if tampered is not None:
        result.reason = (f"your code replaced {', '.join(map(str, tampered))}, which the graders rely on; "
                         "no points can be given. Hint: remove the assignments to library functions.")
        for check in checks:
            check.outcome, check.message = "failed", result.reason
        return _finish(result, start, result.reason, status="error")
    if problem:
        result.reason = problem
        return _finish(result, start, "not run: " + problem, status="error")
    if timed_out:
        result.reason = f"stopped after the {timeout:g} s limit{at}. Hint: look for a loop that never ends."
        return _finish(result, start, "not run: the time limit was reached", status="timed out")
    if not done:
        result.reason = f"the grading process ended unexpectedly ({_how_it_ended(returncode)}){at}."
        if "exit code 0" not in result.reason:
            result.reason += " Hint: your code may call os._exit, or crash the interpreter (e.g. through ctypes)."
        else:
            result.reason += " Hint: your code may call os._exit."
        return _finish(result, start, "not run: the process ended before this check", status="error")
    return _finish(result, start, "not run (the grader did not report this check)")


def _finish(result: ExerciseResult, start: float, unreported: str, status: str | None = None) -> ExerciseResult:
    for check in result.checks:
        if check.outcome == "not_run":
            check.message = unreported
    if status is None:
        outcomes = {c.outcome for c in result.checks}
        if outcomes == {"passed"}:
            status = "passed"
        elif outcomes == {"not_attempted"}:
            status = "not attempted"
        elif "not_run" in outcomes and not (outcomes & {"passed", "failed", "not_attempted"}):
            status = "error"
        else:
            status = "partial"
    result.status = status
    result.seconds = time.monotonic() - start
    return result


# ---------------------------------------------------------------- report

def _indent(text: str, prefix: str) -> str:
    return "\n".join(prefix + line for line in text.splitlines())


def format_report(results: list[ExerciseResult], solutions: Path, seed: int = 0) -> str:
    lines = [f"Grading {solutions} (seed {seed}; --seed {seed} reproduces this run)", ""]
    lines.append(f"  {'id':<5} {'exercise':<38} {'status':<14} {'points':>7} {'time':>7}")
    for r in results:
        title = catalog.EXERCISES[r.ex_id][1]
        lines.append(f"  {r.ex_id:<5} {title:<38} {r.status:<14} {f'{r.score}/{r.max_score}':>7} {r.seconds:6.1f}s")
    total, most = sum(r.score for r in results), sum(r.max_score for r in results)
    lines.append(f"  {'total':<5} {'':<38} {'':<14} {f'{total}/{most}':>7}")
    for r in results:
        detail = _detail(r)
        if detail:
            lines += ["", *detail]
    untouched = [catalog.module_name(r.ex_id) + ".py" for r in results if r.status == "not attempted"]
    if untouched:
        lines += ["", f"not attempted yet (the stubs are unchanged): {', '.join(untouched)}.",
                  "  Fill them in (each docstring says what to write) and grade again."]
    return "\n".join(lines) + "\n"


def _detail(r: ExerciseResult) -> list[str]:
    module = catalog.module_name(r.ex_id) + ".py"
    head = f"{r.ex_id} ({module}): {r.status}, {r.score}/{r.max_score}"
    out: list[str] = []
    if r.status == "not attempted":
        out = []  # summed up in one line at the end of the report
    elif r.status in ("error", "timed out"):
        out = [head, _indent(r.reason, "  ")]
        if r.output:
            out += ["  output from your code:", _indent(r.output, "  | ")]
    elif r.status == "partial":
        out, previous = [head], None
        for c in r.checks:
            if c.outcome == "failed":
                # one error met by every check is shown once
                shown = "(the same as above)" if c.message == previous else c.message
                out += [f"  ✗ {c.name} ({c.points} pt{'s' if c.points != 1 else ''})", _indent(shown, "      ")]
                previous = c.message
            elif c.outcome in ("not_attempted", "not_run"):
                out += [f"  · {c.name} ({c.points} pt{'s' if c.points != 1 else ''}): {c.message}"]
    if r.notes:
        out = out or [head]
        out += [_indent(n, "  ") for n in r.notes]
    return out


def results_json(results: list[ExerciseResult], report: str, seconds: float, seed: int = 0) -> dict:
    tests = []
    for r in results:
        for c in r.checks:
            tests.append({
                "name": f"{r.ex_id}: {c.name}",
                "tags": [r.ex_id],
                "score": c.score,
                "max_score": c.points,
                "status": "passed" if c.outcome == "passed" else "failed",
                "output": c.message if c.outcome != "passed" else "",
            })
    return {
        "score": sum(r.score for r in results),
        "max_score": sum(r.max_score for r in results),
        "execution_time": round(seconds, 2),
        "output": report,
        "tests": tests,
        "extra_data": {"seed": seed, "exercises": {r.ex_id: {
            "status": r.status, "score": r.score, "max_score": r.max_score,
            "reason": r.reason, "seconds": round(r.seconds, 2),
            "compile_seconds": round(r.compile_seconds, 2), "backend_seconds": round(r.backend_seconds, 2),
            "notes": r.notes, "check_seconds": {c.name: round(c.seconds, 2) for c in r.checks}}
            for r in results}},
    }


# ---------------------------------------------------------------- command line

def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m graders", description="Grade the exercises.")
    parser.add_argument("ids", nargs="*", metavar="ID", help=f"exercises to grade: {' '.join(catalog.available())} (default: all)")
    parser.add_argument("--solutions", default="exercises", help="folder holding the modules (default: exercises)")
    parser.add_argument("--json", metavar="PATH", help="also write Gradescope's results.json here")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="exercises graded at once (default: CPUs)")
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT, help="seconds per exercise (default: 300)")
    parser.add_argument("--no-cache", action="store_true", help="do not use the persistent compilation cache")
    parser.add_argument("--seed", type=int, default=None,
                        help="seed for the configurations drawn at grading time (default: this installation's, printed in the report)")
    args = parser.parse_args(argv)
    unknown = [i for i in args.ids if i not in catalog.available()]
    if unknown:
        parser.error(f"unknown exercise id(s): {' '.join(unknown)}; choose from {' '.join(catalog.available())}")
    if not Path(args.solutions).is_dir():
        parser.error(f"--solutions {args.solutions}: no such folder")
    if args.jobs < 1 or args.timeout <= 0:
        parser.error("--jobs and --timeout must be positive")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    ids = list(dict.fromkeys(args.ids)) or catalog.available()
    solutions = Path(args.solutions).resolve()
    seed = installation_seed() if args.seed is None else args.seed
    start = time.monotonic()
    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        futures = {i: pool.submit(grade_exercise, i, solutions, args.timeout, not args.no_cache, seed)
                   for i in sorted(ids, key=lambda i: -catalog.COST.get(i, 0.0))}
        results = [futures[i].result() for i in ids]  # the report keeps the order asked for
    report = format_report(results, Path(args.solutions), seed)
    sys.stdout.write(report)
    sys.stdout.flush()
    if args.json:
        Path(args.json).write_text(json.dumps(results_json(results, report, time.monotonic() - start, seed), indent=2))
    return 0 if all(r.status == "passed" for r in results) else 1
