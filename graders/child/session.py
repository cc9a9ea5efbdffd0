"""One grading child: imports the learner's module and runs the exercise's grader with pytest.

It streams one JSON line per event to the file descriptor the parent handed over (never a file
on disk, so code in the learner's module has nothing to rewrite) and ends with os._exit, so
that atexit handlers registered by learner code never run.

Two ways in: `python -m graders.child.session EX_ID SOLUTIONS_DIR` (a fresh interpreter, the result
descriptor in GRADERS_RESULT_FD), or `run()` in a process forked by graders/runner/forkserver.py,
which imported the heavy libraries once for every exercise of a run.
"""

import json
import os
import sys
from pathlib import Path

from graders import settings


# pytest plugins no grader uses (no doctests, unittest classes, subtests, tmp_path, monkeypatch,
# recwarn, pdb, XML or paste reports, step-wise or setup-only runs): without them a session of 60
# checks takes 16 ms instead of 25. The logging, warnings and thread-exception plugins stay, so
# that what the learner's code logs or warns is kept out of the output shown for a crash as before.
UNUSED_PLUGINS = ("doctest", "junitxml", "pastebin", "stepwise", "setuponly", "setupplan", "legacypath", "tmpdir",
                  "monkeypatch", "recwarn", "debugging", "unittest", "subtests")


def _plain(value, depth: int = 0):
    """value as JSON-safe data (dicts as key/value pairs, so int keys stay ints), or TypeError."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if depth < 3 and isinstance(value, dict):
        return {"pairs": [[_plain(k, depth + 1), _plain(v, depth + 1)] for k, v in value.items()]}
    if depth < 3 and isinstance(value, (list, tuple)):
        return {"items": [_plain(v, depth + 1) for v in value], "tuple": isinstance(value, tuple)}
    raise TypeError(f"{type(value).__name__} is not plain data")


def unplain(value):
    if isinstance(value, dict) and "pairs" in value:
        return {unplain(k): unplain(v) for k, v in value["pairs"]}
    if isinstance(value, dict) and "items" in value:
        items = [unplain(v) for v in value["items"]]
        return tuple(items) if value.get("tuple") else items
    return value


def _start_worker(ex_id: str, solutions_dir: Path, result_fd: int, box: dict, check_timeout: float):
    """Fork the confined worker that will run the learner's code (graders/child/probe_channel.py); this
    process stays the judge. Called before any JAX backend exists here, so the fork is safe."""
    import socket

    from graders import catalog
    from graders.child import probe_channel, sandbox
    from graders.kit.lineage import follow_parent

    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    pid = os.fork()
    if pid == 0:
        try:
            ours.close()
            os.close(result_fd)  # the judge's event channel is never in the worker's hands
            # The draw is the judge's; inputs arrive as arguments. (The seed is no secret: every
            # report prints it, and the process's first environment block still holds it.)
            os.environ.pop(settings.SEED, None)
            os.environ.pop(settings.EXPECTED_DIR, None)  # the judge's store, not shown to the worker
            # The grader files (and their bytecode) hold the checks and how they draw inputs:
            # the worker sees the probes, never those.
            hidden = catalog.hidden_from_worker()
            for path in hidden:  # a folder hidden must exist now, or what is written later shows
                if path.name == "__pycache__":
                    try:
                        path.mkdir(exist_ok=True)
                    except OSError:
                        pass  # a read-only package: nothing is written there later either
            hidden = [str(p) for p in hidden]
            # The compilation cache stays: its folder can be searched but not listed
            # (process.sandbox_spec), so the worker finds only programs it compiles itself.
            box = dict(box, hidden=list(box["hidden"]) + hidden)
            # This process will hold the worker's namespace. The judge may die without a word
            # (the runner kills its process group when it does not answer SIGTERM in time, e.g.
            # stuck for seconds in one C call decoding a reply the worker made huge): it leaves
            # that group, which the worker may also have left, and follows the judge's death.
            judge = os.getppid()
            os.setsid()
            follow_parent(judge)
            from graders.kit import wire

            sandbox.sandboxed(box, None, on_fault=lambda message: wire.send(theirs, {"sandbox_error": message}))
            probe_channel.serve(theirs, ex_id, solutions_dir, check_timeout)
        except BaseException:
            import traceback

            traceback.print_exc()  # into the exercise's output, which the report shows
        finally:
            os._exit(0)
    theirs.close()
    return probe_channel.Remote(ours, pid)


def import_grading_modules(jax: bool) -> None:
    """Import what a grading child uses: a fork server does it once for all its children, a
    spawned child before the guard's snapshot (graders/child/guard.py)."""
    import pytest  # noqa: F401

    from graders.child import guard, plugin, probe_channel, sandbox  # noqa: F401
    from graders.kit import verdicts, wire# noqa: F401

    if jax:
        import jax.numpy  # noqa: F401

        from graders.kit import costs, forked, hlo, jaxpr, numeric, figure_store  # noqa: F401


def run(ex_id: str, solutions_dir: Path, result_fd: int, extract: list[str] | None = None,
        data: dict | None = None, box: dict | None = None, only: list[str] | None = None) -> None:
    """Grade ex_id. With `extract`, only import the learner's module and send those names' values
    as plain data; with `data`, grade those values (a module of data, never the learner's code).
    With `only`, run those checks and no other (the maintainer tests' wrong-solution corpora, which
    read no more): a check's verdict is its own, whatever ran before it.
    With `box` (--sandbox, an exercise with probes), this process is the judge: the learner's
    module is imported only in a confined worker, which the checks reach through the probes."""
    from graders import catalog

    check_timeout = settings.check_timeout()
    remote = None
    if box is not None and data is None and extract is None and catalog.has_probes(ex_id):
        remote = _start_worker(ex_id, solutions_dir, result_fd, box, check_timeout)
        import signal

        # The runner stops a timed-out exercise with SIGTERM: the worker's namespace goes first.
        signal.signal(signal.SIGTERM, lambda *_: (remote.close(), os._exit(1)))
    channel = os.fdopen(result_fd, "w", buffering=1)

    def emit(**event):
        channel.write(json.dumps(event) + "\n")
        channel.flush()

    import pytest

    from graders.child import guard, plugin, probe_channel
    from graders.kit import verdicts

    # Time spent tracing, lowering and compiling, reported so `make bench` can say how much of
    # the grading time is compilation (and what the persistent cache saves).
    compile_seconds = {"trace": 0.0, "compile": 0.0}
    if catalog.needs_jax(ex_id):
        import jax

        def on_duration(name, seconds, **_):
            if name.startswith("/jax/core/compile/"):
                compile_seconds["compile" if "backend_compile" in name else "trace"] += seconds

        jax.monitoring.register_event_duration_secs_listener(on_duration)
        # Every shared helper now, so the guard's snapshot covers them before learner code runs.
        import_grading_modules(jax=True)

    module_name = catalog.module_name(ex_id)
    probes = probe_channel.probe_module(ex_id) if remote is None and catalog.has_probes(ex_id) else None
    if probes is not None:
        probe_channel.before_solution(probes)
    before = guard.snapshot()  # after the probes' import, so that it covers them
    emit(event="importing")
    if remote is not None:
        module = None
    elif data is not None:
        import types

        module = types.ModuleType(module_name)
        module.__file__ = str(solutions_dir / f"{module_name}.py")
        for name, value in data.items():
            setattr(module, name, unplain(value))
    else:
        try:
            module = verdicts.load_module(module_name, solutions_dir)
        except BaseException as exc:  # SystemExit and KeyboardInterrupt from learner code too
            emit(event="import_error", message=verdicts.describe(exc, solutions_dir))
            os._exit(0)
    changed = guard.replaced(before)
    if changed:
        emit(event="tampered", names=changed[:5])
        os._exit(0)
    if extract is not None:
        values = {}
        for name in extract:
            if hasattr(module, name):
                try:
                    values[name] = _plain(getattr(module, name))
                except (TypeError, RecursionError) as exc:
                    emit(event="import_error", message=f"{name} should hold plain data (dicts, strings, numbers): {exc}")
                    os._exit(0)
        emit(event="data", values=values)
        emit(event="done")
        os._exit(0)

    state = plugin.STATE
    state.solution, state.solutions_dir, state.emit, state.guard_before = module, solutions_dir, emit, before
    state.check_timeout = check_timeout
    if remote is not None:
        state.backend = remote

        def worker_ready():
            """The worker's first word, awaited once pytest has started and collected the checks
            here: the worker imports the learner's module meanwhile (both take tens of ms). What
            ends the grading ends it before any check starts, as it did before pytest started."""
            first = remote.start()
            if "sandbox_error" in first:  # the autograder's fault: no learner code ran
                remote.close()
                emit(event="sandbox_error", message=first["sandbox_error"])
                os._exit(0)
            if "import_error" in first:
                remote.close()
                emit(event="import_error", message=first["import_error"])
                os._exit(0)
            if "tampered" in first:  # the worker's guard, at the learner's import
                remote.close()
                emit(event="tampered", names=first["tampered"])
                os._exit(0)

        state.before_checks = worker_ready
    elif probes is not None:
        state.backend = probe_channel.Local(probes, module, solutions_dir, check_timeout)
    state.seed = settings.seed()
    state.only = set(only) if only else None
    # no:unraisableexception: at the end pytest runs a full collection over the child's heap to
    # report exceptions raised in __del__, which grading never reads.
    args = [str(catalog.grader_file(ex_id)), "-p", "no:terminal", "-p", "no:cacheprovider",
            "-p", "no:unraisableexception", *(f"-pno:{name}" for name in UNUSED_PLUGINS),
            "-s", "--assert=plain", "--noconftest", "-c", os.devnull,
            "--rootdir", str(catalog.GRADERS_DIR),
            f"--timeout={state.check_timeout:g}", "--timeout-method=signal"]
    try:
        pytest.main(args, plugins=[plugin])
    except BaseException as exc:
        emit(event="child_error", message=verdicts.describe(exc, solutions_dir))
    if remote is not None:
        remote.close()  # every process of the submission is gone before "done"
    emit(event="timing", **compile_seconds)
    emit(event="done")
    os._exit(0)


def command(python: str, *args: str) -> list[str]:
    """How this module is started as a process (the one place that says it)."""
    return [python, "-m", "graders.child.session", *args]


def main() -> None:
    ex_id, solutions_dir = sys.argv[1], Path(sys.argv[2]).resolve()
    run(ex_id, solutions_dir, settings.take_result_fd())


if __name__ == "__main__":
    main()
