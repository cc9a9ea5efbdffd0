"""Splits the key first and initialises with the second half, as in a training loop.

loses: output_matches_unwrapped_mlp: jax.random.split(PRNGKey(seed))[1]
"""
import jax
import flax.linen as nn

from reference.ex5_linen_checkpoint import MLP  # right as they are


def nn_checkpoint_forward(seed, x, features):
    model = nn.checkpoint(MLP)(features=int(features))
    _, init_key = jax.random.split(jax.random.PRNGKey(int(seed)))
    variables = model.init(init_key, x)
    return model.apply(variables, x).reshape(-1)
