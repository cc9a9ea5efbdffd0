"""Always initialises with PRNGKey(0).

loses: output_matches_unwrapped_mlp: initialised with PRNGKey(0), not PRNGKey(3)
"""
import jax
import flax.linen as nn

from reference.ex5_linen_checkpoint import MLP  # right as they are


def nn_checkpoint_forward(seed, x, features):
    model = nn.checkpoint(MLP)(features=int(features))
    variables = model.init(jax.random.PRNGKey(0), x)
    return model.apply(variables, x).reshape(-1)
