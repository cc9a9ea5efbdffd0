"""Loading the learner's module by file path, and describing what their code raised.

Everything here speaks about the learner's file and line, never about the grader's frames.
"""

import importlib.util
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
