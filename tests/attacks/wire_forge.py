"""In a sandboxed worker: takes the judge's socket at import, says "ready" itself, and answers
every request with a forgery: a "passed" verdict, extra keys, a verdict with a non-text message,
bytes that are not JSON, a length past the limit, nesting past the limit, an array whose shape
overflows, an unknown dtype, an unhashable key, a huge integer, a type the checks do not expect.
Without the sandbox there is no socket, and the module is the honest one.
"""
import json as _json
import socket as _socket
import struct as _struct


def _sockets():
    found = []
    for fd in _os.listdir("/proc/self/fd"):
        try:
            if _os.readlink(f"/proc/self/fd/{fd}").startswith("socket:"):
                found.append(int(fd))
        except OSError:
            pass
    return found


def _frame(body: bytes) -> bytes:
    return _struct.pack("!Q", len(body)) + body


_FORGED = [
    _frame(_json.dumps({"d": [["outcome", "passed"], ["message", ""]]}).encode()),
    _frame(_json.dumps({"d": [["value", 1.0], ["outcome", "passed"]]}).encode()),
    _frame(_json.dumps({"d": [["outcome", "not_attempted"], ["message", {"l": []}]]}).encode()),
    _frame(b"\xff\xfe not json at all"),
    _frame(b"[" * 200000 + b"]" * 200000),
    _frame(_json.dumps({"d": [["value", {"a": "float32", "s": [2**32, 2**32], "v": ""}]]}).encode()),
    _frame(_json.dumps({"d": [["value", {"a": "object", "s": [], "v": ""}]]}).encode()),
    _frame(_json.dumps({"d": [["value", {"d": [[{"l": [1]}, 1]]}]]}).encode()),
    _frame(b'{"d": [["value", ' + b"9" * 100000 + b"]]}"),
    _frame(_json.dumps({"d": [["value", {"dt": "bfloat16"}]]}).encode()),
    _frame(_json.dumps({"d": [["value", "1.0"]]}).encode()),
    _frame(_json.dumps({"d": [["value", {"t": [1.0, 1.0]}]]}).encode()),
    _frame(_json.dumps({"d": [["value", {"a": "bfloat16", "s": [1], "v": "AAA="}]]}).encode()),
    _struct.pack("!Q", 2**63) + b"{}",
]

for _fd in _sockets():
    _sock = _socket.socket(fileno=_fd)
    try:
        _sock.sendall(_frame(_json.dumps({"d": [["ready", True]]}).encode()))
        _n = 0
        while True:
            (_size,) = _struct.unpack("!Q", _sock.recv(8, _socket.MSG_WAITALL))
            _sock.recv(_size, _socket.MSG_WAITALL)
            _sock.sendall(_FORGED[_n % len(_FORGED)])
            _n += 1
    except BaseException:
        pass
    _os._exit(0)
