"""best_group_size returns the divisor of L nearest sqrt(L), the textbook closed form.

loses: best_group_size_is_the_measured_minimum: That is a formula in L
"""
import math

from reference.ex2_sqrt_checkpointing import grouped_loss, temp_memory_bytes  # right as they are


def best_group_size(params, x):
    L = params["w"].shape[0]
    return min((k for k in range(1, L + 1) if L % k == 0), key=lambda k: abs(k - math.sqrt(L)))
