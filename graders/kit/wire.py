"""Plain data between a grading judge and the worker that runs the learner's code.

The judge decodes what a worker sends, and the worker runs learner code, so decoding must never
run code or build arbitrary objects (no pickle): only JSON, with NumPy arrays of an allowed
dtype as base64 bytes. Both directions use it, and the in-process path (no `--sandbox`) sends
every value through it too, so graders see the same types either way.
"""

import base64
import json
import struct

import ml_dtypes
import numpy as np

MAX_MESSAGE = 256 << 20  # bytes: far above any probe's answer, far below the machine's memory
MAX_DEPTH = 32  # nesting of lists, tuples and dicts

_DTYPES = {np.dtype(t).name: np.dtype(t) for t in (
    np.bool_, np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64,
    np.float16, np.float32, np.float64, np.complex64, np.complex128, ml_dtypes.bfloat16)}


class WireError(ValueError):
    """A value that cannot be sent, or a message that is not one we send."""


def _to(value, depth: int):
    if depth > MAX_DEPTH:
        raise WireError("nested too deeply")
    # NumPy scalars first: np.float64 is also a float, and should arrive as what it was.
    if value is None or (isinstance(value, (bool, int, float, str)) and not isinstance(value, np.generic)):
        return value
    if isinstance(value, bytes):
        return {"b": base64.b64encode(value).decode()}
    if isinstance(value, tuple):
        return {"t": [_to(v, depth + 1) for v in value]}
    if isinstance(value, list):
        return {"l": [_to(v, depth + 1) for v in value]}
    if isinstance(value, dict):
        return {"d": [[_to(k, depth + 1), _to(v, depth + 1)] for k, v in value.items()]}
    if isinstance(value, np.dtype) or (isinstance(value, type) and issubclass(value, np.generic)):
        return {"dt": np.dtype(value).name}
    if isinstance(value, np.generic) or hasattr(value, "__array__"):
        try:
            array = np.asarray(value)
        except Exception as exc:  # e.g. a typed PRNG key, or a learner object whose __array__ raises
            raise WireError(f"a {type(value).__name__} cannot be sent as an array: {exc}") from None
        if array.dtype.name not in _DTYPES:
            raise WireError(f"arrays of dtype {array.dtype} are not sent")
        return {"a": array.dtype.name, "s": list(array.shape), "scalar": isinstance(value, np.generic),
                "v": base64.b64encode(np.ascontiguousarray(array).tobytes()).decode()}
    raise WireError(f"a {type(value).__name__} is not plain data")


def _dtype(name) -> np.dtype:
    if not isinstance(name, str) or name not in _DTYPES:
        raise WireError(f"unknown dtype {name!r}")
    return _DTYPES[name]


def _from(value, depth: int):
    if depth > MAX_DEPTH:
        raise WireError("nested too deeply")
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if not isinstance(value, dict) or len(value) == 0:
        raise WireError("malformed message")
    if "b" in value:
        return base64.b64decode(value["b"], validate=True)
    if "t" in value:
        return tuple(_from(v, depth + 1) for v in value["t"])
    if "l" in value:
        return [_from(v, depth + 1) for v in value["l"]]
    if "d" in value:
        out = {}
        for pair in value["d"]:
            if not isinstance(pair, list) or len(pair) != 2:
                raise WireError("malformed dict")
            key = _from(pair[0], depth + 1)
            if not isinstance(key, (str, int, float, bool, tuple, type(None))):
                raise WireError("unhashable key")
            out[key] = _from(pair[1], depth + 1)
        return out
    if "dt" in value:
        return _dtype(value["dt"])
    if "a" in value:
        dtype = _dtype(value["a"])
        shape = value.get("s")
        if not isinstance(shape, list) or not all(isinstance(n, int) and n >= 0 for n in shape):
            raise WireError("malformed shape")
        raw = base64.b64decode(value.get("v", ""), validate=True)
        if len(raw) != dtype.itemsize * int(np.prod(shape, dtype=np.int64)):
            raise WireError("array bytes do not match its shape")
        array = np.frombuffer(raw, dtype=dtype).reshape(shape).copy()
        return array[()] if value.get("scalar") and array.ndim == 0 else array
    raise WireError("malformed message")


def encode(value) -> bytes:
    data = json.dumps(_to(value, 0)).encode()
    if len(data) > MAX_MESSAGE:
        raise WireError(f"{len(data)} bytes is more than a message may hold")
    return data


def decode(data: bytes):
    if len(data) > MAX_MESSAGE:
        raise WireError("message too long")
    try:
        parsed = json.loads(data)
    except (ValueError, RecursionError) as exc:
        raise WireError(f"not a message: {exc}") from None
    try:
        return _from(parsed, 0)
    except (ValueError, TypeError, RecursionError) as exc:
        raise WireError(str(exc)) from None


def round_trip(value):
    return decode(encode(value))


def send(sock, value) -> None:
    send_encoded(sock, encode(value))


def send_encoded(sock, data: bytes) -> None:
    sock.sendall(struct.pack("!Q", len(data)) + data)


def _exactly(sock, n: int) -> bytes:
    chunks, left = [], n
    while left:
        chunk = sock.recv(min(left, 1 << 20))
        if not chunk:
            raise EOFError("the other side has gone")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def receive(sock):
    (size,) = struct.unpack("!Q", _exactly(sock, 8))
    if size > MAX_MESSAGE:
        raise WireError("message too long")
    return decode(_exactly(sock, size))
