"""The fork server: imports pytest, NumPy, JAX, Flax and Optax once, then forks one grading
child per exercise, so that no exercise pays for those imports again.

`python -m graders.runner.forkserver FD [LIBRARY...]`, started by graders/runner/launch.py with the children's
environment (so XLA_FLAGS and the cache settings are read by this one JAX import), serves one
run. FD is a SOCK_SEQPACKET socket: each request is a JSON message {"id", "ex", "solutions",
"sandbox", "env"} carrying two descriptors (the result pipe and the output file); the server
answers {"id", "pid"} once the child runs and {"id", "exit"} when it has ended.

`python -m graders.runner.forkserver --listen ...` is the same server kept between runs
(graders/runner/kept_server.py): it accepts one connection per run, from its own user only, and leaves
when idle.

Forking after `import jax` is safe only while no JAX backend exists (a backend starts threads
and holds device state): the server checks that before every fork, and refuses otherwise.
"""

import gc
import json
import os
import select
import signal
import socket
import struct
import sys
import time
from pathlib import Path

from graders.kit import lineage


# Seconds between a kept server's looks at its socket's name and at how long it has been idle.
RESIDENT_POLL = 2.0
# Bytes a request may hold: more than a SOCK_SEQPACKET message can carry here (the socket's send
# buffer), so that none arrives cut short.
MAX_REQUEST = 1 << 22


def _preload(libraries: list[str]) -> None:
    import importlib

    import numpy  # noqa: F401

    from graders.child import session

    for name in libraries:  # what the run's exercises use (catalog.Exercise.libraries)
        importlib.import_module(name)
    session.import_grading_modules(jax="jax" in libraries)


def kill_group(pid: int) -> None:
    # Whatever the learner's code started (threads, grandchildren) goes with the group.
    for kill in (os.killpg, os.kill):
        try:
            kill(pid, signal.SIGKILL)
            return
        except (ProcessLookupError, PermissionError):
            continue


def _child(sock: socket.socket, wake: tuple[int, int], request: dict, fds: list[int],
           others: list[socket.socket] = ()) -> None:
    result_fd, output_fd = fds
    try:
        sock.close()
        for other in others:  # other runners' connections, the listener: none is the learner's
            other.close()
        if isinstance(request.get("env"), dict):
            # A server kept between runs has the runner's environment but for the variables
            # nothing reads at import (graders/runner/kept_server.py): the runner sends its own of those.
            from graders import settings

            for name in [n for n in os.environ if settings.volatile(n)]:
                del os.environ[name]
            os.environ.update(request["env"])
            if "numpy" in sys.modules:  # as unseeded in each run as in a process of its own
                sys.modules["numpy"].random.seed()
        for fd in wake:
            os.close(fd)
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        os.setsid()  # its own process group, which the runner kills as a whole
        for target in (1, 2):
            os.dup2(output_fd, target)
        os.close(output_fd)
        from graders import catalog
        from graders.child import session

        box = request.get("sandbox")
        # With probes, this process is the trusted judge and confines only the worker it forks.
        split = bool(box) and catalog.has_probes(request["ex"]) and not request.get("extract")
        if box and not request.get("trusted") and not split:
            from graders.child import sandbox

            relay = None
            if request.get("extract"):
                box = sandbox.without_cache(box)  # it runs no check: nothing of the cache is its
                # It reads values and grades nothing: what it may say is only that, whatever
                # the learner's code writes to its channel (e.g. "passed" for every check).
                relay = sandbox.READER_EVENTS
            sandbox.sandboxed(box, result_fd, relay)
        session.run(request["ex"], Path(request["solutions"]), result_fd, request.get("extract"),
                  request.get("data"), box if split else None, request.get("only"))
    finally:
        os._exit(70)  # session.run ends with os._exit; reaching here means it failed to start


def _peer_is_us(conn: socket.socket) -> bool:
    _, uid, _ = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i")))
    return uid == os.getuid()


def serve(sock: socket.socket | None = None, listener: socket.socket | None = None,
          path: str | None = None, inode: tuple[int, int] | None = None, idle: float = 0.0) -> None:
    """Fork a grading child per request. With `sock` alone: serve that one runner, and return
    when it is gone. With `listener` (graders/runner/kept_server.py): serve every runner that connects,
    one connection each, and return once no runner has come for `idle` seconds, or once `path`
    no longer names this server's socket (`make clean`, or a newer server in its place)."""
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    conns: dict[int, socket.socket] = {} if sock is None else {sock.fileno(): sock}
    running: dict[int, tuple[socket.socket, object]] = {}  # pid -> (connection, request id)
    last_busy = time.monotonic()
    leaving = False

    def send(conn: socket.socket, message: dict) -> None:
        try:
            conn.send(json.dumps(message).encode())
        except OSError:  # that runner is gone; its children are killed below
            pass

    def reap() -> None:
        while running:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            conn, request = running.pop(pid, (None, None))
            if conn is not None:
                send(conn, {"id": request, "exit": os.waitstatus_to_exitcode(status)})

    def hang_up(conn: socket.socket) -> None:
        # A runner stopped (Ctrl-C) with exercises running: they would grade on for no one.
        for pid, (owner, _) in list(running.items()):
            if owner is conn:
                kill_group(pid)
        del conns[conn.fileno()]
        conn.close()

    def identity(name) -> tuple[int, int] | None:
        try:
            st = os.stat(name)
        except OSError:
            return None
        return st.st_dev, st.st_ino

    from graders import catalog

    home = identity(catalog.ROOT)  # the package's folder

    def named() -> bool:
        return identity(path) == inode

    def ours() -> bool:
        # Its socket still has its name, and the package it grades is still where it was.
        return named() and identity(catalog.ROOT) == home

    while True:
        waiting = [wake_r, *conns.values(), *([listener] if listener is not None and not leaving else [])]
        ready, _, _ = select.select(waiting, [], [], None if listener is None else RESIDENT_POLL)
        if wake_r in ready:
            os.read(wake_r, 4096)
            reap()
        if listener is not None and listener in ready:
            try:
                conn, _ = listener.accept()
            except OSError:
                conn = None
            if conn is not None and _peer_is_us(conn):
                conns[conn.fileno()] = conn
                send(conn, {"ready": True, "pid": os.getpid()})
            elif conn is not None:
                conn.close()
        for conn in [c for c in conns.values() if c in ready]:
            if not _request(conn, conns, listener, (wake_r, wake_w), running, send):
                hang_up(conn)
        if listener is None:
            if not conns:
                return
            continue
        if conns or running:
            last_busy = time.monotonic()
            continue
        if not leaving and (not ours() or time.monotonic() - last_busy > idle):
            # No new runner can find this server once its name is gone; one already queued
            # on the listener is still served (the select above sees it) before it leaves.
            leaving = True
            if named():
                try:
                    os.unlink(path)
                except OSError:
                    pass
            if select.select([listener], [], [], 0)[0]:
                leaving = False  # serve it; the name is gone, so this is the last
                last_busy = time.monotonic()
                continue
            return


def _request(conn, conns, listener, wake, running, send) -> bool:
    """Read one request from a runner's connection and fork its grading child; False once that
    runner is gone."""
    try:
        data, fds, flags, _ = socket.recv_fds(conn, MAX_REQUEST, 4)
    except OSError:
        return False
    if not data:
        return False
    try:
        request = None if flags & socket.MSG_TRUNC else json.loads(data)
    except (ValueError, RecursionError):
        request = None
    if not isinstance(request, dict) or "id" not in request:
        # A request carries a learner's values (the quiz's answers): one too long for a
        # message is not graded, and the server lives on for the other exercises.
        for fd in fds:
            os.close(fd)
        return True
    if lineage.backend_started() or len(fds) != 2:
        for fd in fds:
            os.close(fd)
        send(conn, {"id": request["id"], "refused": "unsafe to fork"})
        return True
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        pid = os.fork()
    except OSError:  # out of processes or memory: the runner grades this one another way
        for fd in fds:
            os.close(fd)
        send(conn, {"id": request["id"], "refused": "could not fork"})
        return True
    if pid == 0:
        others = [c for c in conns.values() if c is not conn] + ([listener] if listener is not None else [])
        _child(conn, wake, request, fds, others)
    for fd in fds:
        os.close(fd)
    running[pid] = (conn, request["id"])
    send(conn, {"id": request["id"], "pid": pid})
    return True


def command(python: str, *args: str) -> list[str]:
    """How this module is started as a process (the one place that says it)."""
    return [python, "-m", "graders.runner.forkserver", *args]


def main() -> None:
    # `FD LIBRARY...`: a socket to one runner. `--listen FD PATH DEV INO IDLE LIBRARY...`: a
    # listening socket, bound at PATH by the runner that started this server (graders/runner/kept_server.py).
    args = sys.argv[1:]
    listen = args[:1] == ["--listen"]
    if listen:
        listener = socket.socket(fileno=int(args[1]))
        path, inode, idle = args[2], (int(args[3]), int(args[4])), float(args[5])
        libraries = args[6:]
    else:
        sock = socket.socket(fileno=int(args[0]))
        libraries = args[1:]
    # Importing the libraries makes almost no garbage, yet it set off some 300 collections, each
    # walking a heap that grows with every module: without them the imports took 0.1 s less CPU
    # (0.87 s against 0.97 s, four runs each).
    gc.disable()
    _preload(libraries)
    # The libraries' objects never become garbage: frozen, the children's collections skip them
    # (the work of one ex6 grading spent 0.40 s collecting, 0.15 s with them frozen).
    gc.freeze()
    gc.enable()
    if listen:
        serve(listener=listener, path=path, inode=inode, idle=idle)  # says "ready" to each runner
    else:
        sock.send(json.dumps({"ready": True, "pid": os.getpid()}).encode())
        serve(sock)
    # The runner waits for this process to end: tearing down the interpreter with the libraries
    # imported would cost it about 0.25 s, and there is nothing here to tear down.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
