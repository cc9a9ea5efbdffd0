"""Takes the parameters replicated (in_specs P()): every device holds the full weights, no FSDP.

loses: loss_is_computed_from_gathered_shards: made by jax.sharding.reshard first
technique: none (every number right, the technique not doing the work)
"""
import jax
import jax.numpy as jnp
from jax import lax
from jax.sharding import PartitionSpec as P, reshard


def _local(p, x, y):
    return lax.pmean(jnp.mean((jax.nn.relu(x @ p["w1"]) @ p["w2"] - y) ** 2), "fsdp")


def make_fsdp_loss(mesh):
    rows = P("fsdp", None)
    body = jax.shard_map(_local, mesh=mesh, in_specs=({"w1": P(), "w2": P()}, rows, rows), out_specs=P())

    def loss(p, x, y):
        return body(jax.tree.map(lambda w: reshard(w, P()), p), x, y)

    return loss


fsdp_loss = make_fsdp_loss(None)
