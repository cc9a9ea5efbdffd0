"""Isolation for a grading child (`--sandbox`, root only, Linux), at the strongest level the
machine allows (level(); the report's header and results.json name it):

"namespaces" (root with CAP_SYS_ADMIN, unshare allowed), called in a process forked by the fork
server, before any learner code runs:
  * new PID, mount, network and IPC namespaces: the child is process 1 of its own PID namespace,
    so when it ends the kernel kills everything it started (double forks and `setsid` included);
    it sees no other process and has no network;
  * a new root holding only what grading needs, read-only: the system's libraries, the
    interpreter and the package's environment, `graders/` (minus the quiz key), the compilation
    cache (searchable, not listable: see process.sandbox_spec), and a copy of the learner's own
    modules. `reference/`, `tests/`, other students'
    folders, the results file and the rest of the machine are not there;
  * a private /tmp, then the unprivileged user `nobody`, with no way to gain privileges back.

"user" (root, but no namespaces: a default Docker container, as Gradescope-like services start,
lacks CAP_SYS_ADMIN and refuses unshare in its seccomp profile):
  * the unprivileged user `nobody`, with no way to gain privileges back;
  * file modes (protect()) that leave reference/, tests/, dist/, the checks, their bytecode, the
    quiz key, the graders' stored figures and the seed readable by root only; the learner's
    modules are a copy in a folder whose name cannot be guessed, so other students' are out of
    reach; the compilation cache is searchable, not listable, and not writable;
  * rlimits (no core files, a bound on processes and on a file's size);
  * its own process group, and a holder process that is the subreaper of everything the
    learner's code starts (double forks and `setsid` included) and kills all of it when the
    confined process ends or the runner stops the exercise;
  * no network: a seccomp filter refuses every socket but a local (AF_UNIX) one, and every new
    namespace (a user namespace would give the code capabilities inside it);
  * files it leaves in /tmp, /var/tmp, /dev/shm and /dev/mqueue go when the run ends.
  What it does not give: other processes stay visible in /proc (never readable: they are
  root's), and /tmp is the machine's (a file left there is removed with the run's folder only
  if it is under it; HOME and TMPDIR point to a private folder).
  The interpreter may live where nobody cannot reach (root's home is 0700): what the confined
  process imports later is read through directories opened before the switch (reach_imports()).

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

from graders import settings


NOBODY = 65534
_MS_RDONLY, _MS_NOSUID, _MS_NODEV, _MS_REMOUNT, _MS_BIND, _MS_REC, _MS_PRIVATE = 1, 2, 4, 32, 4096, 16384, 1 << 18
_MNT_DETACH = 2
_PR_SET_NO_NEW_PRIVS = 38
_PR_SET_PDEATHSIG = 1
# What a CPU-only JAX process reads from the system: shared libraries, the dynamic loader, /etc
# (locale, passwd for getpwuid), /dev (null, urandom, shm) and /sys (the CPU topology).
SYSTEM = ("/usr", "/lib", "/lib64", "/lib32", "/bin", "/sbin", "/etc", "/sys")


class SandboxError(RuntimeError):
    pass


LEVELS = ("namespaces", "user")


def available() -> str:
    """'' when --sandbox can work here, else why not."""
    if not sys.platform.startswith("linux"):
        return "--sandbox uses Linux namespaces; this is " + sys.platform
    if os.geteuid() != 0:
        return ("--sandbox needs root: it creates namespaces, builds a read-only root and switches "
                "to the user nobody. Run it as root (the Gradescope autograder does), or grade without it")
    if not (_mapped("uid_map", NOBODY) and _mapped("gid_map", NOBODY)):
        return (f"--sandbox switches to the user nobody ({NOBODY}), which this user namespace does not map (only "
                "root is mapped, as by `unshare --map-root-user`): run it where uids up to 65535 are mapped, "
                "as a container runtime maps them, or as root outside any user namespace")
    return ""


def _mapped(table: str, inner: int) -> bool:
    """Whether id `inner` exists in this process's user namespace (/proc/self/uid_map or gid_map)."""
    try:
        lines = Path(f"/proc/self/{table}").read_text().split("\n")
    except OSError:
        return True  # no such table: no user namespaces here, every id exists
    for line in lines:
        fields = line.split()
        if len(fields) == 3 and int(fields[0]) <= inner < int(fields[0]) + int(fields[2]):
            return True
    return False


_libc = ctypes.CDLL(None, use_errno=True)
_level: str | None = None
_NAMESPACES = "os.CLONE_NEWPID | os.CLONE_NEWNS | os.CLONE_NEWNET | os.CLONE_NEWIPC"  # what enter_namespaces makes


def level() -> str:
    """The strongest isolation this machine allows: "namespaces" when a process may create the
    namespaces (tried in a child, once per process), else "user". Call only where available().
    GRADERS_SANDBOX_LEVEL names one instead (to try the weaker level where the stronger works)."""
    global _level
    if _level is None and settings.sandbox_level() in LEVELS:
        _level = settings.sandbox_level()
    if _level is None:
        # In a process of its own, not a fork: the caller may have threads (a test process with JAX).
        import subprocess

        tried = subprocess.run([sys.executable, "-c", "import os; os.unshare(" + _NAMESPACES + ")"],
                               stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        _level = "namespaces" if tried.returncode == 0 else "user"
    return _level


def describe(name: str) -> str:
    return {"namespaces": "namespaces (own PID, mount, network and IPC namespaces; a read-only root "
                          "without reference/ or the key; user nobody)",
            "user": "user (no namespaces here: user nobody, file modes hiding reference/, the checks "
                    "and the key, rlimits, every process it starts swept at its end, no network)"}[name]


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


def become_nobody(package_root: Path) -> None:
    """Both levels' last step as root: into the package, as nobody, with no way back to privileges."""
    os.chdir(str(package_root))
    os.setgroups([])
    os.setgid(NOBODY)
    os.setuid(NOBODY)
    if _libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise SandboxError("prctl(PR_SET_NO_NEW_PRIVS) failed")


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
    become_nobody(package_root)
    os.environ["HOME"] = "/tmp"
    os.environ["TMPDIR"] = "/tmp"


# ---------------------------------------------------------------- the "user" level

_PR_SET_CHILD_SUBREAPER = 36
_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER = 22, 2
# Bounds on the confined process: no core file (it would hold the process's memory, graders'
# figures included); processes and threads of the user nobody (JAX's thread pools count: a
# worker holds a few dozen; the bound stops a fork bomb, not a grading); a file's size.
RLIMITS = {"RLIMIT_CORE": 0, "RLIMIT_NPROC": 4096, "RLIMIT_FSIZE": 1 << 30}


def protect(package_root: Path, hidden: list[Path]) -> None:
    """File modes for the "user" level: what nobody must not read becomes root's alone. Done by
    the runner (root) before any child starts; git keeps no mode but the executable bit."""
    root = Path(package_root)
    for name in ("reference", "tests", "dist", ".cache/expected"):
        if (root / name).is_dir():
            os.chmod(root / name, 0o700)
    if (root / ".cache" / "seed").is_file():
        os.chmod(root / ".cache" / "seed", 0o600)
    for path in hidden:
        path = Path(path)
        if path.name == "__pycache__":  # a folder hidden must exist now, or what is written later shows
            try:
                path.mkdir(mode=0o700, exist_ok=True)
            except OSError:
                continue
        if path.is_dir():
            os.chmod(path, 0o700)
        elif path.exists():
            os.chmod(path, 0o600)


def _others_reach(path: str) -> bool:
    """Whether a user who owns nothing can list and enter `path` (through every folder above it)."""
    import stat

    real = os.path.realpath(path)
    try:
        if not os.stat(real).st_mode & stat.S_IROTH:
            return False
        here = real
        while True:
            if not os.stat(here).st_mode & stat.S_IXOTH:
                return False
            if here == "/":
                return True
            here = os.path.dirname(here)
    except OSError:
        return False


def reach_imports() -> None:
    """Before the switch to nobody: every import folder nobody could not reach (an interpreter
    under root's home) is opened now and named /proc/self/fd/N from here on, in sys.path and in
    the __path__ of every package already imported, so a later import (a learner's `import
    fractions`, a library's lazy submodule) still finds its files. A process always reaches its
    own descriptors, whoever it has become."""
    opened: dict[str, str] = {}
    for entry in list(sys.path):
        if not entry or not os.path.isdir(entry) or _others_reach(entry):
            continue
        real = os.path.realpath(entry)
        if real not in opened:
            opened[real] = f"/proc/self/fd/{os.open(real, os.O_RDONLY | os.O_DIRECTORY)}"
    if not opened:
        return
    bases = sorted(opened, key=len, reverse=True)

    def moved(path: str) -> str:
        real = os.path.realpath(path)
        for base in bases:
            if real == base or real.startswith(base + "/"):
                return opened[base] + real[len(base):]
        return path

    sys.path[:] = [moved(p) if p else p for p in sys.path]
    for module in list(sys.modules.values()):
        search = getattr(module, "__path__", None)
        if isinstance(search, list):
            search[:] = [moved(p) for p in search]
        elif search is not None and isinstance(getattr(search, "_path", None), list):
            search._path[:] = [moved(p) for p in search._path]
    sys.path_importer_cache.clear()


# System calls by architecture: (AUDIT_ARCH, socket, clone, unshare, setns, clone3).
_SYSCALLS = {"x86_64": (0xC000003E, 41, 56, 272, 308, 435), "aarch64": (0xC00000B7, 198, 220, 97, 268, 435)}
_NEW_NAMESPACES = 0x7E020000  # CLONE_NEWNS | NEWCGROUP | NEWUTS | NEWIPC | NEWUSER | NEWPID | NEWNET


def _seccomp_program(machine: str) -> list[tuple[int, int, int, int]] | None:
    """The filter of _no_network(), as (code, jt, jf, k) instructions; None on another machine."""
    if machine not in _SYSCALLS:
        return None
    audit_arch, nr_socket, nr_clone, nr_unshare, nr_setns, nr_clone3 = _SYSCALLS[machine]
    ld, jeq, jge, jset, ret = 0x20, 0x15, 0x35, 0x45, 0x06
    allow, errno = 0x7FFF0000, 0x00050000
    eperm, eacces, enosys = errno | 1, errno | 13, errno | 38
    # (label, code, jump-if-true label, jump-if-false label, k): a label None falls through.
    code = [
        ("", ld, None, None, 4),                  # the architecture
        ("", jeq, None, "nosys", audit_arch),     # another ABI (i386 on x86-64): nothing
        ("", ld, None, None, 0),                  # the system call's number
        ("", jge, "perm", None, 0x40000000),      # x32 system calls
        ("", jeq, "socket", None, nr_socket),
        ("", jeq, "perm", None, nr_unshare),      # no namespace of its own: a user namespace
        ("", jeq, "perm", None, nr_setns),        # would give it capabilities there
        ("", jeq, "nosys", None, nr_clone3),      # its flags are in memory: the C library falls back to clone
        ("", jeq, "clone", "allow", nr_clone),
        ("socket", ld, None, None, 16),           # the family (low word of the first argument)
        ("", jeq, "allow", "access", 1),          # AF_UNIX only
        ("clone", ld, None, None, 16),            # clone's flags
        ("", jset, "perm", "allow", _NEW_NAMESPACES),
        ("allow", ret, None, None, allow),
        ("access", ret, None, None, eacces),
        ("perm", ret, None, None, eperm),
        ("nosys", ret, None, None, enosys),
    ]
    at = {label: i for i, (label, *_) in enumerate(code) if label}
    out = []
    for i, (_, op, yes, no, k) in enumerate(code):
        out.append((op, 0 if yes is None else at[yes] - i - 1, 0 if no is None else at[no] - i - 1, k))
    return out


def _no_network() -> None:
    """A seccomp filter: socket() for any family but AF_UNIX fails with EACCES, and no new
    namespace can be made (a user namespace would give the code capabilities inside it). Needs
    no privilege once no_new_privs is set. x86-64 and arm64; elsewhere nothing is filtered."""
    import struct

    program = _seccomp_program(os.uname().machine)
    if program is None:
        return
    raw = b"".join(struct.pack("HBBI", *insn) for insn in program)
    buffer = ctypes.create_string_buffer(raw, len(raw))

    class Program(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    fprog = Program(len(program), ctypes.addressof(buffer))
    if _libc.prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, ctypes.byref(fprog), 0, 0) != 0:
        raise SandboxError(f"seccomp filter: {os.strerror(ctypes.get_errno())}")


def become_subreaper() -> None:
    """In the process that holds a "user"-level child: every orphan among its descendants
    becomes its child, so that sweep() finds them all."""
    if _libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        raise SandboxError(f"prctl(PR_SET_CHILD_SUBREAPER): {os.strerror(ctypes.get_errno())}")


def _descendants(of: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        ppid = int(stat[stat.rindex(b")") + 2:].split()[1])
        children.setdefault(ppid, []).append(int(name))
    found, todo = [], [of]
    while todo:
        for child in children.get(todo.pop(), ()):
            found.append(child)
            todo.append(child)
    return found


def sweep() -> None:
    """Kill every descendant of this process (a subreaper) and reap them all."""
    import time

    me = os.getpid()
    while True:
        for pid in _descendants(me):
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        while True:
            try:
                pid, _ = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return  # no child left: the orphans of the killed came here and went
            except InterruptedError:
                continue
            if pid == 0:
                break
        time.sleep(0.01)


SHARED_SCRATCH = ("/tmp", "/var/tmp", "/dev/shm", "/dev/mqueue")


def remove_leftovers() -> None:
    """What the sandbox's user left in the machine's shared scratch folders (a later grading,
    another student's, would find it there), once its processes are gone."""
    import shutil

    for folder in SHARED_SCRATCH:
        try:
            names = os.listdir(folder)
        except OSError:
            continue
        for name in names:
            path = os.path.join(folder, name)
            try:
                st = os.lstat(path)
                if st.st_uid != NOBODY:
                    continue
                if os.path.isdir(path) and not os.path.islink(path):
                    shutil.rmtree(path, ignore_errors=True)
                else:
                    os.unlink(path)
            except OSError:
                continue


def confine_user(package_root: Path, solutions: Path) -> None:
    """The "user" level, in the process about to run learner code: rlimits, imports reachable,
    then nobody, no_new_privs and no network."""
    import resource

    holder = os.getppid()
    for name, value in RLIMITS.items():
        which = getattr(resource, name)
        soft, hard = resource.getrlimit(which)
        value = value if hard == resource.RLIM_INFINITY else min(value, hard)
        resource.setrlimit(which, (value, value))
    reach_imports()
    home = Path(solutions).parent / "home"
    become_nobody(package_root)
    _no_network()
    # Killed with its holder (cleared by the switch of user, so set after it).
    if _libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
        raise SandboxError("prctl(PR_SET_PDEATHSIG) failed")
    if os.getppid() != holder:
        os._exit(1)
    if home.is_dir():
        os.environ["HOME"] = os.environ["TMPDIR"] = str(home)
        import tempfile

        tempfile.tempdir = None


# ---------------------------------------------------------------- running confined

def sandboxed(box: dict, result_fd: int | None, relay: frozenset[str] | None = None, on_fault=None) -> None:
    """Fork once more into a sandbox (graders/child/py, at box["level"]): this process
    stays outside and waits; its child returns from here confined and runs the grading. With
    "namespaces", the child is process 1 of a new PID namespace; with "user", this process is
    the subreaper of all the child starts, and sweeps it away when the child ends.

    With `relay` (a set of event kinds), the confined child's events pass through this process,
    which forwards only those kinds: a child that may only read values cannot send verdicts.

    A sandbox that cannot be made is the autograder's fault, never the learner's: this process
    tells `on_fault(message)` (default: a "sandbox_error" event on result_fd) and ends, and no
    learner code has run."""
    def fault(message: str) -> None:
        message = "the sandbox could not be made: " + message
        if on_fault is not None:
            on_fault(message)
        elif result_fd is not None:
            try:
                os.write(result_fd, json.dumps({"event": "sandbox_error", "message": message}).encode() + b"\n")
            except OSError:
                pass
        os._exit(0)

    user = box.get("level") == "user"
    try:
        if user:
            become_subreaper()
        else:
            enter_namespaces()
    except (OSError, SandboxError) as exc:
        fault(f"{type(exc).__name__}: {exc}")
    if relay is not None:
        relay_read, relay_write = os.pipe()
    # The child says "ok" once confined, or why it could not be: only then does learner code run.
    said_read, said_write = os.pipe()
    # SIGTERM waits until the handler that kills the namespace is in place (below).
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    pid = os.fork()
    if pid == 0:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        os.close(said_read)
        try:
            if relay is not None:
                os.close(relay_read)
                os.dup2(relay_write, result_fd)
                os.close(relay_write)
            if user:
                confine_user(Path(box["package_root"]), Path(box["solutions"]))
            else:
                confine(Path(box["package_root"]), Path(box["solutions"]), box["readable"], box["hidden"])
        except BaseException as exc:
            os.write(said_write, f"{type(exc).__name__}: {exc}".encode()[:4000] or b"?")
            os._exit(0)
        os.write(said_write, b"ok")
        os.close(said_write)
        return
    os.close(said_write)
    if user:
        def stop(*_):
            sweep()
            remove_leftovers()
            os._exit(1)
        # The runner stops the exercise with SIGTERM to this process: everything the learner's
        # code started goes, wherever it went (setsid, double forks: all are ours to reap).
        signal.signal(signal.SIGTERM, stop)
    else:
        # The runner stops a sandboxed exercise with SIGTERM to this process, which kills process 1
        # of the namespace, and with it everything the learner's code started.
        # (Quietly: SIGTERM may come just after the child ended and was reaped; a traceback here
        # would be shown to the learner as output from their code.)
        signal.signal(signal.SIGTERM, lambda *_: _kill_quietly(pid))
    signal.pthread_sigmask(signal.SIG_SETMASK, mask)
    with os.fdopen(said_read, "rb") as said:
        word = said.read()
    if word != b"ok":
        if user:
            sweep()
        else:
            _kill_quietly(pid)
        if relay is not None:
            os.close(relay_read)
            os.close(relay_write)
        fault(word.decode(errors="replace") or "the confined process ended before it was ready")
    relaying = None
    if relay is not None:
        os.close(relay_write)
        if user:
            # A process the child left behind could hold the pipe open: the sweep below, once
            # the child has ended, closes it.
            import threading

            relaying = threading.Thread(target=_relay, args=(relay_read, result_fd, relay))
            relaying.start()
        else:
            _relay(relay_read, result_fd, relay)  # until every process of the namespace is gone
    elif result_fd is not None:
        os.close(result_fd)  # the event pipe ends when the confined child ends
    while True:
        try:
            _, status = os.waitpid(pid, 0)
            break
        except InterruptedError:
            continue
    if user:
        sweep()  # what it left behind goes with it
        remove_leftovers()
    if relaying is not None:
        relaying.join()
    if os.WIFSIGNALED(status):
        if os.WTERMSIG(status) not in (signal.SIGKILL, signal.SIGSTOP):  # these cannot be reset
            signal.signal(os.WTERMSIG(status), signal.SIG_DFL)
        os.kill(os.getpid(), os.WTERMSIG(status))
    os._exit(os.waitstatus_to_exitcode(status))


def _kill_quietly(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:  # already ended
        pass


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
