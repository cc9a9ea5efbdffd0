"""A value the learner's code returned that the wire cannot carry (a learner object, a typed key):
the probe sends its type's name instead, and the check says what came back."""

import numpy as np

from graders.kit import wire
from graders.kit.verdicts import fail

UNSENDABLE = "__unsendable__"


def sendable(value):
    """Where the learner's code runs: value as a NumPy array (or as it is) if the wire can carry it,
    else {UNSENDABLE: its type's name}."""
    try:
        if hasattr(value, "__array__") and not isinstance(value, np.generic):
            value = np.asarray(value)  # one transfer from the devices, not one per encoding
        wire.encode(value)
    except Exception:  # WireError, or a learner object that fails to convert
        return {UNSENDABLE: type(value).__name__}
    return value


def received(value, what: str, shape=None):
    """In the checks: a value a probe sent back, or a failed check naming what came back if it
    could not be sent."""
    if isinstance(value, dict) and set(value) == {UNSENDABLE}:
        expected = "" if shape is None else f" of shape {tuple(shape)}"
        fail(f"{what}: expected an array{expected}, got {value[UNSENDABLE]}. "
             "Hint: return the value itself, not a description of it.")
    return value
