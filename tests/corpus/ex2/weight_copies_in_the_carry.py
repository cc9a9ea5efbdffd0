"""The grouped checkpoint is right, but the scan over the groups also carries eight stacked copies
of the weights, touched every step and kept to the end (added to the loss times 0): memory that
does not grow with the batch, beyond what a right variant holds, kept for nothing.

loses: gradient_memory_matches_the_grouped_checkpoint: memory that does not grow with the batch
"""
import jax
import jax.numpy as jnp
from jax import lax

from reference.ex2_sqrt_checkpointing import best_group_size, layer, temp_memory_bytes  # noqa: F401  right as they are


def grouped_loss(params, x, k=None):
    w = params["w"]
    if k is None:
        x, _ = lax.scan(layer, x, w)
        return jnp.mean(x ** 2)
    groups = w.reshape(w.shape[0] // k, k, *w.shape[1:])

    @jax.checkpoint
    def group(x, group_w):
        return lax.scan(layer, x, group_w)[0]

    def body(carry, group_w):
        x, copies = carry
        return (group(x, group_w), copies * jnp.cos(group_w.sum())), None

    (x, copies), _ = lax.scan(body, (x, jnp.tile(w, (8, 1, 1))), groups)
    return jnp.mean(x ** 2) + 0.0 * jnp.sum(copies)
