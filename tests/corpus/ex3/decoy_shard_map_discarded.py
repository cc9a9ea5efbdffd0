"""Calls a correct FSDP shard_map and throws its result away; jit computes the loss.

loses: loss_is_a_pmean_out_of_shard_map: its result is discarded
technique: none (every number right, the technique not doing the work)
"""
import jax
import jax.numpy as jnp

from reference.ex3_fsdp_shard_map import make_fsdp_loss as _real


def make_fsdp_loss(mesh):
    decoy = _real(mesh)

    def loss(p, x, y):
        decoy(p, x, y)
        return jnp.mean((jax.nn.relu(x @ p["w1"]) @ p["w2"] - y) ** 2)

    return loss


fsdp_loss = make_fsdp_loss(None)
