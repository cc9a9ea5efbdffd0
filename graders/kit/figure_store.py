"""The graders' own figures: kept on disk from one run to the next, and worked out ahead in a
forked process while the learner's code is traced.

Kept: some expected values cost a grading more than the learner's code does: the temporary memory of
the grader's own gradient programs (ex2, ex6) means tracing, lowering and loading a dozen
programs, even when the compilation cache holds them. Those figures depend only on the
configuration drawn, the graders' code, the libraries and XLA's flags, never on the learner's
code, so they are computed once and read back in every later run: after an edit, in watch
mode, and for every wrong solution of the package's own tests.

Where: GRADERS_EXPECTED_DIR, which graders.runner.launch sets (to .cache/expected) only when the
compilation cache is on: `--no-cache` computes everything afresh and writes nothing. A file's
name is a hash of every source file of graders/, the versions of the libraries, JAX's and XLA's
settings from the environment, the machine, the figure's name and its arguments, so a change to any of them computes it afresh.
Under --sandbox only the judge reads or writes it (the worker's view hides the folder); without
--sandbox the learner's code shares the grading process and could write anything anyway.

Ahead of time (ahead()): the figures of this run's draw, worked out in a forked process while
the learner's code is traced and compiled in this one. A figure stored() has not stored yet (the first run on a seed: a new installation's,
one given with --seed, a submission graded with an empty cache) costs the checks tracing and
compiling programs of their own. Tracing holds the GIL, so in a thread those programs would
only take turns with the learner's; a process forked before this one has a JAX backend works
them out on another CPU. The checks still ask stored() for every figure: it takes the
figure from here when it was announced, waiting for it if it is not there yet, and stores it
as it always did. So nothing is written for a run whose checks never ask (a stub's), and
nothing changes in what a figure is.

Nothing is computed ahead when a JAX backend already exists here, or another thread runs
(forking then is unsafe, graders/kit/forked.py): the checks compute what they need themselves, as
before.
"""

import hashlib
import json
import os
import platform
from collections.abc import Callable
from functools import cache
from importlib import metadata
from pathlib import Path

from graders import catalog, settings
from graders.kit.forked import Forked

LIBRARIES = ("jax", "jaxlib", "flax", "optax", "numpy", "ml_dtypes")


@cache
def fingerprint() -> str:
    """What every stored figure depends on besides its own arguments."""
    digest = hashlib.sha256()
    for path in sorted(catalog.GRADERS_DIR.rglob("*.py")):
        digest.update(str(path.relative_to(catalog.GRADERS_DIR)).encode() + b"\0" + path.read_bytes() + b"\0")
    for name in LIBRARIES:
        try:
            digest.update(f"{name}=={metadata.version(name)}\0".encode())
        except metadata.PackageNotFoundError:
            digest.update(f"{name} missing\0".encode())
    # JAX's and XLA's settings from the environment (XLA_FLAGS, JAX_ENABLE_X64, ...), but not
    # where the compilation cache is, which changes no figure.
    for name in sorted(os.environ):
        if name.startswith(("JAX_", "XLA_")) and not name.startswith(("JAX_COMPILATION_CACHE", "JAX_PERSISTENT_CACHE")):
            digest.update(f"{name}={os.environ[name]}\0".encode())
    digest.update(f"{platform.machine()} {platform.processor()} {_cpu_flags()}".encode())
    return digest.hexdigest()


def _cpu_flags() -> str:
    """The processor's features, which XLA compiles for (the first `flags` line of /proc/cpuinfo)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                return line
    except OSError:
        pass
    return ""


def _path(name: str, key) -> Path | None:
    """Where the figure for (name, key) is kept, or None when no folder is set."""
    folder = settings.expected_dir()
    if not folder:
        return None
    return Path(folder) / (hashlib.sha256(f"{fingerprint()}\0{name}\0{key!r}".encode()).hexdigest() + ".json")


def kept(name: str, key) -> bool:
    """Whether an earlier run stored the figure for (name, key)."""
    path = _path(name, key)
    return path is not None and path.is_file()


def stored(name: str, key, compute, write: bool = True):
    """compute(), or what it returned in an earlier run for the same name and key (the key's
    repr must say everything the figure depends on besides graders/ and the libraries), or what
    a process started by ahead() computed for it. The value must survive JSON as it
    is: numbers, strings, lists, dicts with string keys. `write=False`: store nothing."""
    path = _path(name, key)
    if path is not None:
        try:
            return json.loads(path.read_text())["value"]
        except (OSError, ValueError, KeyError, TypeError):
            pass
    found, value = _take(name, key)
    if not found:
        value = json.loads(json.dumps(compute()))  # the same types whether computed or read back
    if path is None or not write:
        return value
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        partial.write_text(json.dumps({"name": name, "key": repr(key), "value": value}))
        os.replace(partial, path)  # whole or not at all, whatever runs at the same time
    except OSError:
        pass  # a read-only package grades as before, only slower
    return value


# ---- ahead of time ----


class _Ahead:
    """This run's forked process and the message each announced figure comes in. Kept in one
    object, not in module globals: the guard (graders/child/guard.py) takes a module global that
    changes for learner code replacing it."""

    process: Forked | None = None
    order: dict[tuple[str, str], int] = {}  # (name, repr(key)) -> the message that carries it


_run = _Ahead()


def ahead(figures: list[tuple[str, object, Callable]]) -> bool:
    """Fork a process that computes each (name, key, compute) in order (or reads it from the
    store) and sends it back; whether it was started. Call it once, before this process has run
    any JAX computation."""

    def job():
        for name, key, compute in figures:
            try:
                yield {"value": stored(name, key, compute, write=False)}
            except Exception as exc:  # the check computes it again, and says what went wrong
                yield {"error": f"{type(exc).__name__}: {exc}"}

    # A figure an earlier run kept is read back by the check in a moment: forking a process for
    # it would cost the fork and, while that process lives, a copy of each page this one writes.
    figures = [f for f in figures if not kept(f[0], f[1])]
    if _run.process is not None or not figures:
        return False
    _run.process = Forked.start(job)
    if _run.process is None:
        return False
    _run.order = {(name, repr(key)): i for i, (name, key, _) in enumerate(figures)}
    return True


def _take(name: str, key) -> tuple[bool, object]:
    """(True, value) for a figure the forked process was given, once it has sent it; (False,
    None) for any other, or when that process ended without it (the caller computes it)."""
    index = _run.order.get((name, repr(key)))
    if index is None or _run.process is None:
        return False, None
    got = _run.process.message(index)
    return (True, got["value"]) if isinstance(got, dict) and "value" in got else (False, None)


def stop_ahead() -> None:
    """End the forked process (a run whose checks asked for less than it was given) and reap it."""
    if _run.process is not None:
        _run.process.stop()
        _run.process = None
    _run.order = {}
