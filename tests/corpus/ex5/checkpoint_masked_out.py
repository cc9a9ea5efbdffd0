"""Selects between nn.checkpoint(MLP)'s output and an unwrapped MLP's with jnp.where(False, ...):
the checkpoint is live in the program, and never chosen.

loses: output_and_gradient_go_through_nn_checkpoint: masked out
technique: none (every number right, the technique not doing the work)
"""
import jax
import jax.numpy as jnp
import flax.linen as nn

from reference.ex5_linen_checkpoint import MLP  # right as they are


def nn_checkpoint_forward(seed, x, features):
    key = jax.random.PRNGKey(int(seed))
    decoy = nn.checkpoint(MLP)(features=int(features))
    unused = decoy.apply(decoy.init(key, x), x)
    model = MLP(features=int(features))
    return jnp.where(False, unused, model.apply(model.init(key, x), x)).reshape(-1)
