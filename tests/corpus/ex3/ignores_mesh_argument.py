"""make_fsdp_loss ignores its mesh: one module-level shard_map, bound to the first mesh it meets.

loses: loss_matches_single_device: binds to the first mesh it is called under
"""
import jax
import jax.numpy as jnp
from jax import lax
from jax.sharding import PartitionSpec as P


def _local(p, x, y):
    w1 = lax.all_gather(p["w1"], "fsdp", tiled=True)
    w2 = lax.all_gather(p["w2"], "fsdp", tiled=True)
    return lax.pmean(jnp.mean((jax.nn.relu(x @ w1) @ w2 - y) ** 2), "fsdp")


_rows = P("fsdp", None)
fsdp_loss = jax.shard_map(_local, in_specs=({"w1": _rows, "w2": _rows}, _rows, _rows), out_specs=P())


def make_fsdp_loss(mesh):
    return fsdp_loss
