"""Exercise 3 only: a forged compiled gradient whose per-device FLOPs are not a number (NaN), or
none at all: the judge failed the share check only for a figure *above* the slack (`got > ...`),
which a NaN never is. A correct solution's compiled gradient does about 1/n of one device's work.
exercises: ex3
"""
_probes = _sys.modules["graders.exercises." + _MODULE + ".probes"]


def _compiled_gradient(sol, n, *args, **kwargs):
    return {"flops": float("nan"), "collectives": {"all-gather": 0, "reduce-scatter": 0, "all-reduce": 0},
            "all_reduce_sizes": []}


_compiled_gradient.is_probe = True
_probes.compiled_gradient = _compiled_gradient
