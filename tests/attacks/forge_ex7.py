"""Exercise 7 only: forged per-device FLOPs of 0 (or below): the judge failed the share check
only for a figure above the slack, and no compiled forward or training step does no work.
exercises: ex7
"""
_probes = _sys.modules["graders.exercises." + _MODULE + ".probes"]


def _forward(sol, version, shape, *args, **kwargs):
    return {"out": None, "placed": None, "collectives": {}, "collective_shapes": [], "flops": 0.0}


def _step_flops(sol, *args, **kwargs):
    return -1.0


_forward.is_probe = _step_flops.is_probe = True
_probes.forward = _forward
_probes.step_flops = _step_flops
