"""The grader's own figures for this run's draw, worked out in a forked process while the
learner's code is traced and compiled in this one.

A figure graders/kit/memo.py has not stored yet (the first run on a seed: a new installation's,
one given with --seed, a submission graded with an empty cache) costs the checks tracing and
compiling programs of their own. Tracing holds the GIL, so in a thread those programs would
only take turns with the learner's; a process forked before this one has a JAX backend works
them out on another CPU. The checks still ask graders/kit/memo.py for every figure: it takes the
figure from here when it was announced, waiting for it if it is not there yet, and stores it
as it always did. So nothing is written for a run whose checks never ask (a stub's), and
nothing changes in what a figure is.

Nothing is computed ahead when a JAX backend already exists here, or another thread runs
(forking then is unsafe, graders/kit/forked.py): the checks compute what they need themselves, as
before.
"""

from collections.abc import Callable

from graders.kit.forked import Forked


class _Ahead:
    """This run's forked process and the message each announced figure comes in. Kept in one
    object, not in module globals: the guard (graders/child/guard.py) takes a module global that
    changes for learner code replacing it."""

    process: Forked | None = None
    order: dict[tuple[str, str], int] = {}  # (name, repr(key)) -> the message that carries it


_run = _Ahead()


def start(figures: list[tuple[str, object, Callable]]) -> bool:
    """Fork a process that computes each (name, key, compute) in order (or reads it from the
    memo) and sends it back; whether it was started. Call it once, before this process has run
    any JAX computation."""
    from graders.kit import memo

    def job():
        for name, key, compute in figures:
            try:
                yield {"value": memo.stored(name, key, compute, write=False)}
            except Exception as exc:  # the check computes it again, and says what went wrong
                yield {"error": f"{type(exc).__name__}: {exc}"}

    # A figure an earlier run kept is read back by the check in a moment: forking a process for
    # it would cost the fork and, while that process lives, a copy of each page this one writes.
    figures = [f for f in figures if not memo.kept(f[0], f[1])]
    if _run.process is not None or not figures:
        return False
    _run.process = Forked.start(job)
    if _run.process is None:
        return False
    _run.order = {(name, repr(key)): i for i, (name, key, _) in enumerate(figures)}
    return True


def take(name: str, key) -> tuple[bool, object]:
    """(True, value) for a figure the forked process was given, once it has sent it; (False,
    None) for any other, or when that process ended without it (the caller computes it)."""
    index = _run.order.get((name, repr(key)))
    if index is None or _run.process is None:
        return False, None
    got = _run.process.message(index)
    return (True, got["value"]) if isinstance(got, dict) and "value" in got else (False, None)


def stop() -> None:
    """End the forked process (a run whose checks asked for less than it was given) and reap it."""
    if _run.process is not None:
        _run.process.stop()
        _run.process = None
    _run.order = {}
