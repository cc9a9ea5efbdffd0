"""Checkpoints the function model.apply with jax.checkpoint; the module is not wrapped.

loses: output_and_gradient_go_through_nn_checkpoint: wraps a function around the whole model call
loses: nn_checkpoint_wraps_whole_mlp: jax.checkpoint(model.apply)
technique: none (every number right, the technique not doing the work)
"""
import jax

from reference.ex5_linen_checkpoint import MLP  # right as they are


def nn_checkpoint_forward(seed, x, features):
    model = MLP(features=int(features))
    variables = model.init(jax.random.PRNGKey(int(seed)), x)
    return jax.checkpoint(model.apply)(variables, x).reshape(-1)
