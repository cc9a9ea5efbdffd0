"""Right FSDP body, but in_specs left for shard_map to infer (impossible on an Auto mesh).

loses: gradients_stay_sharded: write in_specs out
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
    return jax.shard_map(_local, mesh=mesh, out_specs=P())


fsdp_loss = make_fsdp_loss(None)
