"""Every number right, no checkpoint: grouped_loss never checkpoints, while temp_memory_bytes and
best_group_size measure a correct grouped checkpoint kept out of sight. Scores at most half
(tests/test_ex2_grader.py).

loses: one_checkpoint_per_group_inside_a_scan: found no checkpoint at all
loses: group_body_is_a_scan_over_its_k_layers: holds no jax.checkpoint
loses: checkpoint_policy_saves_nothing: holds no jax.checkpoint for any k
loses: gradient_memory_matches_the_grouped_checkpoint: No k saves memory against no checkpoint
technique: none (every number right, the technique not doing the work)
"""
from jax import lax
import jax.numpy as jnp

from reference.ex2_sqrt_checkpointing import layer, temp_memory_bytes, best_group_size  # right: they measure the reference's program


def grouped_loss(params, x, k=None):
    x, _ = lax.scan(layer, x, params["w"])
    return jnp.mean(x ** 2)
