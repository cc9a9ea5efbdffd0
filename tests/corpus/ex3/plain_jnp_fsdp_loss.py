"""make_fsdp_loss is right, but the module-level fsdp_loss is the plain single-device loss.

loses: fsdp_loss_is_a_shard_map_right_on_every_mesh: not by a shard_map
"""
import jax
import jax.numpy as jnp

from reference.ex3_fsdp_shard_map import make_fsdp_loss  # noqa: F401


def fsdp_loss(p, x, y):
    return jnp.mean((jax.nn.relu(x @ p["w1"]) @ p["w2"] - y) ** 2)
