"""Exercise 3 only: forged figures of a compiled gradient, per-device FLOPs that are not a number
(NaN) and no collectives, sent where the worker's programs go. Before issue 31 the worker compiled
the gradient and sent these figures, and the judge failed the share check only for a figure
*above* the slack (`got > ...`), which a NaN never is. Now the judge compiles the programs it
rebuilds and reads its own figures: a reply without programs earns no check that reads one.
exercises: ex3
"""
_probes = _sys.modules["graders.exercises." + _MODULE + ".probes"]
_FIGURES = {"flops": float("nan"), "collectives": {"all-gather": 0, "reduce-scatter": 0, "all-reduce": 0},
            "all_reduce_sizes": []}


def _programs(*args, **kwargs):
    return {"loss": dict(_FIGURES), "value_and_grad": dict(_FIGURES)}


def _one_program(*args, **kwargs):
    return dict(_FIGURES)


_programs.is_probe = _one_program.is_probe = True
_probes.programs = _programs
_probes.auto_gradient_program = _probes.fresh_program = _one_program
