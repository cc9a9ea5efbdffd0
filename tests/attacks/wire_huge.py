"""In a sandboxed worker: takes the judge's socket at import and answers each request with a
valid message of about 10 MB (an array of two million numbers, and a list of ten thousand),
followed by a reply nobody asked for, so that every later reply the judge reads is stale. The judge must survive it and give
nothing for it. Without the sandbox there is no socket, and the module is the honest one.
"""
import json as _json
import socket as _socket
import struct as _struct


def _frame(value) -> bytes:
    body = _json.dumps(value).encode()
    return _struct.pack("!Q", len(body)) + body


for _fd in _os.listdir("/proc/self/fd"):
    try:
        _link = _os.readlink(f"/proc/self/fd/{_fd}")
    except OSError:
        continue
    if not _link.startswith("socket:"):
        continue
    _sock = _socket.socket(fileno=int(_fd))
    import base64 as _base64

    _zeros = _base64.b64encode(bytes(4 * 2_000_000)).decode()
    _big = _frame({"d": [["value", {"t": [{"a": "float32", "s": [2_000_000], "v": _zeros},
                                          {"l": [0.0] * 10_000}]}]]})
    _extra = _frame({"d": [["value", {"a": "bfloat16", "s": [], "scalar": True, "v": "gD8="}]]})
    try:
        _sock.sendall(_frame({"d": [["ready", True]]}))
        while True:
            (_size,) = _struct.unpack("!Q", _sock.recv(8, _socket.MSG_WAITALL))
            _sock.recv(_size, _socket.MSG_WAITALL)
            _sock.sendall(_big + _extra)
    except BaseException:
        pass
    _os._exit(0)
