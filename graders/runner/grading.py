"""Grading one exercise or many: what each check is worth (read once, here, from the grader
files), what each child reported, and the status that follows. No JAX in this process."""

import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from graders import catalog
from graders.runner import launch
from graders.runner.points import read_checks

DEFAULT_TIMEOUT = 300.0  # seconds of wall clock per exercise
CHECK_TIMEOUT = 120.0  # seconds per check (pytest-timeout), capped by the exercise's limit
SEED_FILE = catalog.ROOT / ".cache" / "seed"


# An exercise in one of these states was not graded: it earns nothing, and each check says why.
# "not graded": the run's whole time (--deadline, --budget) ran out before it could start.
UNGRADED = ("missing", "error", "timed out", "not graded")
OUT_OF_TIME = "not graded: the run's time ran out"
MIN_START = 5.0  # seconds: an exercise with less than this left of the run's time is not started
STOP_RESERVE = 2.0  # seconds of the run's time kept for stopping a child that runs out of it
# The students' copy (make release): an exercise whose every check is graded when it is submitted
# (the quiz, without its key). Neither passed nor failed: the exit status does not count it.
ON_SUBMISSION = "on submission"


@dataclass
class CheckResult:
    name: str
    points: int
    doc: str = ""
    outcome: str = "not_run"  # passed / failed / not_attempted / not_run / deferred (graded when submitted)
    message: str = ""
    seconds: float = 0.0  # from the check's start to its outcome, as seen by the parent

    @property
    def score(self) -> int:
        return self.points if self.outcome == "passed" else 0


@dataclass
class ExerciseResult:
    ex_id: str
    status: str = "error"  # passed / partial / not attempted / missing / error / timed out / not graded
    reason: str = ""
    checks: list[CheckResult] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    output: str = ""
    seconds: float = 0.0
    compile_seconds: float = 0.0  # tracing, lowering and XLA compilation inside the child
    backend_seconds: float = 0.0  # of which XLA compilation (what the persistent cache can save)
    fault: str = ""  # the autograder's own failure (a sandbox that could not be made): no learner code ran
    later: int = 0  # points of checks left out of this view, shown after the due date (app/report.before_due)

    @property
    def score(self) -> int:
        # An exercise that could not be graded is one failing entry in results.json: whatever its
        # checks said before it ended (forged, perhaps, by the code that then crashed) earns nothing.
        if self.status in UNGRADED:
            return 0
        return sum(c.score for c in self.checks)

    @property
    def max_score(self) -> int:
        # A check graded when it is submitted (the students' copy) counts neither way.
        return sum(c.points for c in self.checks if c.outcome != "deferred")

    @property
    def module(self) -> str:
        return catalog.module_name(self.ex_id) + ".py"


@dataclass
class Options:
    timeout: float = DEFAULT_TIMEOUT
    cache: bool = True
    seed: int = 0
    jobs: int = os.cpu_count() or 1
    fork: bool = True  # children forked from one server that imported the libraries once
    force_cpu: bool = False  # the notebook's check(): never the kernel's own accelerator
    python: str = sys.executable  # the interpreter the children run in
    sandbox: bool = False  # confine each child (graders/child/sandbox.py); root only
    keep_server: bool = False  # a learner's loop: the fork server kept between runs (graders/runner/kept_server.py)
    limits: dict[str, float] = field(default_factory=dict)  # per exercise, overriding `timeout`
    deadline: float | None = None  # time.monotonic() by which the whole run ends (--deadline, --budget)

    def limit(self, ex_id: str) -> float:
        """The exercise's own limit, cut to what is left of the run's time."""
        own = self.limits.get(ex_id, self.timeout)
        return own if self.deadline is None else max(0.0, min(own, self.deadline - STOP_RESERVE - time.monotonic()))

    def cut_short(self, ex_id: str) -> bool:
        """Whether the run's deadline, not the exercise's own limit, bounds it now."""
        return self.deadline is not None and self.limit(ex_id) < self.limits.get(ex_id, self.timeout)

    def launcher(self, ids: list[str]):
        """How this run's grading processes start (graders/runner/launch.py)."""
        return launch.launcher(ids, self.env(), self.fork, self.python, self.sandbox, self.keep_server)

    def env(self, base: dict[str, str] | None = None) -> dict[str, str]:
        """The children's environment, from `base` (default: this process's environment)."""
        return launch.child_env(min(CHECK_TIMEOUT, self.timeout), self.cache, self.seed, base=base,
                                 force_cpu=self.force_cpu)


MIN_LIMIT = 20.0  # seconds: no exercise's share of a budget is smaller (a process must start)


def budget_limits(ids: list[str], budget: float) -> dict[str, float]:
    """Split `budget` seconds among exercises graded one after another, by their typical cost:
    a submission that loops in every exercise still finishes within the budget."""
    spare = budget - MIN_LIMIT * len(ids)
    if spare < 0:
        raise ValueError(f"a budget of {budget:g} s leaves less than {MIN_LIMIT:g} s to each of {len(ids)} exercises")
    total = sum(catalog.EXERCISES[i].cost for i in ids)
    return {i: MIN_LIMIT + spare * catalog.EXERCISES[i].cost / total for i in ids}


def installation_seed() -> int:
    """The seed drawn once per installation, kept beside the compilation cache: a configuration
    drawn from it cannot be looked up in the package's text, and the graders' own programs for
    it stay in the cache from one `make grade` to the next. The students' copy grades with its
    public seed: its expected values were recorded for it (graders/kit/expected.py)."""
    public = catalog.public_seed()
    if public is not None:
        return public
    try:
        return int(SEED_FILE.read_text().strip())
    except (OSError, ValueError):
        import secrets

        seed = secrets.randbelow(1_000_000)
        try:
            SEED_FILE.parent.mkdir(parents=True, exist_ok=True)
            SEED_FILE.write_text(f"{seed}\n")
        except OSError:
            pass  # a read-only package still grades, with a seed of its own each run
        return seed


def _how_it_ended(returncode: int | None) -> str:
    import signal

    if returncode is not None and returncode < 0:
        try:
            return f"killed by signal {signal.Signals(-returncode).name}"
        except ValueError:
            return f"killed by signal {-returncode}"
    return f"exit code {returncode}"


def missing_modules(solutions: Path, ids: list[str]) -> list[str]:
    """The modules of `ids` that the folder `solutions` does not hold."""
    return [f"{catalog.module_name(i)}.py" for i in ids if not (Path(solutions) / f"{catalog.module_name(i)}.py").is_file()]


def new_result(ex_id: str) -> ExerciseResult:
    checks = [CheckResult(c.name, c.points, c.doc) for c in read_checks(catalog.grader_file(ex_id))]
    return ExerciseResult(ex_id, checks=checks)


def not_graded(ex_id: str, reason: str) -> ExerciseResult:
    """An exercise the run did not reach: each check with 0 and `reason`."""
    result = new_result(ex_id)
    result.reason = reason
    return _finish(result, time.monotonic(), reason, status="not graded")


def grade_exercise(ex_id: str, solutions: Path, options: Options, launcher=None,
                   on_event: Callable[[str, dict], None] | None = None,
                   only: list[str] | None = None) -> ExerciseResult:
    """Grade one exercise in a child; `on_event(ex_id, event)` sees the child's events live.
    With `only` (the maintainer tests' wrong-solution corpora), the child runs those checks and
    no other: the others are then "not run"."""
    start = time.monotonic()
    result = new_result(ex_id)
    module_file = Path(solutions) / result.module
    if not module_file.is_file():
        # (not the folder's path: under --sandbox it is a temporary copy; the report's header
        # names the folder graded)
        result.reason = f"missing: the folder graded holds no {module_file.name}"
        return _finish(result, start, "not run: " + result.reason, status="missing")

    if options.deadline is not None and options.limit(ex_id) < MIN_START:
        result.reason = OUT_OF_TIME + " before this exercise's turn (the assignment's time limit, shared by all)"
        return _finish(result, start, result.reason, status="not graded")

    cut, limit = options.cut_short(ex_id), options.limit(ex_id)
    own = launcher is None
    launcher = launcher or options.launcher([ex_id])
    events = None if on_event is None else (lambda event: on_event(ex_id, event))
    try:
        data = catalog.EXERCISES[ex_id].data
        if options.sandbox and data:
            run = _judge_data(launcher, ex_id, solutions, options, events, data)
        else:
            run = launcher.run(ex_id, solutions, options.limit(ex_id), events,
                               {"only": sorted(only)} if only else None)
    finally:
        if own:
            launcher.close()
    result.output = run.output
    by_name = {c.name: c for c in result.checks}
    running, started, done, problem, tampered = None, 0.0, False, "", None
    for event in run.events:
        kind = event.get("event")
        if kind == "start":
            running, started = event.get("check"), event["_at"]
        elif kind == "outcome" and event.get("check") in by_name:
            check = by_name[event["check"]]
            if event.get("outcome") in ("passed", "failed", "not_attempted", "deferred"):
                check.outcome, check.message = event["outcome"], str(event.get("message", ""))
                check.seconds = event["_at"] - started
        elif kind == "note":
            result.notes.append(str(event.get("text", "")))
        elif kind == "import_error":
            problem = f"could not import {module_file.name}: {event.get('message', '')}"
        elif kind == "child_error":
            problem = str(event.get("message", ""))
        elif kind == "sandbox_error":
            result.fault = str(event.get("message", ""))
        elif kind == "tampered":
            tampered = event.get("names", [])
        elif kind == "timing":
            result.backend_seconds = float(event.get("compile", 0.0))
            result.compile_seconds = float(event.get("trace", 0.0)) + result.backend_seconds
        elif kind == "done":
            done = True

    at = f" while running check '{running}'" if running else " while importing your module"
    if result.fault:
        # Not the learner's error, and nothing printed is theirs: none of their code ran.
        result.output = ""
        result.reason = (f"the autograder failed, not your code: {result.fault}. None of your code was run. "
                         "Please tell your instructor.")
        return _finish(result, start, "not run: " + result.reason, status="error")
    if tampered is not None:
        result.reason = (f"your code replaced {', '.join(map(str, tampered))}, which the graders rely on; "
                         "no points can be given. Hint: remove the assignments to library functions.")
        for check in result.checks:
            check.outcome, check.message = "failed", result.reason
        return _finish(result, start, result.reason, status="error")
    if problem:
        result.reason = problem
        return _finish(result, start, "not run: " + problem, status="error")
    if run.timed_out and cut:
        result.reason = (f"stopped when the run's time ran out{at} (the assignment's time limit, shared among the "
                         "exercises). Hint: look for a loop that never ends, here or in an exercise graded before.")
        return _finish(result, start, "not run: the run's time ran out", status="timed out")
    if run.timed_out:
        result.reason = f"stopped after the {limit:.0f} s limit{at}. Hint: look for a loop that never ends."
        return _finish(result, start, "not run: the time limit was reached", status="timed out")
    if not done:
        result.reason = f"the grading process ended unexpectedly ({_how_it_ended(run.returncode)}){at}."
        if "exit code 0" not in result.reason:
            result.reason += " Hint: your code may call os._exit, or crash the interpreter (e.g. through ctypes)."
        else:
            result.reason += " Hint: your code may call os._exit."
        return _finish(result, start, "not run: the process ended before this check", status="error")
    return _finish(result, start, "not run (the grader did not report this check)")


def _judge_data(launcher, ex_id, solutions, options, events, names) -> launch.ChildRun:
    """A confined child reads the module's values; a child that runs no learner code grades them."""
    read = launcher.run(ex_id, solutions, options.limit(ex_id), events, extra={"extract": list(names)})
    values = [e["values"] for e in read.events if e.get("event") == "data" and isinstance(e.get("values"), dict)]
    if not values or read.timed_out:
        return read
    judged = launcher.run(ex_id, solutions, options.limit(ex_id), events,
                          extra={"data": {k: v for k, v in values[-1].items() if k in names}, "trusted": True})
    judged.output = read.output
    return judged


def stage(solutions: Path, into: Path) -> Path:
    """A copy of the learner's own modules, readable by the sandbox's user: the only part of
    their folder (and of any class folder around it) a confined child sees. Beside it, `home`:
    the sandbox's user's own folder (HOME and TMPDIR at the "user" level)."""
    into.parent.mkdir(mode=0o711, exist_ok=True)
    os.chmod(into.parent, 0o711)
    into.mkdir(mode=0o755, exist_ok=True)
    os.chmod(into, 0o755)
    home = into.parent / "home"
    home.mkdir(mode=0o700, exist_ok=True)
    from graders.child import sandbox

    os.chown(home, sandbox.NOBODY, sandbox.NOBODY)
    for path in solutions.glob("*.py"):
        # Never through a link: this runs as root, and a submitted `quiz.py` linked to the quiz
        # key (or a module linked into reference/) would otherwise be copied for the learner.
        if path.is_symlink() or not path.is_file():
            continue
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
        except OSError:
            continue
        with os.fdopen(fd, "rb") as source:
            target = into / path.name
            target.write_bytes(source.read())
        os.chmod(target, 0o644)
    return into


def _finish(result: ExerciseResult, start: float, unreported: str, status: str | None = None) -> ExerciseResult:
    for check in result.checks:
        if check.outcome == "not_run":
            check.message = unreported
    result.status = status or status_of(result.checks)
    result.seconds = time.monotonic() - start
    return result


def status_of(checks: list[CheckResult]) -> str:
    """The status of an exercise that ran, from its checks' outcomes. A check graded when it is
    submitted (the students' copy) counts neither way."""
    outcomes = {c.outcome for c in checks} - {"deferred"}
    if not outcomes and checks:
        return ON_SUBMISSION
    if outcomes == {"passed"}:
        return "passed"
    if outcomes == {"not_attempted"}:
        return "not attempted"
    if "not_run" in outcomes and not (outcomes & {"passed", "failed", "not_attempted"}):
        return "error"
    return "partial"


def grade_many(ids: list[str], solutions: Path, options: Options,
               on_done: Callable[[ExerciseResult], None] | None = None,
               on_event: Callable[[str, dict], None] | None = None, launcher=None) -> list[ExerciseResult]:
    """Grade several exercises in parallel, longest first; results in the order asked for.
    `on_done` sees each result as soon as its exercise is graded."""
    own = launcher is None
    launcher = launcher or options.launcher(ids)
    staging = None
    if options.sandbox:
        import tempfile

        import secrets

        staging = tempfile.TemporaryDirectory(prefix="graders-submission-")
        # Searchable, not listable: at the "user" level the sandbox's user reaches the copy by
        # its name, which no other submission's code can guess.
        os.chmod(staging.name, 0o711)
        solutions = stage(solutions, Path(staging.name) / secrets.token_hex(16) / "solutions")
    try:
        import threading

        stopped = threading.Event()

        def one(ex_id: str) -> ExerciseResult:
            result = grade_exercise(ex_id, solutions, options, launcher, on_event)
            if on_done is not None and not stopped.is_set():  # a stopped exercise has no result to show
                on_done(result)
            return result

        from concurrent.futures import ThreadPoolExecutor  # here: the runner imports it after the fork server starts

        with ThreadPoolExecutor(max_workers=options.jobs) as pool:
            futures = {i: pool.submit(one, i) for i in catalog.longest_first(ids)}
            try:
                return [futures[i].result() for i in ids]
            except BaseException:  # Ctrl-C: the exercises stop now, not at their time limits
                stopped.set()
                for future in futures.values():
                    future.cancel()
                launcher.stop()
                raise
    finally:
        if own:
            launcher.close()
        if staging is not None:
            staging.cleanup()
