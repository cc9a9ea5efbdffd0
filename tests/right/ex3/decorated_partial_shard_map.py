"""Right, otherwise than the reference: jax.shard_map used as a decorator through functools.partial
inside make_fsdp_loss, the batch's loss a sum of squared errors over the global count."""
from functools import partial

import jax
import jax.numpy as jnp
from jax import lax
from jax.sharding import PartitionSpec as P


def make_fsdp_loss(mesh):
    rows = P("fsdp", None)

    @partial(jax.shard_map, mesh=mesh, in_specs=({"w1": rows, "w2": rows}, rows, rows), out_specs=P())
    def loss(p, x, y):
        w1 = lax.all_gather(p["w1"], "fsdp", tiled=True)
        w2 = lax.all_gather(p["w2"], "fsdp", tiled=True)
        sq = jnp.sum((jax.nn.relu(x @ w1) @ w2 - y) ** 2)
        return lax.psum(sq, "fsdp") / (x.shape[0] * lax.axis_size("fsdp") * y.shape[1])

    return jax.jit(loss)


fsdp_loss = make_fsdp_loss(None)
