"""The pytest plugin that runs inside a grading child.

It gives graders the learner's module (`sol`) and a way to add lines to the report (`note`),
and turns each check's result into one outcome event sent to the parent as the check ends.
"""

from pathlib import Path

import pytest

from graders.child import guard, probe_channel
from graders.kit import verdicts



class _State:
    """Filled in by graders.child.session before pytest starts (one object, so the guard's snapshot
    of this module stays valid while its fields are set)."""

    solution = None
    solutions_dir: Path = Path(".")
    emit = None
    guard_before: dict = {}
    check_timeout = 0.0
    seed = 0
    explanation = ""  # what the running check says when it passes (see the `explain` fixture)
    backend = None  # graders/child/probe_channel.py's Local or Remote, for an exercise with probes
    only: set | None = None  # the checks to run, the others not (session.run)
    before_checks = None  # called once the checks are collected, before the first one (session.run)


STATE = _State()


def pytest_configure(config):
    config.addinivalue_line("markers", "points(n): what the check is worth")
    # A check's verdict and message come from its exception (classify), never from pytest's report
    # of the failure, which in its default style parses the source of every frame of the traceback:
    # 65-180 ms per failed check, a third to a half of grading a wrong quiz. 'no' keeps the
    # exception's own line (all that pytest_collectreport reads of a grader that cannot be loaded).
    config.option.tbstyle = "no"


@pytest.fixture(scope="session")
def sol():
    """The learner's module, imported from the folder being graded (never in a judge: an
    exercise with probes reaches the learner's code through `worker`)."""
    if STATE.solution is None:
        raise RuntimeError("the checks of an exercise with probes reach the learner's code through `worker`")
    return STATE.solution


class _Ahead:
    def __getattr__(self, name):
        if name.startswith("_"):
            raise AttributeError(name)
        return lambda *args, **kwargs: STATE.backend.ahead(name, args, kwargs)


class _Overlapped:
    def __getattr__(self, name):
        if name.startswith("_"):
            raise AttributeError(name)
        return lambda *args, **kwargs: STATE.backend.overlapped(name, args, kwargs)


class _Probes:
    # `worker.ahead.name(*args)` sends the call and returns a function that reads its reply: under
    # --sandbox the worker runs it while the check works on what came before (probe_channel.Remote.ahead).
    ahead = _Ahead()
    # `worker.overlapped.name(*args)`: the same under --sandbox; None without it, where no call is
    # made (nothing would overlap it): the check makes the call when it needs its reply.
    overlapped = _Overlapped()

    def __getattr__(self, name):
        if name.startswith("_"):
            raise AttributeError(name)
        return lambda *args, **kwargs: STATE.backend.call(name, args, kwargs)


@pytest.fixture(scope="session")
def worker():
    """The learner's code, reached through the exercise's probes: `worker.name(*args)` runs
    graders/exercises/<module>/probes.py's `name(sol, *args)` where the learner's code runs, and returns
    its value as plain data (or ends the check with the verdict reached there)."""
    if STATE.backend is None:
        raise RuntimeError("this exercise has no graders/exercises/ module")
    return _Probes()


@pytest.fixture(scope="session")
def seed():
    """The grading seed: graders that draw a configuration at grading time (so that no figure
    can be looked up) draw it from this int. The runner prints it; `--seed N` reproduces a run."""
    return STATE.seed


@pytest.fixture
def explain():
    """explain(text): what this check says when it passes, shown beside its ✓ and in the
    results.json entry (e.g. why a quiz answer is right). A failing check says its failure."""
    def set_explanation(text):
        STATE.explanation = str(text)
    return set_explanation


@pytest.fixture
def note():
    """note(text): a line for the report, shown whether the check passes or not."""
    return lambda text: STATE.emit(event="note", text=str(text))


def pytest_collection_modifyitems(config, items):
    if STATE.only is not None:
        # A check shares what it reads with others through memos, never through their order, so it
        # says alone what it says in a whole grading (tests/test_wrong_solutions.py holds that).
        config.hook.pytest_deselected(items=[item for item in items if check_name(item) not in STATE.only])
        items[:] = [item for item in items if check_name(item) in STATE.only]


def pytest_collection_finish(session):
    if STATE.before_checks is not None:
        STATE.before_checks()


def check_name(item) -> str:
    return item.name.removeprefix("test_")


def pytest_runtest_logstart(nodeid, location):
    STATE.explanation = ""
    STATE.emit(event="start", check=location[2].removeprefix("test_"))


def classify(exc: BaseException) -> tuple[str, str]:
    """(outcome, message) for an exception that ended a check."""
    return verdicts.classify(exc, STATE.solution, STATE.solutions_dir, STATE.check_timeout)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    name = check_name(item)
    if report.when == "call" or (report.when == "setup" and report.failed):
        if call.excinfo is not None and isinstance(call.excinfo.value, probe_channel.Tampered):
            # the worker's guard (under --sandbox): the exercise is void, as without it
            STATE.emit(event="tampered", names=call.excinfo.value.names)
        if call.excinfo is None:
            STATE.emit(event="outcome", check=name, outcome="passed", message=STATE.explanation)
        else:
            result, message = classify(call.excinfo.value)
            STATE.emit(event="outcome", check=name, outcome=result, message=message)
    if report.when == "teardown":
        changed = guard.replaced(STATE.guard_before)
        if changed:
            STATE.emit(event="tampered", names=changed[:5])


def pytest_collectreport(report):
    if report.failed:
        # A grader that cannot even be collected is the package's bug, not the learner's.
        text = str(report.longrepr).strip().splitlines()
        STATE.emit(event="child_error", message="the grader could not be loaded: " + (text[-1] if text else "?"))
