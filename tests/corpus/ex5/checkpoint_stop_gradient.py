"""Returns nn.checkpoint(MLP)'s output under jax.lax.stop_gradient: the value is right, but no
gradient reaches the checkpoint, so nothing is ever recomputed.

loses: output_and_gradient_go_through_nn_checkpoint: a stop_gradient on its result
technique: none (every number right, the technique not doing the work)
"""
import jax
import flax.linen as nn

from reference.ex5_linen_checkpoint import MLP  # right as they are


def nn_checkpoint_forward(seed, x, features):
    model = nn.checkpoint(MLP)(features=int(features))
    variables = model.init(jax.random.PRNGKey(int(seed)), x)
    return jax.lax.stop_gradient(model.apply(variables, x)).reshape(-1)
