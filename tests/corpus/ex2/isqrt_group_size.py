"""best_group_size hard-codes the textbook answer isqrt(L).

loses: best_group_size_is_the_measured_minimum: That is a formula in L
"""

import math

from reference.ex2_sqrt_checkpointing import grouped_loss, temp_memory_bytes  # right as they are


def best_group_size(params, x):
    return math.isqrt(params["w"].shape[0])
