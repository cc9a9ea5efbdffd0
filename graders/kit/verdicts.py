"""Loading the learner's module by file path, and describing what their code raised.

Everything here speaks about the learner's file and line, never about the grader's frames.
"""

import contextlib
import importlib.util
import inspect
import linecache
import os
import sys
import traceback
import types
from pathlib import Path

MAX_MESSAGE = 600  # characters of an exception message shown to the learner


class CheckFailed(AssertionError):
    """A check's verdict: the message is shown to the learner as it is."""


class NotAttempted(Exception):
    """Raised by a grader when the learner left a stub value (e.g. a module-level None) untouched."""


class Verdict(Exception):
    """An outcome already decided where the learner's code ran (graders/child/probe_channel.py), carried to
    the check as it is: `outcome` is failed or not_attempted."""

    def __init__(self, outcome: str, message: str):
        super().__init__(message)
        self.outcome, self.message = outcome, message


class Deferred(BaseException):
    """A check the students' copy cannot decide (the quiz without its key; an expected value not
    recorded, graders/kit/expected.py): it reads "graded when you submit", neither passed nor
    failed. A BaseException, so that no `except Exception` in a check takes it for the learner's."""


class ProbeTimeout(BaseException):
    """Raised in a worker's learner code when a probe runs past the check's limit (a
    BaseException, as pytest-timeout's is, so that `except Exception` does not swallow it)."""


def fail(message: str) -> None:
    raise CheckFailed(message)


def load_module(name: str, solutions_dir: Path) -> types.ModuleType:
    """Import `<solutions_dir>/<name>.py` under the name `name` (so any folder works alike)."""
    path = Path(solutions_dir).resolve() / f"{name}.py"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    # Helpers the learner keeps beside their module stay importable; appended, so they
    # cannot shadow numpy or jax.
    if str(path.parent) not in sys.path:
        sys.path.append(str(path.parent))
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def imported_afresh(module: types.ModuleType, name: str | None = None) -> types.ModuleType:
    """Another copy of a learner's module, its file run again (as `name`, else its own name):
    nothing the first copy keeps in its module state (a cache, a counter, a value a grader's trace
    left there) is in it. While its code runs it is sys.modules[that name], where dataclasses and
    pickle look a module up; then whatever was there before is again."""
    spec = importlib.util.spec_from_file_location(name or module.__name__, module.__file__)
    fresh = importlib.util.module_from_spec(spec)
    with standing_in(fresh):
        spec.loader.exec_module(fresh)
    return fresh


@contextlib.contextmanager
def standing_in(module: types.ModuleType):
    """While on, `module` is sys.modules[its name], where pickle and dataclasses look a class's
    module up (a copy imported afresh, while its code runs); then whatever was there before is again."""
    name = module.__name__
    before = sys.modules.get(name)
    sys.modules[name] = module
    try:
        yield module
    finally:
        if before is None:
            sys.modules.pop(name, None)
        else:
            sys.modules[name] = before


def _short(text: str) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= MAX_MESSAGE else text[: MAX_MESSAGE - 3] + "..."


def learner_frame(exc: BaseException, solutions_dir: Path) -> tuple[str, int, str] | None:
    """The innermost frame of the traceback that lies in the learner's folder."""
    root = str(Path(solutions_dir).resolve()) + os.sep
    found = None
    for frame in traceback.extract_tb(exc.__traceback__):
        if os.path.abspath(frame.filename).startswith(root):
            found = frame
    if found is None and isinstance(exc, SyntaxError) and exc.filename:
        if os.path.abspath(exc.filename).startswith(root):
            code = (exc.text or "").strip()
            return os.path.basename(exc.filename), exc.lineno or 0, code
    if found is None:
        return None
    code = (found.line or linecache.getline(found.filename, found.lineno)).strip()
    return os.path.basename(found.filename), found.lineno, code


def where(exc: BaseException, solutions_dir: Path) -> str:
    frame = learner_frame(exc, solutions_dir)
    if frame is None:
        return ""
    name, line, code = frame
    return f" ({name}, line {line}: {code})" if code else f" ({name}, line {line})"


def describe(exc: BaseException, solutions_dir: Path) -> str:
    """One line: the exception type and message, and where in the learner's file it was raised."""
    if isinstance(exc, SyntaxError) and not exc.filename:
        return f"SyntaxError: {_short(exc.msg)}"
    if isinstance(exc, SyntaxError):
        return f"SyntaxError: {_short(exc.msg)}{where(exc, solutions_dir)}"
    message = _short(str(exc))
    return f"{type(exc).__name__}{': ' + message if message else ''}{where(exc, solutions_dir)}"


def functions_passed(exc: BaseException, solution) -> list[str]:
    """The learner module's own public functions whose frames the traceback runs through,
    outermost first (each once): [the function a check called, ..., the one that raised]."""
    path = getattr(solution, "__file__", None)
    if not path:
        return []
    codes = {}
    try:
        for name, value in list(vars(solution).items()):
            if name.startswith("_") or not callable(value):
                continue
            try:
                code = getattr(inspect.unwrap(value), "__code__", None)
            except Exception:  # an object whose attributes raise, or a __wrapped__ cycle
                continue
            if code is not None and os.path.abspath(code.co_filename) == os.path.abspath(path):
                codes[code] = name
    except Exception:  # a module whose namespace cannot be read
        return []
    names = []
    for frame, _ in traceback.walk_tb(exc.__traceback__):
        name = codes.get(frame.f_code)
        if name is not None and name not in names:
            names.append(name)
    return names


def classify(exc: BaseException, solution, solutions_dir: Path, check_timeout: float) -> tuple[str, str]:
    """(outcome, message) for an exception that ended a check, or a probe of one. When the
    function a check called raised inside another of the learner's functions, the message says
    the check depends on that one, and guesses no hint."""
    solutions_dir = Path(solutions_dir)
    if isinstance(exc, Verdict):
        return exc.outcome, exc.message
    if isinstance(exc, Deferred):
        return "deferred", str(exc)
    passed = functions_passed(exc, solution) if not isinstance(exc, (CheckFailed, NotAttempted)) else []
    called, failing = (passed[0], passed[-1]) if passed else (None, None)
    if isinstance(exc, NotImplementedError):
        frame = learner_frame(exc, solutions_dir)
        tb = exc.__traceback__
        while tb is not None and tb.tb_next is not None:
            tb = tb.tb_next
        # Only the stub's own `raise NotImplementedError` counts as "not attempted": the
        # innermost frame must be in the learner's file.
        if frame and tb is not None and Path(tb.tb_frame.f_code.co_filename).resolve().parent == solutions_dir.resolve():
            if failing is None:
                return "not_attempted", f"not attempted yet: still raises NotImplementedError{where(exc, solutions_dir)}"
            if called != failing:
                return "not_attempted", (f"not attempted yet: `{called}` calls `{failing}`, which still raises "
                                         f"NotImplementedError{where(exc, solutions_dir)}")
            return "not_attempted", f"not attempted yet: `{failing}` still raises NotImplementedError{where(exc, solutions_dir)}"
    if isinstance(exc, AttributeError) and solution is not None and getattr(exc, "obj", None) is solution:
        module = Path(getattr(solution, "__file__", "") or "your module").name
        return "failed", (f"{module} defines no `{exc.name}`, which this check calls. "
                          f"Hint: the stub names every function to write; keep `{exc.name}` with the stub's signature.")
    if isinstance(exc, NotAttempted):
        return "not_attempted", f"not attempted yet: {exc}"
    if isinstance(exc, CheckFailed):
        return "failed", str(exc)
    if isinstance(exc, ProbeTimeout) or (type(exc).__name__ == "Failed" and "Timeout" in str(exc)):
        return "failed", (f"stopped after {check_timeout:g} s{where(exc, solutions_dir)}. "
                          "Hint: look for a loop that never ends, or a Python loop over many elements.")
    if called != failing and learner_frame(exc, solutions_dir) is not None:
        # the cause is another function's failure: say so, and guess nothing about this one
        through = f" (through {', '.join(f'`{n}`' for n in passed[1:-1])})" if len(passed) > 2 else ""
        return "failed", (f"depends on `{failing}`, which fails: `{called}` calls it{through}, and it raised "
                          f"{describe(exc, solutions_dir)}. This check judges `{called}` once `{failing}` runs.")
    if learner_frame(exc, solutions_dir) is not None:
        return "failed", f"your code raised {describe(exc, solutions_dir)}"
    if isinstance(exc, AssertionError):
        return "failed", str(exc)
    return "failed", (f"could not check what your code returned: {describe(exc, solutions_dir)}. "
                      "Hint: compare the types and shapes you return with the docstring.")
