"""What a worker may send a judge (graders/kit/wire.py): plain data in, the same plain data out, and
anything else refused without running code."""

import json
import struct

import ml_dtypes
import numpy as np
import pytest

from graders.kit import wire


def test_plain_data_round_trips_with_its_types():
    value = {"n": 3, 2: (1.5, None, True), "s": "x", "b": b"\x00\xff", "l": [float("inf")],
             "dt": np.dtype(np.float32)}
    back = wire.round_trip(value)
    assert back == value
    assert isinstance(back[2], tuple) and isinstance(back["l"], list) and 2 in back


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.bool_, np.uint8, ml_dtypes.bfloat16])
def test_arrays_round_trip_bit_for_bit(dtype):
    array = (np.arange(24).reshape(2, 3, 4) % 5).astype(dtype)
    back = wire.round_trip(array)
    assert back.dtype == array.dtype and back.shape == array.shape
    assert back.tobytes() == array.tobytes()
    scalar = wire.round_trip(array.reshape(-1)[3])
    assert isinstance(scalar, np.generic) and scalar.dtype == array.dtype


def test_jax_arrays_arrive_as_numpy_arrays():
    import jax.numpy as jnp

    back = wire.round_trip(jnp.ones((2, 5), jnp.bfloat16))
    assert isinstance(back, np.ndarray) and back.dtype == ml_dtypes.bfloat16 and back.shape == (2, 5)


def test_objects_are_refused_when_sent():
    for value in (object(), {1, 2}, lambda: 0, np.array(["a"], dtype=object)):
        with pytest.raises(wire.WireError):
            wire.encode(value)


@pytest.mark.parametrize("message", [
    {"a": "object", "s": [1], "v": ""},                       # a dtype that could hold objects
    {"a": "float32", "s": [3], "v": "AAAA"},                  # bytes that do not fill the shape
    {"a": "float32", "s": [-1], "v": ""},                     # a negative axis
    {"x": 1},                                                 # no such kind
    {"d": [[{"l": []}, 1]]},                                  # an unhashable key
    {"py/object": "os.system"},                               # what a pickle-like codec would run
])
def test_malformed_messages_are_refused_when_received(message):
    with pytest.raises(wire.WireError):
        wire.decode(json.dumps(message).encode())


def test_nesting_and_size_are_bounded():
    deep = "1"
    for _ in range(wire.MAX_DEPTH + 5):
        deep = '{"l": [' + deep + ']}'
    with pytest.raises(wire.WireError):
        wire.decode(deep.encode())

    class Sock:
        def recv(self, n):
            return struct.pack("!Q", wire.MAX_MESSAGE + 1)[:n]

    with pytest.raises(wire.WireError):
        wire.receive(Sock())
