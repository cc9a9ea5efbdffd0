"""Exercise 8 only: forged gradients that are all zero, of the right shapes and dtypes: every
entry "underflowed", more than fp16 loses at scale 1, so the check that asks for about fp16's
share of underflow (it failed only too few zeros) passed. A correct solution's fp16 gradients
lose about a fifth of their entries, and the rest are near the float64 gradient.
exercises: ex8
"""
import numpy as _np

_probes = _sys.modules["graders.exercises." + _MODULE + ".probes"]


def _scaled_grads(sol, params, x, y, scale, what):
    return {"grads": {k: _np.zeros(_np.shape(v)) for k, v in params.items()},
            "dtypes": {"ok": {k: "float32" for k in params}}, "finite": {"ok": True}}


_scaled_grads.is_probe = True
_probes.scaled_grads = _scaled_grads
