"""Isolation for a grading child (`--sandbox`, root only, Linux).

Called in a process forked by the fork server, before any learner code runs:
  * new PID, mount, network and IPC namespaces: the child is process 1 of its own PID namespace,
    so when it ends the kernel kills everything it started (double forks and `setsid` included);
    it sees no other process and has no network;
  * a new root holding only what grading needs, read-only: the system's libraries, the
    interpreter and the package's environment, `graders/` (minus the quiz key), the compilation
    cache (searchable, not listable: see process.sandbox_spec), and a copy of the learner's own
    modules. `reference/`, `tests/`, other students'
    folders, the results file and the rest of the machine are not there;
  * a private /tmp, then the unprivileged user `nobody`, with no way to gain privileges back.

Who is confined: for an exercise with probes (graders/child/probe_channel.py), only the worker that imports
the learner's module; the judge that runs the checks stays outside and never runs learner code,
and the worker sees graders/ without any exercise's checks (catalog.hidden_from_worker()). The quiz's ANSWERS are read by a confined
process and judged by one that runs no learner code (graders/runner/grading.py).
"""

import ctypes
import json
import os
import signal
import sys
from pathlib import Path


NOBODY = 65534
_MS_RDONLY, _MS_NOSUID, _MS_NODEV, _MS_REMOUNT, _MS_BIND, _MS_REC, _MS_PRIVATE = 1, 2, 4, 32, 4096, 16384, 1 << 18
_MNT_DETACH = 2
_PR_SET_NO_NEW_PRIVS = 38
# What a CPU-only JAX process reads from the system: shared libraries, the dynamic loader, /etc
# (locale, passwd for getpwuid), /dev (null, urandom, shm) and /sys (the CPU topology).
SYSTEM = ("/usr", "/lib", "/lib64", "/lib32", "/bin", "/sbin", "/etc", "/sys")


class SandboxError(RuntimeError):
    pass


def available() -> str:
    """'' when --sandbox can work here, else why not."""
    if not sys.platform.startswith("linux"):
        return "--sandbox uses Linux namespaces; this is " + sys.platform
    if os.geteuid() != 0:
        return ("--sandbox needs root: it creates namespaces, builds a read-only root and switches "
                "to the user nobody. Run it as root (the Gradescope autograder does), or grade without it")
    return ""


_libc = ctypes.CDLL(None, use_errno=True)


def _mount(source: str, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    if _libc.mount(source.encode(), target.encode(), fstype.encode() if fstype else None,
                   flags, data.encode() if data else None) != 0:
        err = ctypes.get_errno()
        raise SandboxError(f"mount {source} on {target}: {os.strerror(err)}")


def _bind(source: str, target: str, writable: bool = False) -> None:
    _mount(source, target, None, _MS_BIND | _MS_REC)
    if not writable:
        _mount("none", target, None, _MS_REMOUNT | _MS_BIND | _MS_RDONLY | _MS_NOSUID | _MS_NODEV)


def _make_point(root: str, path: str, is_dir: bool) -> str:
    target = root + path
    if is_dir:
        os.makedirs(target, mode=0o755, exist_ok=True)
    else:
        os.makedirs(os.path.dirname(target), mode=0o755, exist_ok=True)
        if not os.path.exists(target):
            open(target, "w").close()
    return target


def enter_namespaces() -> None:
    """Called in the process that will fork the sandboxed child: its next child is process 1
    of a new PID namespace, in new mount, network and IPC namespaces."""
    os.unshare(os.CLONE_NEWPID | os.CLONE_NEWNS | os.CLONE_NEWNET | os.CLONE_NEWIPC)


def without_cache(box: dict) -> dict:
    """`box` for the process that reads the quiz's answers: it compiles nothing, so the
    compilation cache is neither shown nor used. (A worker keeps the cache, which it can search
    by key but not list: see process.sandbox_spec.)"""
    cache = os.environ.get("JAX_COMPILATION_CACHE_DIR")
    if "jax" in sys.modules:
        import jax

        jax.config.update("jax_enable_compilation_cache", False)
    if not cache:
        return box
    real = os.path.realpath(cache)
    return dict(box, readable=[p for p in box["readable"] if os.path.realpath(p) != real])


def confine(package_root: Path, solutions: Path, readable: list[str], hidden: list[str]) -> None:
    """In the new namespaces: build the new root, enter it, and become nobody.

    `readable`: extra paths to show read-only at the same place (the interpreter, the venv, the
    cache); `hidden`: files or folders inside them to cover, so that they cannot be read (the quiz
    key, the checks and their bytecode)."""
    _mount("none", "/", None, _MS_REC | _MS_PRIVATE)
    root = "/mnt" if os.path.isdir("/mnt") else "/tmp"
    # A tmpfs holds the new root: every directory on the way to a mount point is created here
    # with mode 755, so an interpreter under /root (mode 700) is reachable by nobody.
    _mount("sandbox", root, "tmpfs", _MS_NOSUID | _MS_NODEV, "mode=0755")
    # /tmp first: what is shown below it (a staged submission, a cache) is mounted over it.
    _mount("tmpfs", _make_point(root, "/tmp", True), "tmpfs", _MS_NOSUID | _MS_NODEV, "mode=1777")
    _bind("/dev", _make_point(root, "/dev", True), writable=True)
    # /dev/shm (and /dev/mqueue) of the machine are writable by anyone and outlive the run: a
    # submission could leave files there for a later grading to find. A fresh one of its own.
    for path, mode in (("/dev/shm", "1777"), ("/dev/mqueue", "0755")):
        if os.path.isdir(root + path):
            _mount("tmpfs", root + path, "tmpfs", _MS_NOSUID | _MS_NODEV, f"mode={mode}")
    _mount("proc", _make_point(root, "/proc", True), "proc", _MS_NOSUID | _MS_NODEV)
    shown = [p for p in SYSTEM if os.path.exists(p)]
    shown += [str(package_root / "graders"), str(solutions)]
    # each at the place it is reached by (a venv may be a link) and at its real place
    shown += [q for p in readable if os.path.exists(p) for q in (p, os.path.realpath(p))]
    for path in dict.fromkeys(shown):
        real = os.path.realpath(path)
        _bind(real, _make_point(root, path, os.path.isdir(real)))
    for path in hidden:
        if os.path.isdir(root + path):  # an empty, read-only directory in its place
            _mount("hidden", root + path, "tmpfs", _MS_RDONLY | _MS_NOSUID | _MS_NODEV, "mode=0755")
        elif os.path.exists(root + path):
            _bind("/dev/null", root + path)
    _mount("none", root, None, _MS_REMOUNT | _MS_RDONLY | _MS_NOSUID | _MS_NODEV)
    os.chdir(root)
    os.chroot(".")
    os.chdir(str(package_root))
    os.setgroups([])
    os.setgid(NOBODY)
    os.setuid(NOBODY)
    if _libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise SandboxError("prctl(PR_SET_NO_NEW_PRIVS) failed")
    os.environ["HOME"] = "/tmp"
    os.environ["TMPDIR"] = "/tmp"


def sandboxed(box: dict, result_fd: int | None, relay: frozenset[str] | None = None) -> None:
    """Fork once more into new namespaces: this process stays outside and waits; its child,
    process 1 of the new PID namespace, returns from here confined and runs the grading.

    With `relay` (a set of event kinds), the confined child's events pass through this process,
    which forwards only those kinds: a child that may only read values cannot send verdicts."""
    enter_namespaces()
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
        confine(Path(box["package_root"]), Path(box["solutions"]), box["readable"], box["hidden"])
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
