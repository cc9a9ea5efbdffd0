"""best_group_size measures only k = 1, the divisor nearest sqrt(L), and L, and returns the least
of those three: on an L with few divisors that is every divisor, on an L with many it misses
the optimum whenever that is not near sqrt(L).

loses: best_group_size_is_the_measured_minimum: measure every divisor of L
"""
import math

from reference.ex2_sqrt_checkpointing import grouped_loss, temp_memory_bytes  # noqa: F401  right as they are


def best_group_size(params, x):
    L = params["w"].shape[0]
    divisors = [k for k in range(1, L + 1) if L % k == 0]
    near_sqrt = min(divisors, key=lambda k: abs(k - math.sqrt(L)))
    return min({1, near_sqrt, L}, key=lambda k: temp_memory_bytes(params, x, k))
