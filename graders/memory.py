"""Figures the compiler reports for a program: temporary memory and FLOPs."""

from collections.abc import Callable

import jax


def compile_fn(fn: Callable, *args):
    return jax.jit(fn).lower(*args).compile()


def temp_bytes(fn: Callable, *args) -> int:
    """`temp_size_in_bytes` of jit(fn) at these arguments: the activations and workspace the
    compiled program holds at once (arguments and outputs are not counted)."""
    return int(compile_fn(fn, *args).memory_analysis().temp_size_in_bytes)


def flops(compiled) -> float:
    """Per-device FLOPs of a compiled program (cost_analysis is per device for SPMD programs)."""
    cost = compiled.cost_analysis()
    if isinstance(cost, (list, tuple)):
        cost = cost[0]
    return float(cost.get("flops", 0.0))


MiB = 1 << 20
