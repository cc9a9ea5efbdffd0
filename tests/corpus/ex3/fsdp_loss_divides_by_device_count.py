"""Sums the local losses and divides by the mesh size when given a mesh, by jax.device_count()
when not: make_fsdp_loss(mesh) is right, the module-level fsdp_loss only on the 8-device mesh.

loses: fsdp_loss_is_a_shard_map_right_on_every_mesh: jax.device_count()
"""
import jax
import jax.numpy as jnp
from jax import lax
from jax.sharding import PartitionSpec as P


def make_fsdp_loss(mesh):
    n = mesh.shape["fsdp"] if mesh is not None else jax.device_count()

    def local(p, x, y):
        w1 = lax.all_gather(p["w1"], "fsdp", tiled=True)
        w2 = lax.all_gather(p["w2"], "fsdp", tiled=True)
        return lax.psum(jnp.mean((jax.nn.relu(x @ w1) @ w2 - y) ** 2), "fsdp") / n

    rows = P("fsdp", None)
    return jax.shard_map(local, mesh=mesh, in_specs=({"w1": rows, "w2": rows}, rows, rows), out_specs=P())


fsdp_loss = make_fsdp_loss(None)
