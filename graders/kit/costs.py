"""Figures the compiler reports for a program: temporary memory and FLOPs."""

from collections.abc import Callable

import jax


def compile_fn(fn: Callable, *args):
    return jax.jit(fn).lower(*args).compile()


# What memory_analysis() reports of a compiled program, field by field.
MEMORY_FIELDS = ("temp_size_in_bytes", "argument_size_in_bytes", "output_size_in_bytes",
                 "generated_code_size_in_bytes", "peak_memory_in_bytes")


def memory_figures(compiled) -> dict[str, int]:
    """memory_analysis() of a compiled program as plain data: field -> bytes."""
    stats = compiled.memory_analysis()
    return {f: int(getattr(stats, f)) for f in MEMORY_FIELDS if hasattr(stats, f)}


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
