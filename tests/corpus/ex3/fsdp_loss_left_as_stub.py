"""make_fsdp_loss is done, but the module-level fsdp_loss is still the stub.

loses: fsdp_loss_is_a_shard_map_right_on_every_mesh: not attempted yet
"""
import jax
import jax.numpy as jnp
from jax import lax
from jax.sharding import PartitionSpec as P


def _local(p, x, y):
    w1 = lax.all_gather(p["w1"], "fsdp", tiled=True)
    w2 = lax.all_gather(p["w2"], "fsdp", tiled=True)
    return lax.pmean(jnp.mean((jax.nn.relu(x @ w1) @ w2 - y) ** 2), "fsdp")


def make_fsdp_loss(mesh):
    rows = P("fsdp", None)
    return jax.shard_map(_local, mesh=mesh, in_specs=({"w1": rows, "w2": rows}, rows, rows), out_specs=P())


def fsdp_loss(p, x, y):
    raise NotImplementedError
