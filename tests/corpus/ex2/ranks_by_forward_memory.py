"""best_group_size ranks the divisors by the temporary memory of the forward pass alone
(jit(grouped_loss), no gradient), another program than the one checkpointing acts on: the
forward pass keeps nothing for a backward pass, so its memory does not follow the curve.

loses: best_group_size_is_the_measured_minimum: expected k=
"""
import jax

from reference.ex2_sqrt_checkpointing import grouped_loss, temp_memory_bytes  # noqa: F401  right as they are


def best_group_size(params, x):
    L = params["w"].shape[0]

    def forward_temp(k):
        compiled = jax.jit(lambda p, x: grouped_loss(p, x, k)).lower(params, x).compile()
        return compiled.memory_analysis().temp_size_in_bytes

    return min((k for k in range(1, L + 1) if L % k == 0), key=forward_temp)
