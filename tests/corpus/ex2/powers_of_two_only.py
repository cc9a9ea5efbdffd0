"""best_group_size tries only k = 1, 2, 4, 8, ... (as the chapter's table does).

loses: best_group_size_is_the_measured_minimum: measure every divisor of L
"""

from reference.ex2_sqrt_checkpointing import grouped_loss, temp_memory_bytes  # right as they are


def best_group_size(params, x):
    n_layers = params["w"].shape[0]
    divisors = [2 ** i for i in range(n_layers.bit_length()) if n_layers % 2 ** i == 0]
    return min(divisors, key=lambda k: temp_memory_bytes(params, x, k))
