"""In a sandboxed worker: leaves the judge's process group (setsid), then answers every request
with a valid float32 scalar in a message padded with 160 MB of numbers that the judge's decoder
parses (seconds in one C call, json.loads, while Python's signal handlers wait) and then ignores.
When the exercise's time is up the judge does not act on SIGTERM in time, the runner kills its
process group, and the worker, alone in its namespace, must not live on. (It gives up after 45 s.)
One exercise is enough to show it, and each one graded costs the whole --timeout.
args: --timeout 6
exercises: ex4
"""
import socket as _socket
import struct as _struct
import time as _time

_start = _time.monotonic()
for _fd in _os.listdir("/proc/self/fd"):
    try:
        _link = _os.readlink(f"/proc/self/fd/{_fd}")
    except OSError:
        continue
    if not _link.startswith("socket:"):
        continue
    _sock = _socket.socket(fileno=int(_fd))
    _os.setsid()
    _body = (b'{"d": [["value", {"a": "float32", "s": [], "scalar": true, "v": "AAAAAA=="}]], "x": ['
             + b"0.5," * 40_000_000 + b"0.5]}")
    try:
        _ready = b'{"d": [["ready", true]]}'
        _sock.sendall(_struct.pack("!Q", len(_ready)) + _ready)
        while True:
            _head = _sock.recv(8, _socket.MSG_WAITALL)
            (_size,) = _struct.unpack("!Q", _head)
            _sock.recv(_size, _socket.MSG_WAITALL)
            _sock.sendall(_struct.pack("!Q", len(_body)) + _body)
    except BaseException:
        pass
    while _time.monotonic() - _start < 45:
        _time.sleep(0.5)
    _os._exit(0)
