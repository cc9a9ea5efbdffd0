"""Gathers the sharded weights inside a jax.checkpoint, but computes the loss from a replicated copy
passed in beside them; the gathered weights enter only multiplied by zero. The gathers are nested
one level down, where the grader must look for them, and still do no work.

loses: loss_is_computed_from_gathered_shards: the gathered shards do no work
loses: gradient_all_gathers_and_reduce_scatters: sum a whole weight gradient
technique: none (every number right, the technique not doing the work)
"""
import jax
import jax.numpy as jnp
from jax import lax
from jax.sharding import PartitionSpec as P, reshard


@jax.checkpoint
def _gathered_sum(p_blk):
    return sum(jnp.sum(lax.all_gather(w, "fsdp", tiled=True)) for w in p_blk.values())


def _local(p_blk, whole, x, y):
    local = jnp.mean((jax.nn.relu(x @ whole["w1"]) @ whole["w2"] - y) ** 2)
    return lax.pmean(local + 0.0 * _gathered_sum(p_blk), "fsdp")


def make_fsdp_loss(mesh):
    rows = P("fsdp", None)
    specs = ({"w1": rows, "w2": rows}, {"w1": P(), "w2": P()}, rows, rows)
    body = jax.shard_map(_local, mesh=mesh, in_specs=specs, out_specs=P())

    def loss(p, x, y):
        return body(p, jax.tree.map(lambda w: reshard(w, P()), p), x, y)

    return loss


fsdp_loss = make_fsdp_loss(None)
