"""Right, otherwise than the reference: the shard_map made with check_vma=False, the local losses
summed with lax.psum and divided by lax.axis_size, the gathers written as one helper."""
import jax
import jax.numpy as jnp
from jax import lax
from jax.sharding import PartitionSpec as P


def _gather(w):
    return lax.all_gather(w, "fsdp", tiled=True)


def _local(p, x, y):
    w1, w2 = _gather(p["w1"]), _gather(p["w2"])
    err = jax.nn.relu(x @ w1) @ w2 - y
    return lax.psum(jnp.mean(err ** 2), "fsdp") / lax.axis_size("fsdp")


def make_fsdp_loss(mesh):
    rows = P("fsdp", None)
    return jax.shard_map(_local, mesh=mesh, in_specs=({"w1": rows, "w2": rows}, rows, rows), out_specs=P(),
                         check_vma=False)


fsdp_loss = make_fsdp_loss(None)
