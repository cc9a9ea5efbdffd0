"""FSDP on a mesh of 4 devices, where the grader once read the traced program, and weights resharded
whole (replicated) onto every device on any other mesh: right numbers everywhere, FSDP on one mesh.

loses: loss_is_computed_from_gathered_shards: made by jax.sharding.reshard first
loses: gradient_all_gathers_and_reduce_scatters: sum a whole weight gradient
technique: none (every number right, the technique not doing the work)
"""
import jax
import jax.numpy as jnp
from jax import lax
from jax.sharding import PartitionSpec as P, reshard

ROWS = P("fsdp", None)


def _sharded(p, x, y):
    w1 = lax.all_gather(p["w1"], "fsdp", tiled=True)
    w2 = lax.all_gather(p["w2"], "fsdp", tiled=True)
    return lax.pmean(jnp.mean((jax.nn.relu(x @ w1) @ w2 - y) ** 2), "fsdp")


def _replicated(p, x, y):
    return lax.pmean(jnp.mean((jax.nn.relu(x @ p["w1"]) @ p["w2"] - y) ** 2), "fsdp")


def make_fsdp_loss(mesh):
    if mesh is None or mesh.shape["fsdp"] == 4:
        return jax.shard_map(_sharded, mesh=mesh, in_specs=({"w1": ROWS, "w2": ROWS}, ROWS, ROWS), out_specs=P())
    body = jax.shard_map(_replicated, mesh=mesh, in_specs=({"w1": P(), "w2": P()}, ROWS, ROWS), out_specs=P())
    return lambda p, x, y: body(jax.tree.map(lambda w: reshard(w, P()), p), x, y)


fsdp_loss = make_fsdp_loss(None)
