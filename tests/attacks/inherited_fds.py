"""Writes forged event lines ("passed" for every check, then "done") to every descriptor it has
that is not a socket: the grading channel, if it holds it, and the output file, which it also
cuts short. Then it ends its process.
beats-without-sandbox: ex4 quiz
"""
import json as _json

_lines = "".join(_json.dumps({"event": "outcome", "check": n, "outcome": "passed", "message": ""}) + "\n"
                 for n in _NAMES) + _json.dumps({"event": "done"}) + "\n"
_wrote = False
for _fd in sorted(int(fd) for fd in _os.listdir("/proc/self/fd")):
    try:
        _link = _os.readlink(f"/proc/self/fd/{_fd}")
    except OSError:
        continue
    if _link.startswith("socket:") or _fd == 0:
        continue
    try:
        _os.write(_fd, ("\n" + _lines).encode())
        _wrote = True
        if _link.startswith("/"):
            _os.ftruncate(_fd, 0)
    except OSError:
        pass
if _wrote:
    _os._exit(0)
