"""Exercise 3 without the technique: every number right, no shard_map (jit's own sharding places
the work). Graded honestly it earns the numeric checks and what jit's sharding happens to give."""
import jax
import jax.numpy as jnp


def _loss(p, x, y):
    return jnp.mean((jax.nn.relu(x @ p["w1"]) @ p["w2"] - y) ** 2)


def make_fsdp_loss(mesh):
    return jax.jit(_loss)


fsdp_loss = make_fsdp_loss(None)
