"""The pytest plugin that runs inside a grading child.

It gives graders the learner's module (`sol`) and a way to add lines to the report (`note`),
and turns each check's result into one outcome event sent to the parent as the check ends.
"""

from pathlib import Path

import pytest

from graders import guard
from graders.learner import CheckFailed, NotAttempted, describe, learner_frame, where



class _State:
    """Filled in by graders.child before pytest starts (one object, so the guard's snapshot
    of this module stays valid while its fields are set)."""

    solution = None
    solutions_dir: Path = Path(".")
    emit = None
    guard_before: dict = {}
    check_timeout = 0.0
    seed = 0
    explanation = ""  # what the running check says when it passes (see the `explain` fixture)


STATE = _State()


def pytest_configure(config):
    config.addinivalue_line("markers", "points(n): what the check is worth")


@pytest.fixture(scope="session")
def sol():
    """The learner's module, imported from the folder being graded."""
    return STATE.solution


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


def check_name(item) -> str:
    return item.name.removeprefix("test_")


def pytest_runtest_logstart(nodeid, location):
    STATE.explanation = ""
    STATE.emit(event="start", check=location[2].removeprefix("test_"))


def classify(exc: BaseException) -> tuple[str, str]:
    """(outcome, message) for an exception that ended a check."""
    if isinstance(exc, NotImplementedError):
        frame = learner_frame(exc, STATE.solutions_dir)
        tb = exc.__traceback__
        while tb is not None and tb.tb_next is not None:
            tb = tb.tb_next
        # Only the stub's own `raise NotImplementedError` counts as "not attempted": the
        # innermost frame must be in the learner's file.
        if frame and tb is not None and Path(tb.tb_frame.f_code.co_filename).resolve().parent == STATE.solutions_dir.resolve():
            return "not_attempted", f"not attempted yet: still raises NotImplementedError{where(exc, STATE.solutions_dir)}"
    if isinstance(exc, AttributeError) and STATE.solution is not None and getattr(exc, "obj", None) is STATE.solution:
        module = Path(getattr(STATE.solution, "__file__", "") or "your module").name
        return "failed", (f"{module} defines no `{exc.name}`, which this check calls. "
                          f"Hint: the stub names every function to write; keep `{exc.name}` with the stub's signature.")
    if isinstance(exc, NotAttempted):
        return "not_attempted", f"not attempted yet: {exc}"
    if isinstance(exc, CheckFailed):
        return "failed", str(exc)
    if type(exc).__name__ == "Failed" and "Timeout" in str(exc):
        return "failed", (f"stopped after {STATE.check_timeout:g} s{where(exc, STATE.solutions_dir)}. "
                          "Hint: look for a loop that never ends, or a Python loop over many elements.")
    if learner_frame(exc, STATE.solutions_dir) is not None:
        return "failed", f"your code raised {describe(exc, STATE.solutions_dir)}"
    if isinstance(exc, AssertionError):
        return "failed", str(exc)
    return "failed", (f"could not check what your code returned: {describe(exc, STATE.solutions_dir)}. "
                      "Hint: compare the types and shapes you return with the docstring.")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    name = check_name(item)
    if report.when == "call" or (report.when == "setup" and report.failed):
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
