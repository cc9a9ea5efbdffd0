"""Declares the weights replicated in in_specs (P()) and uses them without gathering.

loses: loss_matches_single_device: in_specs do not match how the arguments arrive
"""
import jax
import jax.numpy as jnp
from jax import lax
from jax.sharding import PartitionSpec as P


def _local(p, x, y):
    return lax.pmean(jnp.mean((jax.nn.relu(x @ p["w1"]) @ p["w2"] - y) ** 2), "fsdp")


def make_fsdp_loss(mesh):
    rows = P("fsdp", None)
    return jax.shard_map(_local, mesh=mesh, in_specs=({"w1": P(), "w2": P()}, rows, rows), out_specs=P())


fsdp_loss = make_fsdp_loss(None)
