"""The graders' own figures, kept on disk from one run to the next.

Some expected values cost a grading more than the learner's code does: the temporary memory of
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
"""

import hashlib
import json
import os
import platform
from functools import cache
from importlib import metadata
from pathlib import Path

from graders.kit import ahead
from graders import catalog

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
    folder = os.environ.get("GRADERS_EXPECTED_DIR")
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
    a process started by graders/kit/ahead.py computed for it. The value must survive JSON as it
    is: numbers, strings, lists, dicts with string keys. `write=False`: store nothing."""
    path = _path(name, key)
    if path is not None:
        try:
            return json.loads(path.read_text())["value"]
        except (OSError, ValueError, KeyError, TypeError):
            pass
    found, value = ahead.take(name, key)
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
