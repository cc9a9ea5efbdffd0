"""jit computes the loss; a correct FSDP shard_map runs beside it, its result multiplied by zero.

loses: loss_is_a_pmean_out_of_shard_map: not the shard_map's own result
loses: loss_is_computed_from_gathered_shards: not the shard_map's own result
technique: none (every number right, the technique not doing the work)
"""
import jax
import jax.numpy as jnp

from reference.ex3_fsdp_shard_map import make_fsdp_loss as _real


def make_fsdp_loss(mesh):
    decoy = _real(mesh)
    return lambda p, x, y: jnp.mean((jax.nn.relu(x @ p["w1"]) @ p["w2"] - y) ** 2) + 0.0 * decoy(p, x, y)


fsdp_loss = make_fsdp_loss(None)
