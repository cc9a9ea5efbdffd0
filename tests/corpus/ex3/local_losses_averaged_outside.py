"""Returns each device's local loss with out_specs P("fsdp") and averages them outside shard_map.

loses: loss_is_a_pmean_out_of_shard_map: the averaging across devices is left to jit
"""
import jax
import jax.numpy as jnp
from jax import lax
from jax.sharding import PartitionSpec as P


def _local(p, x, y):
    w1 = lax.all_gather(p["w1"], "fsdp", tiled=True)
    w2 = lax.all_gather(p["w2"], "fsdp", tiled=True)
    return jnp.mean((jax.nn.relu(x @ w1) @ w2 - y) ** 2)[None]


def make_fsdp_loss(mesh):
    rows = P("fsdp", None)
    per_device = jax.shard_map(_local, mesh=mesh, in_specs=({"w1": rows, "w2": rows}, rows, rows), out_specs=P("fsdp"))
    return lambda p, x, y: jnp.mean(per_device(p, x, y))


fsdp_loss = make_fsdp_loss(None)
