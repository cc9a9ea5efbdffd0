"""Probes for Exercise 4: the learner's three functions and two module values, as numbers."""

from graders.kit.verdicts import NotAttempted, fail
from graders.kit.probing import probe


@probe
def sgd_bf16(sol, w0, lr, grad, steps):
    return sol.sgd_bf16(w0, lr, grad, steps)


@probe
def sgd_fp32_master(sol, w0, lr, grad, steps):
    return sol.sgd_fp32_master(w0, lr, grad, steps)


@probe
def bf16_rounding_threshold(sol, w):
    return sol.bf16_rounding_threshold(w)


@probe
def module_value(sol, name):
    """The module-level result `name` (w_bf16 or w_master)."""
    value = getattr(sol, name, None)
    if value is None:
        raise NotAttempted(f"{name} is still None")
    if callable(value):
        fail(f"{name} should hold the result after 100 steps, but it is a function. "
             f"Hint: {name} = your_function(1.0, 1e-3, 1.0, 100).")
    return value
