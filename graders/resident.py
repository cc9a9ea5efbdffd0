"""A fork server kept between runs of `make grade`, so that an edit does not pay again for
starting Python and importing JAX, Flax, Optax and pytest (about 1 s of an edit loop).

The server is graders/forkserver.py listening on a Unix socket in a folder only this user can
enter. Its name is a hash of everything that server has read and a run could change: the
interpreter, the installed packages (the time the site-packages folder last changed), every file
of graders/ (size and time of change), the libraries it imports and the children's environment
but for the variables below that nothing reads while importing. A run whose hash differs starts
a new server; the old one leaves after IDLE_SECONDS without a run, or within RESIDENT_POLL
seconds of its socket's name being removed (`make clean` does). Your module is never imported
there: each exercise is graded in a fresh child forked from it, as in a run of its own.

Not used under CI, by batch grading, with --sandbox, or with GRADERS_NO_RESIDENT=1 (`make grade
KEEP_SERVER=0`): those start a server for the run and end it with the run.
"""

import fcntl
import hashlib
import json
import os
import socket
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

from graders import catalog

IDLE_SECONDS = 600.0  # a learner between two edits; after that the memory is given back
# Set by a shell or make for each command, read by nothing a server imports: the child is given
# the runner's current values.
VOLATILE = frozenset({"_", "OLDPWD", "PWD", "SHLVL", "MAKELEVEL", "MAKEFLAGS", "MFLAGS", "MAKEOVERRIDES",
                      "MAKE_TERMOUT", "MAKE_TERMERR", "COLUMNS", "LINES"})
_started: list[subprocess.Popen] = []  # kept, so that no warning says a process was left running


def wanted(env: dict[str, str]) -> bool:
    return not env.get("CI") and env.get("GRADERS_NO_RESIDENT", "") in ("", "0")


def folder() -> Path | None:
    """This user's folder of sockets, or None if it is not safely ours."""
    path = Path(tempfile.gettempdir()) / f"graders-{os.getuid()}"
    try:
        path.mkdir(mode=0o700, exist_ok=True)
        st = os.lstat(path)
    except OSError:
        return None
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o077:
        return None
    return path


def key(env: dict[str, str], python: str, libraries: list[str]) -> str:
    digest = hashlib.sha256()

    def add(*parts) -> None:
        digest.update(json.dumps(parts, default=str).encode() + b"\n")

    add("resident 1", os.path.realpath(python), sys.version, libraries)
    add(sorted((k, v) for k, v in env.items() if k not in VOLATILE))
    # The child's interpreter may not be this one (check() in a kernel of another environment).
    prefix = Path(os.path.abspath(python)).parent.parent
    for folder_ in sorted(prefix.glob("lib*/python*/site-packages")):
        add(str(folder_), folder_.stat().st_mtime_ns)
    for file in sorted(catalog.GRADERS_DIR.rglob("*")):
        if "__pycache__" not in file.parts and file.is_file():
            st = file.stat()
            add(str(file), st.st_size, st.st_mtime_ns)
    return digest.hexdigest()[:24]


def _connect(path: Path) -> socket.socket | None:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        sock.connect(str(path))
        return sock
    except OSError:  # no such socket, a server gone (refused), a full queue
        sock.close()
        return None


def connect(env: dict[str, str], python: str, libraries: list[str]) -> socket.socket | None:
    """A connection to the kept server for this run, started now if there is none; None if
    none can be had (the caller starts a server for the run alone)."""
    where = folder()
    if where is None:
        return None
    name = key(env, python, libraries)
    path = where / f"{name}.sock"
    sock = _connect(path)
    if sock is not None:
        return sock
    try:
        with open(where / f"{name}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # two runs at once start one server
            sock = _connect(path)
            if sock is not None:
                return sock
            try:
                path.unlink()  # a server's leftover name: it is gone, or it would have answered
            except FileNotFoundError:
                pass
            listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            try:
                listener.bind(str(path))
                listener.listen(16)
                st = os.stat(path)
                idle = env.get("GRADERS_RESIDENT_IDLE") or f"{IDLE_SECONDS:g}"
                # Its own session, its output nowhere: a pipe the runner's output goes to (a CI
                # log, `make grade | less`) must not stay open while the server lives.
                _started.append(subprocess.Popen(
                    [python, "-m", "graders.forkserver", "--listen", str(listener.fileno()), str(path),
                     str(st.st_dev), str(st.st_ino), idle, *libraries],
                    cwd=catalog.ROOT, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL, pass_fds=(listener.fileno(),), start_new_session=True))
            finally:
                listener.close()
            return _connect(path)  # queued until the server has imported the libraries
    except OSError:
        return None


def libraries() -> list[str]:
    """What a kept server imports: what every exercise uses, so that one server serves them all."""
    return sorted({lib for e in catalog.EXERCISES.values() for lib in e.libraries})


def stop(env: dict[str, str], python: str) -> bool:
    """Stop the server a run with this environment would be forked from (it leaves within
    RESIDENT_POLL seconds); whether there was one."""
    where = folder()
    if where is None:
        return False
    try:
        (where / f"{key(env, python, libraries())}.sock").unlink()
        return True
    except OSError:
        return False


def stop_all() -> int:
    """Remove every kept server's socket (each leaves within RESIDENT_POLL seconds); how many."""
    where = folder()
    count = 0
    for path in (where.glob("*.sock") if where is not None else ()):
        try:
            path.unlink()
            count += 1
        except OSError:
            pass
    return count
