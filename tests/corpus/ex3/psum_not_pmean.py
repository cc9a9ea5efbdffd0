"""Adds the devices' local losses with psum instead of averaging them: N times too large.

loses: loss_matches_single_device: because lax.psum adds them
loses: gradients_match_single_device: 8 times the gradient
"""
import jax
import jax.numpy as jnp
from jax import lax
from jax.sharding import PartitionSpec as P


def _local(p, x, y):
    w1 = lax.all_gather(p["w1"], "fsdp", tiled=True)
    w2 = lax.all_gather(p["w2"], "fsdp", tiled=True)
    return lax.psum(jnp.mean((jax.nn.relu(x @ w1) @ w2 - y) ** 2), "fsdp")


def make_fsdp_loss(mesh):
    rows = P("fsdp", None)
    return jax.shard_map(_local, mesh=mesh, in_specs=({"w1": rows, "w2": rows}, rows, rows), out_specs=P())


fsdp_loss = make_fsdp_loss(None)
