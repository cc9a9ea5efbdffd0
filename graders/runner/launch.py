"""How learner code runs: one grading child per exercise, with a wall-clock limit, its output
kept in a file, its outcomes read from a pipe, and its whole process group killed at the end.

Children come from a fork server (graders/runner/forkserver.py) that imported the libraries once, or,
if that cannot start, from a fresh interpreter each. Either way the child is the same code
(graders/child/session.py) in the same environment.
"""

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from graders import catalog, settings
from graders.child import session
from graders.runner import forkserver
from graders.runner.forkserver import kill_group
from graders.runner import kept_server

OUTPUT_LINES = 15  # lines of the learner's own printing shown for a crashed exercise
OUTPUT_CHARS = 1500


# How every grading process compiles: the learner's programs miss the compilation cache after
# every edit, and compiling them is most of an edit loop. LLVM's optimisations change neither a
# number beyond rounding nor XLA's HLO or buffer plan (memory_analysis(), cost_analysis() and the
# compiled HLO's collectives are decided before code generation: tests/test_compiler_settings.py);
# without them grading the reference cold takes 15-20% less CPU time. Set here, so the
# judge, the worker and the learner's own compile() all build programs alike.
COMPILER_SETTINGS = {"JAX_DISABLE_MOST_OPTIMIZATIONS": "true"}


def child_env(check_timeout: float, cache: bool, seed: int, base: dict | None = None,
              force_cpu: bool = False) -> dict[str, str]:
    env = dict(os.environ if base is None else base)
    flags = " ".join(f for f in env.get("XLA_FLAGS", "").split()
                     if not f.startswith("--xla_force_host_platform_device_count"))
    env["XLA_FLAGS"] = (flags + " --xla_force_host_platform_device_count=8").strip()
    if force_cpu:
        env["JAX_PLATFORMS"] = "cpu"
    else:
        env.setdefault("JAX_PLATFORMS", "cpu")
    env["PYTHONPATH"] = str(catalog.ROOT)
    env["PYTHONDONTWRITEBYTECODE"] = "1"  # nothing written into the learner's folder
    env[settings.CHECK_TIMEOUT] = f"{check_timeout:g}"
    env[settings.SEED] = str(seed)
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    env.update(COMPILER_SETTINGS)
    if cache:
        # The user's own cache directory wins; either way the graders' programs are small and
        # compile in well under JAX's default 1 s threshold, so cache them all.
        env.setdefault("JAX_COMPILATION_CACHE_DIR", str(catalog.ROOT / ".cache" / "jax"))
        env.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
        env.setdefault("JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES", "0")
        # The graders' own figures too (graders/kit/figure_store.py); a sandboxed worker is not shown it.
        env.setdefault(settings.EXPECTED_DIR, str(catalog.ROOT / ".cache" / "expected"))
    else:
        env.pop("JAX_COMPILATION_CACHE_DIR", None)
        env.pop(settings.EXPECTED_DIR, None)
        env["JAX_ENABLE_COMPILATION_CACHE"] = "false"
    return env


@dataclass
class ChildRun:
    events: list[dict]
    timed_out: bool
    returncode: int | None
    output: str  # the tail of what the learner's code printed


def _tail(path: Path) -> str:
    size = path.stat().st_size
    if size == 0:
        return ""
    with open(path, "rb") as f:
        f.seek(max(0, size - 64 * 1024))
        text = f.read().decode("utf-8", "replace")
    lines = text.rstrip().splitlines()[-OUTPUT_LINES:]
    shown = "\n".join(line[:200] for line in lines)[-OUTPUT_CHARS:]
    if size > len(shown):
        shown = f"[{size:,} bytes printed; the last lines:]\n" + shown
    return shown


class _Events:
    """Reads the child's event pipe on a thread; `on_event` sees each event as it arrives."""

    def __init__(self, read_fd: int, on_event=None):
        self.events: list[dict] = []
        self._thread = threading.Thread(target=self._read, args=(read_fd, on_event), daemon=True)
        self._thread.start()

    def _read(self, read_fd, on_event):
        with os.fdopen(read_fd, "r", encoding="utf-8", errors="replace") as pipe:
            for line in pipe:
                try:
                    event = json.loads(line)
                except ValueError:
                    continue
                if isinstance(event, dict):
                    event["_at"] = time.monotonic()
                    self.events.append(event)
                    if on_event is not None:
                        try:
                            on_event(event)
                        except Exception:  # a display problem never stops grading
                            pass

    def join(self, timeout: float) -> bool:
        self._thread.join(timeout)
        return not self._thread.is_alive()


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


class Spawner:
    """A fresh interpreter per exercise."""

    def __init__(self, env: dict[str, str], python: str = sys.executable):
        self.env = env
        self.python = python
        self._running: set[int] = set()

    def run(self, ex_id: str, solutions: Path, timeout: float, on_event=None, extra: dict | None = None) -> ChildRun:
        """`extra`: at most {"only": checks}, which a spawned child ignores: it grades every check."""
        if set(extra or {}) - {"only"}:
            raise ValueError(f"a spawned grading process takes no {sorted(set(extra) - {'only'})}")
        read_fd, write_fd = os.pipe()
        env = dict(self.env, **{settings.RESULT_FD: str(write_fd)})
        with tempfile.TemporaryDirectory(prefix="graders-") as tmp:
            out_path = Path(tmp) / "output"
            with open(out_path, "wb") as out:
                proc = subprocess.Popen(
                    session.command(self.python, ex_id, str(solutions)),
                    cwd=catalog.ROOT, env=env, stdin=subprocess.DEVNULL, stdout=out,
                    stderr=subprocess.STDOUT, pass_fds=(write_fd,), start_new_session=True)
            os.close(write_fd)
            self._running.add(proc.pid)
            events = _Events(read_fd, on_event)
            timed_out = False
            try:
                proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                timed_out = True
            self._running.discard(proc.pid)
            kill_group(proc.pid)
            proc.wait()
            events.join(timeout=5)
            return ChildRun(list(events.events), timed_out, proc.returncode, _tail(out_path))

    def stop(self) -> None:
        """Kill every grading process now running (Ctrl-C)."""
        for pid in list(self._running):
            kill_group(pid)

    def close(self) -> None:
        pass


class ForkServer:
    """Children forked from one process that imported the libraries once (graders/runner/forkserver.py).

    Falls back to a fresh interpreter for an exercise if the server is gone (learner code can
    kill its parent) or refuses."""

    START_TIMEOUT = 120.0

    def __init__(self, env: dict[str, str], libraries: list[str], python: str = sys.executable,
                 sandbox: dict | None = None, keep: bool = False):
        self.env = env
        self.libraries, self.python = libraries, python
        # A sandboxed run never falls back to an unconfined interpreter.
        self.sandbox = sandbox
        self._spawner = Spawner(env, python) if sandbox is None else None
        self._lock = threading.Lock()
        self._next_id = 0
        self._replies: dict[int, dict] = {}
        self._cond = threading.Condition()
        self._alive = False
        self._private: ForkServer | None = None  # if the kept server went away before answering
        self._private_lock = threading.Lock()
        self._proc = self._log = None
        self.server_pid: int | None = None
        self.kept = False
        if keep and sandbox is None:
            self._sock = kept_server.connect(env, python, libraries)
            self.kept = self._sock is not None
        if not self.kept:
            ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            self._sock = ours
            self._log = tempfile.TemporaryFile()
            try:
                self._proc = subprocess.Popen(
                    forkserver.command(python, str(theirs.fileno()), *libraries),
                    cwd=catalog.ROOT, env=env, stdin=subprocess.DEVNULL, stdout=self._log,
                    stderr=subprocess.STDOUT, pass_fds=(theirs.fileno(),), start_new_session=True)
            finally:
                theirs.close()
        self._ready = threading.Event()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        while True:
            try:
                data = self._sock.recv(65536)
            except OSError:
                data = b""
            if not data:
                break
            try:
                message = json.loads(data)
            except ValueError:
                continue
            if message.get("ready"):
                self.server_pid = message.get("pid")
                self._alive = True
                self._ready.set()
                continue
            with self._cond:
                self._replies.setdefault(message.get("id"), {}).update(message)
                self._cond.notify_all()
        with self._cond:
            self._alive = False
            self._ready.set()
            self._cond.notify_all()

    def _wait_for(self, request: int, key: str, deadline: float) -> dict | None:
        with self._cond:
            while key not in self._replies.get(request, {}) and "refused" not in self._replies.get(request, {}):
                left = deadline - time.monotonic()
                if left <= 0 or not self._alive:
                    return None
                self._cond.wait(min(left, 1.0))
            return self._replies[request]

    def _fallback(self, ex_id, solutions, timeout, on_event, extra=None) -> ChildRun:
        if self.kept:
            # The kept server left (idle, replaced) as this run came: a server for this run.
            with self._private_lock:  # not self._lock, which a failed send below still holds
                if self._private is None:
                    self._private = ForkServer(self.env, self.libraries, self.python)
            return self._private.run(ex_id, solutions, timeout, on_event, extra)
        if self._spawner is None:
            return ChildRun([{"event": "child_error", "message": "the sandbox could not start a grading "
                              "process (the fork server is gone); nothing of this exercise was run."}], False, None, "")
        return self._spawner.run(ex_id, solutions, timeout, on_event)

    def run(self, ex_id: str, solutions: Path, timeout: float, on_event=None, extra: dict | None = None) -> ChildRun:
        """`extra` (fork server only): {"extract": names} to only send those values of the
        learner's module; {"data": values, "trusted": True} to grade values, unconfined;
        {"only": checks} to run those checks and no other."""
        self._ready.wait(self.START_TIMEOUT)
        if not self._alive:
            return self._fallback(ex_id, solutions, timeout, on_event, extra)
        read_fd, write_fd = os.pipe()
        with tempfile.TemporaryDirectory(prefix="graders-") as tmp:
            out_path = Path(tmp) / "output"
            with open(out_path, "wb") as out:
                with self._lock:
                    self._next_id += 1
                    request = self._next_id
                    try:
                        message = {"id": request, "ex": ex_id, "solutions": str(solutions), **(extra or {})}
                        if self.sandbox is not None:
                            message["sandbox"] = dict(self.sandbox, solutions=str(solutions))
                        if self.kept:
                            # The rest is the server's own: the same, or its name would differ.
                            # (The whole could be more than a message holds.)
                            message["env"] = {k: v for k, v in self.env.items() if settings.volatile(k)}
                        socket.send_fds(self._sock, [json.dumps(message).encode()], [write_fd, out.fileno()])
                    except OSError:
                        os.close(write_fd)
                        os.close(read_fd)
                        return self._fallback(ex_id, solutions, timeout, on_event, extra)
            os.close(write_fd)
            start = time.monotonic()
            events = _Events(read_fd, on_event)
            started = self._wait_for(request, "pid", start + 30.0)
            if started is None or "pid" not in started:
                ended = events.join(timeout=1)
                if started is not None and "refused" in started:
                    return self._fallback(ex_id, solutions, timeout, on_event, extra)
                if started is None and not self._alive and ended and not events.events:
                    # The server died with the request unread (no child holds the event pipe)
                    return self._fallback(ex_id, solutions, timeout, on_event, extra)
                return ChildRun(list(events.events), False, None, _tail(out_path))
            pid = started["pid"]
            ended = self._wait_for(request, "exit", start + timeout)
            timed_out = False
            if ended is None and self._alive:
                timed_out = True
            elif ended is None:
                # The server is gone (learner code may have killed it): the child's end shows as
                # the end of its event pipe.
                timed_out = not events.join(max(0.0, start + timeout - time.monotonic()))
            if self.sandbox is not None and ended is None and not (extra or {}).get("trusted"):
                # The waiter outside the namespace kills its process 1, and so all of it.
                _signal(pid, signal.SIGTERM)
                self._wait_for(request, "exit", time.monotonic() + 5.0)
            kill_group(pid)
            if timed_out and self._alive:
                self._wait_for(request, "exit", time.monotonic() + 5.0)
            events.join(timeout=5)
            reply = self._replies.get(request, {})
            return ChildRun(list(events.events), timed_out, reply.get("exit"), _tail(out_path))

    def stop(self) -> None:
        """Kill every grading process now running (Ctrl-C); each run() then returns at once."""
        with self._cond:
            pids = [r["pid"] for r in self._replies.values() if "pid" in r and "exit" not in r]
        for pid in pids:
            if self.sandbox is not None:
                _signal(pid, signal.SIGTERM)  # the waiter outside the namespace kills its process 1
            kill_group(pid)
        for other in (self._private, self._spawner):
            if other is not None:
                other.stop()

    def close(self) -> None:
        try:
            # shutdown, not only close: the reader thread blocked in recv keeps the socket open,
            # and the server would not see the end until the wait below ran out
            self._sock.shutdown(socket.SHUT_RDWR)
            self._sock.close()
        except OSError:
            pass
        if self._private is not None:
            self._private.close()
        if self._proc is None:
            return  # a kept server: it lives on for the next run
        try:
            self._proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            kill_group(self._proc.pid)
            self._proc.wait()
        self._log.close()


def sandbox_spec(env: dict[str, str], python: str) -> dict:
    """What a sandboxed child may see besides `graders/` and its own modules: the interpreter,
    the package's environment and the compilation cache, read-only; the secrets are hidden."""
    import sysconfig

    readable = {sys.prefix, sys.base_prefix, sysconfig.get_paths()["purelib"], os.path.realpath(python)}
    cache = env.get("JAX_COMPILATION_CACHE_DIR")
    if cache:
        Path(cache).mkdir(parents=True, exist_ok=True)  # a read-only cache must exist to be read
        # Searchable, not listable, by the sandbox's user: an entry is found only by its key, a
        # hash of the program compiled, so a worker reuses what the same program compiled to (a
        # correct solution's, once the reference warmed the cache) but cannot read the
        # reference's or the checks' programs without already having them.
        os.chmod(cache, 0o711)
        readable.add(cache)
    from graders.child import sandbox

    level = sandbox.level()
    if level == "user":
        # No new root to leave them out of: file modes make them root's alone.
        sandbox.protect(catalog.ROOT, [*catalog.secrets(), *catalog.hidden_from_worker()])
    return {"package_root": str(catalog.ROOT), "readable": sorted(readable),
            "hidden": [str(p) for p in catalog.secrets()], "level": level}


def launcher(ids, env: dict[str, str], fork: bool = True, python: str = sys.executable, sandbox: bool = False,
             keep: bool = False):
    """The way to start the children of one run: a fork server unless told otherwise; with
    `sandbox`, always the fork server, each child confined (graders/child/sandbox.py). With `keep` (a
    learner's `make grade` or `check()`), the server kept between runs (graders/runner/kept_server.py)
    when the run needs JAX: it imports what every exercise uses, once for all of them."""
    libraries = sorted({lib for i in ids for lib in catalog.EXERCISES[i].libraries})
    if sandbox:
        started = ForkServer(env, libraries, python, sandbox=sandbox_spec(env, python))
    elif not fork or settings.no_fork():
        started = Spawner(env, python)
    elif keep and "jax" in libraries and kept_server.wanted(env):
        started = ForkServer(env, kept_server.libraries(), python, keep=True)
    else:
        started = ForkServer(env, libraries, python)
    threading.Thread(target=byte_compile_package, daemon=True).start()
    return started


def byte_compile_package() -> None:
    """Write the bytecode of graders/ (only there: never in the learner's folder). The grading
    processes run with PYTHONDONTWRITEBYTECODE, so without it each would compile the graders'
    modules from source: 0.14 s for all of them, 30 ms on the way to grading ex6. Done here, in
    a thread, once the fork server is starting; a later run finds the files up to date in 2 ms.
    (A sandboxed worker sees none of it: graders/__pycache__ is hidden from it.)"""
    try:
        import compileall

        compileall.compile_dir(catalog.GRADERS_DIR, quiet=2)
    except Exception:  # a read-only package grades as well, compiling in memory
        pass
