"""Gathers the batch too, computes the whole batch's loss on every device, then psums it and
divides by the device count: right numbers, every device doing the whole work.

loses: each_device_does_its_share_of_the_work: every device computes on the whole batch
"""
import jax
import jax.numpy as jnp
from jax import lax
from jax.sharding import PartitionSpec as P


def _local(p, x, y):
    w1 = lax.all_gather(p["w1"], "fsdp", tiled=True)
    w2 = lax.all_gather(p["w2"], "fsdp", tiled=True)
    x, y = lax.all_gather(x, "fsdp", tiled=True), lax.all_gather(y, "fsdp", tiled=True)
    return lax.psum(jnp.mean((jax.nn.relu(x @ w1) @ w2 - y) ** 2), "fsdp") / lax.axis_size("fsdp")


def make_fsdp_loss(mesh):
    rows = P("fsdp", None)
    return jax.shard_map(_local, mesh=mesh, in_specs=({"w1": rows, "w2": rows}, rows, rows), out_specs=P())


fsdp_loss = make_fsdp_loss(None)
