"""Exercise 7 only: forged per-device FLOPs of 0 (or below): the judge failed the share check
only for a figure above the slack, and no compiled forward or training step does no work. Since
issue 31 the probes send programs, and the judge compiles them for the FLOPs itself: the forged
replies are descriptions in place of the forward's and the step's programs.
exercises: ex7
"""
_probes = _sys.modules["graders.exercises." + _MODULE + ".probes"]


def _forward_program(sol, version, shape, *args, **kwargs):
    return {"out": None, "placed": None, "collectives": {}, "collective_shapes": [], "flops": 0.0}


def _step_program(sol, *args, **kwargs):
    return {"flops": -1.0, "collectives": {}, "collective_shapes": []}


_forward_program.is_probe = _step_program.is_probe = True
_probes.forward_program = _forward_program
_probes.step_program = _step_program
