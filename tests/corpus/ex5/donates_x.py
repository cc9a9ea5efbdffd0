"""Jits apply with x donated to save memory: the caller's x is deleted.

loses: x_is_unchanged: it was donated
"""
import jax
import flax.linen as nn

from reference.ex5_linen_checkpoint import MLP  # right as they are


def nn_checkpoint_forward(seed, x, features):
    model = nn.checkpoint(MLP)(features=int(features))
    variables = model.init(jax.random.PRNGKey(int(seed)), x)
    return jax.jit(model.apply, donate_argnums=1)(variables, x).reshape(-1)
