"""Gathers the sharded weights but computes with a replicated copy passed in beside them; the
gathered weights only enter multiplied by zero.

loses: loss_is_computed_from_gathered_shards: the gathered shards do no work
loses: gradient_all_gathers_and_reduce_scatters: sum a whole weight gradient
technique: none (every number right, the technique not doing the work)
"""
import jax
import jax.numpy as jnp
from jax import lax
from jax.sharding import PartitionSpec as P, reshard


def _local(p_blk, whole, x, y):
    w1 = lax.all_gather(p_blk["w1"], "fsdp", tiled=True)
    w2 = lax.all_gather(p_blk["w2"], "fsdp", tiled=True)
    local = jnp.mean((jax.nn.relu(x @ whole["w1"]) @ whole["w2"] - y) ** 2)
    return lax.pmean(local + 0.0 * (jnp.sum(w1) + jnp.sum(w2)), "fsdp")


def make_fsdp_loss(mesh):
    rows = P("fsdp", None)
    body = jax.shard_map(_local, mesh=mesh, in_specs=({"w1": rows, "w2": rows}, {"w1": P(), "w2": P()}, rows, rows),
                         out_specs=P())
    return lambda p, x, y: body(p, jax.tree.map(lambda w: reshard(w, P()), p), x, y)


fsdp_loss = make_fsdp_loss(None)
