"""Adds a batch axis for the model and returns the (1, F) output unflattened.

loses: output_matches_unwrapped_mlp: got shape (1, 6). Hint: return the model's output flattened
"""
import jax
import flax.linen as nn

from reference.ex5_linen_checkpoint import MLP  # right as they are


def nn_checkpoint_forward(seed, x, features):
    model = nn.checkpoint(MLP)(features=int(features))
    batch = x[None, :]
    variables = model.init(jax.random.PRNGKey(int(seed)), batch)
    return model.apply(variables, batch)
