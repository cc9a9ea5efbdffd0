"""A fork server kept between runs of `make grade`, so that an edit does not pay again for
starting Python and importing JAX, Flax, Optax and pytest (about 1 s of an edit loop).

The server is graders/forkserver.py listening on a Unix socket in a folder only this user can
enter. Its name is a hash of everything that server has read or passes on to its children and
that a run could change: the interpreter; the installed packages (the site-packages folders'
times of change and the `.pth` files, which is what pip changes); every file of graders/ and the
package's own folder (which file, its size and times: a copy of the package made with its times
kept is still another file); the libraries it imports; the process's settings a child inherits
(umask, resource limits, CPUs, niceness, control group); and the children's environment but for
the variables below, which nothing reads while importing (the child is given the runner's own).
A run whose hash differs starts a new server; the old one leaves after IDLE_SECONDS without a
run, or within RESIDENT_POLL seconds of its socket's name being removed (`make clean` does).
Your module is never imported there: each exercise is graded in a fresh child forked from it,
as in a run of its own.

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
# Set by a shell, make or a terminal for each command or window; by a notebook server, an IDE or a
# login for each process or session it starts (a kernel is one); or read by the grading child
# alone (child.run). Nothing a server imports reads them, and the child is given the runner's.
# Left in the name, each Jupyter kernel (JPY_PARENT_PID: the server's pid) or editor window
# would start a server of its own, about 200 MB each, until its idle limit.
VOLATILE = frozenset({
    # shells, make, terminals, multiplexers, remote logins
    "_", "OLDPWD", "PWD", "SHLVL", "MAKELEVEL", "MAKEFLAGS", "MFLAGS", "MAKEOVERRIDES", "MAKE_TERMOUT",
    "MAKE_TERMERR", "COLUMNS", "LINES", "WINDOWID", "TMUX", "TMUX_PANE", "STY", "SSH_CLIENT", "SSH_CONNECTION",
    "SSH_TTY", "SSH_AUTH_SOCK", "SSH_AGENT_PID", "GPG_TTY", "TERM_SESSION_ID", "ITERM_SESSION_ID", "WT_SESSION",
    "KITTY_WINDOW_ID", "KITTY_PID", "SECURITYSESSIONID",
    # a desktop or systemd session, and the unit a server was started in
    "XDG_SESSION_ID", "XDG_ACTIVATION_TOKEN", "DESKTOP_STARTUP_ID", "DBUS_SESSION_BUS_ADDRESS", "SESSION_MANAGER",
    "INVOCATION_ID", "JOURNAL_STREAM", "SYSTEMD_EXEC_PID", "MANAGERPID",
    # Jupyter: jupyter_client gives each kernel JPY_PARENT_PID (and on Windows JPY_INTERRUPT_EVENT,
    # IPY_INTERRUPT_EVENT), jupyter_server its notebook's path in JPY_SESSION_NAME, and a terminal
    # the server's root and URL; Enterprise Gateway and kernel provisioners set KERNEL_ID.
    "IPY_INTERRUPT_EVENT", "KERNEL_ID", "JUPYTER_SERVER_ROOT", "JUPYTER_SERVER_URL",
    # JetBrains IDEs: where the IDE was started
    "IDEA_INITIAL_DIRECTORY",
    # the grading child's own settings
    "GRADERS_SEED", "GRADERS_CHECK_TIMEOUT"})
# JPY_*: Jupyter's per-kernel variables above and JupyterHub's JPY_API_TOKEN; JUPYTERHUB_*: a
# spawn's token and URLs; VSCODE_*: VS Code's pid, IPC sockets (VSCODE_IPC_HOOK*, VSCODE_GIT_IPC_HANDLE)
# and its Jupyter extension's; PYCHARM_*, _INTELLIJ*, __INTELLIJ*, JEDITERM_*: a JetBrains IDE's
# display port, plots console and terminal; the rest, terminals' windows and panes.
VOLATILE_PREFIXES = ("JPY_", "JUPYTERHUB_", "VSCODE_", "PYCHARM_", "_INTELLIJ", "__INTELLIJ", "JEDITERM_",
                     "GNOME_TERMINAL_", "KONSOLE_", "WEZTERM_", "ALACRITTY_", "TERMINATOR_")


def volatile(name: str) -> bool:
    return name in VOLATILE or name.startswith(VOLATILE_PREFIXES)


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


def _settings() -> list:
    """What a forked child inherits from the process that started its server, besides files and
    the environment: umask, resource limits, CPUs, scheduling, blocked signals (a blocked SIGALRM
    would stop pytest-timeout), capabilities, personality, namespaces, control group."""
    import resource

    mask = os.umask(0o022)
    os.umask(mask)
    limits = {name: resource.getrlimit(getattr(resource, name)) for name in dir(resource)
              if name.startswith("RLIMIT_")}
    proc = Path("/proc/self")

    def read(name: str) -> str | None:
        try:
            return (proc / name).read_text()
        except OSError:
            return None

    # Blocked signals, not ignored ones: a shell may leave some of those to one way of starting
    # a run and not another, and the grading process sets a handler for each it uses.
    status = [line for line in (read("status") or "").splitlines()
              if line.startswith(("SigBlk", "Cap", "NoNewPrivs", "Seccomp"))]
    namespaces = sorted((ns.name, os.stat(ns).st_ino) for ns in (proc / "ns").glob("*") if ns.exists())
    return [mask, sorted(limits.items()), sorted(os.sched_getaffinity(0)), os.nice(0), os.sched_getscheduler(0),
            os.sched_getparam(0).sched_priority, _io_priority(), status, read("personality"),
            read("oom_score_adj"), namespaces, read("cgroup")]


def _io_priority() -> int | None:
    """ioprio_get(IOPRIO_WHO_PROCESS, 0) (`ionice`): no Python call reads it."""
    try:
        import ctypes
        import platform

        number = {"x86_64": 252, "aarch64": 31}.get(platform.machine())
        if number is None:
            return None
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.syscall(number, 1, 0)
    except (OSError, AttributeError):
        return None


def _file(path: Path) -> list:
    st = path.stat()
    return [str(path), st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]


def key(env: dict[str, str], python: str, libraries: list[str]) -> str:
    digest = hashlib.sha256()

    def add(*parts) -> None:
        digest.update(json.dumps(parts, default=str).encode() + b"\n")

    add("resident 2", os.path.realpath(python), sys.version, libraries, _settings())
    add(sorted((k, v) for k, v in env.items() if not volatile(k)))
    # The child's interpreter may not be this one (check() in a kernel of another environment).
    prefix = Path(os.path.abspath(python)).parent.parent
    for packages in sorted(prefix.glob("lib*/python*/site-packages")):
        add(_file(packages), [(p.name, p.read_bytes()) for p in sorted(packages.glob("*.pth"))])
    root = catalog.ROOT.stat()  # which folder, not its time: a run's files come and go there
    add(str(catalog.ROOT), root.st_dev, root.st_ino)
    for file in sorted(catalog.GRADERS_DIR.rglob("*")):
        # Files only: a folder changes when its __pycache__ is first written (after this run).
        if "__pycache__" not in file.parts and file.is_file():
            add(_file(file))
    return digest.hexdigest()[:24]


def idle_seconds(env: dict[str, str]) -> float:
    try:
        seconds = float(env.get("GRADERS_RESIDENT_IDLE", IDLE_SECONDS))
    except ValueError:
        return IDLE_SECONDS
    return seconds if 0 < seconds < float("inf") else IDLE_SECONDS


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
    try:
        path = where / f"{key(env, python, libraries)}.sock"  # a file may vanish as it is read
    except OSError:
        return None
    sock = _connect(path)
    if sock is not None:
        return sock
    try:
        with open(where / "lock", "w") as lock:
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
                idle = f"{idle_seconds(env):g}"
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
