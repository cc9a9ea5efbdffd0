"""The grader's own figures for this run's draw, worked out in a forked process while the
learner's code is traced and compiled in this one.

A figure graders/memo.py has not stored yet (a configuration drawn for the first time, or the
model of the grader's own that ex6 draws afresh every run) costs the checks tracing and
compiling programs of their own. Tracing holds the GIL, so in a thread those programs would
only take turns with the learner's; a process forked before this one has a JAX backend works
them out on another CPU. The checks still ask graders/memo.py for every figure: it takes the
figure from here when it was announced, waiting for it if it is not there yet, and stores it
as it always did. So nothing is written for a run whose checks never ask (a stub's), and
nothing changes in what a figure is.

Nothing is computed ahead when a JAX backend already exists here (forking then is unsafe): the
checks compute what they need themselves, as before.
"""

import json
import os
import signal
import threading
from collections.abc import Callable

_cond = threading.Condition()
_reading = False  # whether some thread is reading the pipe (the others wait for what it reads)
_announced: set[tuple[str, str]] = set()
_received: dict[tuple[str, str], dict] = {}
_pipe = None
_pid = 0


def start(figures: list[tuple[str, object, Callable]]) -> bool:
    """Fork a process that computes each (name, key, compute) in order (or reads it from the
    memo) and sends it back; whether it was started. Call it once, before this process has run
    any JAX computation."""
    global _pipe, _pid
    from graders import forkserver, memo

    if _pid or not figures or forkserver.backend_started():
        return False
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        _serve(write_end, figures, memo)
    os.close(write_end)
    _pipe, _pid = os.fdopen(read_end, "r"), pid
    _announced.update((name, repr(key)) for name, key, _ in figures)
    return True


def _serve(write_end: int, figures: list, memo) -> None:
    """The forked process: figures out, one JSON line each, then gone."""
    try:
        parent = os.getppid()
        # Only the pipe: the judge's channels (its results, the worker's socket) stay the judge's,
        # and no signal handler of the judge's (SIGTERM closes the worker) runs here.
        os.closerange(3, write_end)
        os.closerange(write_end + 1, 1 << 16)
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGALRM):
            signal.signal(sig, signal.SIG_DFL)
        from graders import sandbox

        sandbox.follow_parent(parent)  # gone with the judge, however it ends
        out = os.fdopen(write_end, "w")
        for name, key, compute in figures:
            line = {"name": name, "key": repr(key)}
            try:
                line["value"] = memo.stored(name, key, compute, write=False)
            except Exception as exc:  # the check computes it again, and says what went wrong
                line["error"] = f"{type(exc).__name__}: {exc}"
            out.write(json.dumps(line) + "\n")
            out.flush()
    finally:
        os._exit(0)


def take(name: str, key) -> tuple[bool, object]:
    """(True, value) for a figure the forked process was given, once it has sent it; (False,
    None) for any other, or when that process ended without it (the caller computes it)."""
    global _reading
    wanted = (name, repr(key))
    if wanted not in _announced:
        return False, None
    with _cond:
        while wanted not in _received and _pipe is not None:
            if _reading:
                _cond.wait()
                continue
            _reading, pipe = True, _pipe
            _cond.release()
            try:
                line = pipe.readline()
            finally:
                _cond.acquire()
                _reading = False
            if line:
                got = json.loads(line)
                _received[(got["name"], got["key"])] = got
            else:
                _close()
            _cond.notify_all()
        got = _received.get(wanted, {})
    return ("value" in got), got.get("value")


def _close() -> None:
    global _pipe
    if _pipe is not None:
        _pipe.close()
        _pipe = None


def stop() -> None:
    """End the forked process (a run whose checks asked for less than it was given) and reap it."""
    global _pid
    if _pid:
        try:
            os.kill(_pid, signal.SIGKILL)
            os.waitpid(_pid, 0)
        except (ProcessLookupError, ChildProcessError):
            pass
        _pid = 0
    with _cond:
        _close()
    _announced.clear()
    _received.clear()
