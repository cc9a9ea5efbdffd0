"""Wraps an instance, nn.checkpoint(MLP(...)), instead of the class.

loses: output_matches_unwrapped_mlp: nn.checkpoint takes the module class, not an instance
"""
import jax
import flax.linen as nn

from reference.ex5_linen_checkpoint import MLP  # right as they are


def nn_checkpoint_forward(seed, x, features):
    model = nn.checkpoint(MLP(features=int(features)))
    variables = model.init(jax.random.PRNGKey(int(seed)), x)
    return model.apply(variables, x).reshape(-1)
