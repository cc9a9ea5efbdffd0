"""Looks for what it must not see, then says what it found as the message of a failed import
(the one channel it has out): other processes, their environment or memory (the judge's, the
runner's), the grader file of its exercise, reference/, a user namespace (the way out of a
chroot), the programs in the compilation cache that were compiled from reference/ (an autograder
warms the cache up with the reference solutions) or under a grader's checks, and the grading seed
left in its own memory after the environment variable was removed.
"""
import ctypes as _ctypes
import json as _json

_found = {}
_me = _os.getpid()
_pids = [int(p) for p in _os.listdir("/proc") if p.isdigit() and int(p) != _me]
_found["other_pids"] = bool(_pids)
_env = False
for _pid in _pids:
    try:
        with open(f"/proc/{_pid}/environ", "rb") as _f:
            _env = _env or b"GRADERS_" in _f.read()
    except OSError:
        pass
_found["other_environ"] = _env
_mem = False
for _pid in _pids:
    try:
        with open(f"/proc/{_pid}/mem", "rb") as _f:
            _f.read(1)
        _mem = True
    except OSError:
        pass
_found["other_mem"] = _mem
try:
    import graders as _graders

    _root = _os.path.dirname(_os.path.dirname(_graders.__file__))
    _found["reference"] = _os.path.exists(_os.path.join(_root, "reference", f"{_MODULE}.py"))
    with open(_os.path.join(_root, "graders", "exercises", _MODULE, "checks.py")) as _f:
        _found["grader_file"] = "def test_" in _f.read()
except OSError:
    _found["grader_file"] = False
_reference_programs = _grader_programs = 0
try:
    import zlib as _zlib

    _cache = _os.environ.get("JAX_COMPILATION_CACHE_DIR") or "/nonexistent"
    for _name in _os.listdir(_cache):
        try:
            with open(_os.path.join(_cache, _name), "rb") as _f:
                _raw = _zlib.decompress(_f.read())
        except Exception:
            continue
        _reference_programs += b"/reference/" in _raw
        _grader_programs += b"/checks.py" in _raw
except OSError:
    pass
_found["cache_reference_programs"] = _reference_programs > 0
_found["cache_grader_programs"] = _grader_programs > 0
_libc = _ctypes.CDLL(None, use_errno=True)
_found["user_namespace"] = _libc.unshare(0x10000000) == 0
_found["seed_in_environ"] = "GRADERS_SEED" in _os.environ
try:
    _environ = _ctypes.POINTER(_ctypes.c_void_p).in_dll(_libc, "environ")
    _addresses, _i = [], 0
    while _environ[_i]:
        _addresses.append(_environ[_i] + len(_ctypes.string_at(_environ[_i])))
        _i += 1
    _last = max(_addresses)
    _first = min(a for a in _addresses if _last - a < 1 << 20)  # the strings on the stack, not setenv's
    _found["seed_in_memory"] = b"GRADERS_SEED=" in _ctypes.string_at(_first - 8192, _last - _first + 8192)
except Exception as _exc:
    _found["seed_in_memory"] = "?"
raise RuntimeError("FOUND" + _json.dumps(_found, separators=(",", ":")) + "END")
