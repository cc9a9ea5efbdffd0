"""The guard's comparison (graders/child/guard.py): names replaced or deleted since a snapshot are
named, each once, whatever else changed; dunder names and state that moves on its own are not."""

import math

from graders.child import guard, probe_channel
from graders.kit import numeric


def test_replaced_and_deleted_names_are_named_and_put_back_nothing_is():
    before = guard.snapshot()
    assert guard.replaced(before) == []
    saved = (math.sqrt, math.pi, numeric.as_scalar, math.__doc__)
    try:
        math.sqrt = lambda x: 0.0
        del math.pi
        numeric.as_scalar = None
        math.__doc__ = "changed"  # a dunder: not part of the contract
        math.a_new_name = 1  # not in the snapshot: nothing to compare it with
        expected = ["graders.kit.numeric.as_scalar", "math.pi", "math.sqrt"]
        assert guard.replaced(before) == expected
        assert guard.replaced(before) == expected  # asked again against the same snapshot
        assert guard.replaced(dict(before)) == expected  # a plain dict of the same ids
    finally:
        math.sqrt, math.pi, numeric.as_scalar, math.__doc__ = saved
        del math.a_new_name
    assert guard.replaced(before) == []


def test_a_method_replaced_on_a_graders_class_is_named():
    before = guard.snapshot()
    original = probe_channel.Remote.call
    try:
        probe_channel.Remote.call = lambda self, name, args, kwargs: None
        assert guard.replaced(before) == ["graders.child.probe_channel.Remote.call"]
    finally:
        probe_channel.Remote.call = original
    assert guard.replaced(before) == []
