"""FSDP left to jit's sharding propagation (reshard to P() before use), without shard_map.

loses: loss_is_a_pmean_out_of_shard_map: there is no shard_map in the traced loss
loses: gradient_all_gathers_and_reduce_scatters: sum a whole weight gradient
technique: none (every number right, the technique not doing the work)
"""
import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec as P, reshard


def _loss(p, x, y):
    w1 = reshard(p["w1"], P())
    w2 = reshard(p["w2"], P())
    return jnp.mean((jax.nn.relu(x @ w1) @ w2 - y) ** 2)


def make_fsdp_loss(mesh):
    return _loss


fsdp_loss = make_fsdp_loss(None)
