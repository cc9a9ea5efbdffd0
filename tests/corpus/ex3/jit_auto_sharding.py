"""FSDP left to jit: the weights stay NamedSharding P("fsdp", None) and jit's sharding propagation
gathers them; every number is right, no shard_map is written.

loses: loss_is_a_pmean_out_of_shard_map: there is no shard_map in the traced loss
loses: loss_is_computed_from_gathered_shards: there is no shard_map in the traced loss
loses: gradient_all_gathers_and_reduce_scatters: sum a whole weight gradient
loses: fsdp_loss_is_a_shard_map_right_on_every_mesh: not by a shard_map
technique: none (every number right, the technique not doing the work)
"""
import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P


def make_fsdp_loss(mesh):
    def loss(p, x, y):
        if mesh is not None:  # keep the batch split by rows, as FSDP does; jit does the rest
            x, y = (jax.lax.with_sharding_constraint(a, NamedSharding(mesh, P("fsdp", None))) for a in (x, y))
        return jnp.mean((jax.nn.relu(x @ p["w1"]) @ p["w2"] - y) ** 2)

    return jax.jit(loss)


fsdp_loss = make_fsdp_loss(None)
