"""best_group_size measures every divisor, but on stand-in arguments of its own (8 rows, 4
features) rather than the params and x it is given: the ranking of another program, whose
optimum does not move with the real B and D.

loses: best_group_size_is_the_measured_minimum: expected k=
"""
import jax.numpy as jnp

from reference.ex2_sqrt_checkpointing import grouped_loss, temp_memory_bytes  # noqa: F401  right as they are


def best_group_size(params, x):
    L = params["w"].shape[0]
    stand_in = ({"w": jnp.zeros((L, 4, 4), jnp.float32)}, jnp.zeros((8, 4), jnp.float32))
    return min((k for k in range(1, L + 1) if L % k == 0), key=lambda k: temp_memory_bytes(*stand_in, k))
