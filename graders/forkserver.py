"""The fork server: imports pytest, NumPy, JAX, Flax and Optax once per run, then forks one
grading child per exercise, so that no exercise pays for those imports again.

`python -m graders.forkserver FD [LIBRARY...]`, started by graders/process.py with the children's
environment (so XLA_FLAGS and the cache settings are read by this one JAX import). FD is a
SOCK_SEQPACKET socket: each request is a JSON message {"id", "ex", "solutions", "sandbox"} carrying two
descriptors (the result pipe and the output file); the server answers {"id", "pid"} once the
child runs and {"id", "exit"} when it has ended.

Forking after `import jax` is safe only while no JAX backend exists (a backend starts threads
and holds device state): the server checks that before every fork, and refuses otherwise.
"""

import gc
import json
import os
import select
import signal
import socket
import sys
from pathlib import Path


# Bytes a request may hold: more than a SOCK_SEQPACKET message can carry here (the socket's send
# buffer), so that none arrives cut short.
MAX_REQUEST = 1 << 22


def _preload(libraries: list[str]) -> None:
    import importlib

    import numpy  # noqa: F401
    import pytest  # noqa: F401

    from graders import catalog, guard, learner, plugin, sandbox, spec, wire, worker  # noqa: F401
    for name in libraries:  # what the run's exercises use (catalog.Exercise.libraries)
        importlib.import_module(name)
    if "jax" in libraries:
        import jax.numpy  # noqa: F401

        from graders import ahead, forked, hlo, jaxpr, memo, memory, numeric  # noqa: F401


def backend_started() -> bool:
    if "jax" not in sys.modules:
        return False
    from jax._src import xla_bridge

    return bool(xla_bridge._backends)


def _child(sock: socket.socket, wake: tuple[int, int], request: dict, fds: list[int]) -> None:
    result_fd, output_fd = fds
    try:
        sock.close()
        for fd in wake:
            os.close(fd)
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        os.setsid()  # its own process group, which the runner kills as a whole
        for target in (1, 2):
            os.dup2(output_fd, target)
        os.close(output_fd)
        from graders import catalog, child

        box = request.get("sandbox")
        # With probes, this process is the trusted judge and confines only the worker it forks.
        split = bool(box) and catalog.has_probes(request["ex"]) and not request.get("extract")
        if box and not request.get("trusted") and not split:
            relay = None
            if request.get("extract"):
                from graders import sandbox

                box = sandbox.without_cache(box)  # it runs no check: nothing of the cache is its
                # It reads values and grades nothing: what it may say is only that, whatever
                # the learner's code writes to its channel (e.g. "passed" for every check).
                relay = READER_EVENTS
            sandboxed(box, result_fd, relay)
        child.run(request["ex"], Path(request["solutions"]), result_fd, request.get("extract"),
                  request.get("data"), box if split else None)
    finally:
        os._exit(70)  # child.run ends with os._exit; reaching here means it failed to start


def sandboxed(box: dict, result_fd: int | None, relay: frozenset[str] | None = None) -> None:
    """Fork once more into new namespaces: this process stays outside and waits; its child,
    process 1 of the new PID namespace, returns from here confined and runs the grading.

    With `relay` (a set of event kinds), the confined child's events pass through this process,
    which forwards only those kinds: a child that may only read values cannot send verdicts."""
    from graders import sandbox

    sandbox.enter_namespaces()
    if relay is not None:
        relay_read, relay_write = os.pipe()
    # SIGTERM waits until the handler that kills the namespace is in place (below).
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    pid = os.fork()
    if pid == 0:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        if relay is not None:
            os.close(relay_read)
            os.dup2(relay_write, result_fd)
            os.close(relay_write)
        sandbox.confine(Path(box["package_root"]), Path(box["solutions"]), box["readable"], box["hidden"])
        return
    # The runner stops a sandboxed exercise with SIGTERM to this process, which kills process 1
    # of the namespace, and with it everything the learner's code started.
    signal.signal(signal.SIGTERM, lambda *_: os.kill(pid, signal.SIGKILL))
    signal.pthread_sigmask(signal.SIG_SETMASK, mask)
    if relay is not None:
        os.close(relay_write)
        _relay(relay_read, result_fd, relay)  # until every process of the namespace is gone
    elif result_fd is not None:
        os.close(result_fd)  # the event pipe ends when the confined child ends
    while True:
        try:
            _, status = os.waitpid(pid, 0)
            break
        except InterruptedError:
            continue
    if os.WIFSIGNALED(status):
        if os.WTERMSIG(status) not in (signal.SIGKILL, signal.SIGSTOP):  # these cannot be reset
            signal.signal(os.WTERMSIG(status), signal.SIG_DFL)
        os.kill(os.getpid(), os.WTERMSIG(status))
    os._exit(os.waitstatus_to_exitcode(status))


# What the process that reads a module's values (the quiz's ANSWERS) may report.
READER_EVENTS = frozenset({"importing", "import_error", "tampered", "data", "done"})
MAX_EVENT = 1 << 24  # bytes of one event line; a longer one is dropped


def _relay(read_fd: int, result_fd: int, kinds: frozenset[str]) -> None:
    """Forward the events of those kinds from read_fd to result_fd, then close both."""
    with os.fdopen(read_fd, "rb") as pipe, os.fdopen(result_fd, "wb", buffering=0) as out:
        too_long = False
        while True:
            line = pipe.readline(MAX_EVENT)
            if not line:
                return
            if not line.endswith(b"\n"):
                too_long = True  # drop up to the end of this line
                continue
            if too_long:
                too_long = False
                continue
            try:
                event = json.loads(line)
            except (ValueError, RecursionError):
                continue
            if isinstance(event, dict) and event.get("event") in kinds:
                try:
                    out.write(json.dumps(event).encode() + b"\n")
                except OSError:  # the runner has stopped listening
                    return


def serve(sock: socket.socket) -> None:
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    running: dict[int, object] = {}  # pid -> request id

    def reap() -> None:
        while running:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            request = running.pop(pid, None)
            if request is not None:
                sock.send(json.dumps({"id": request, "exit": os.waitstatus_to_exitcode(status)}).encode())

    while True:
        ready, _, _ = select.select([sock, wake_r], [], [])
        if wake_r in ready:
            os.read(wake_r, 4096)
            reap()
        if sock not in ready:
            continue
        data, fds, flags, _ = socket.recv_fds(sock, MAX_REQUEST, 4)
        if not data:  # the runner is gone
            return
        try:
            request = None if flags & socket.MSG_TRUNC else json.loads(data)
        except ValueError:
            request = None
        if not isinstance(request, dict) or "id" not in request:
            # A request carries a learner's values (the quiz's answers): one too long for a
            # message is not graded, and the server lives on for the other exercises.
            for fd in fds:
                os.close(fd)
            continue
        if backend_started() or len(fds) != 2:
            for fd in fds:
                os.close(fd)
            sock.send(json.dumps({"id": request["id"], "refused": "unsafe to fork"}).encode())
            continue
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            _child(sock, (wake_r, wake_w), request, fds)
        for fd in fds:
            os.close(fd)
        running[pid] = request["id"]
        sock.send(json.dumps({"id": request["id"], "pid": pid}).encode())
        reap()


def main() -> None:
    sock = socket.socket(fileno=int(sys.argv[1]))
    # Importing the libraries makes almost no garbage, yet it set off some 300 collections, each
    # walking a heap that grows with every module: without them the imports took 0.1 s less CPU
    # (0.87 s against 0.97 s, four runs each).
    gc.disable()
    _preload(sys.argv[2:])
    # The libraries' objects never become garbage: frozen, the children's collections skip them
    # (the work of one ex6 grading spent 0.40 s collecting, 0.15 s with them frozen).
    gc.freeze()
    gc.enable()
    sock.send(b'{"ready": true}')
    serve(sock)
    # The runner waits for this process to end: tearing down the interpreter with the libraries
    # imported would cost it about 0.25 s, and there is nothing here to tear down.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
