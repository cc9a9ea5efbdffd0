"""Checkpoints both functions, jax.checkpoint(model.init) and jax.checkpoint(model.apply), of an
unwrapped MLP: two remat2 that each hold the whole MLP, yet not Linen's lifted checkpoint.

loses: output_and_gradient_go_through_nn_checkpoint: wraps a function around the whole model call
technique: none (every number right, the technique not doing the work)
"""
import jax

from reference.ex5_linen_checkpoint import MLP  # right as they are


def nn_checkpoint_forward(seed, x, features):
    model = MLP(features=int(features))
    variables = jax.checkpoint(model.init)(jax.random.PRNGKey(int(seed)), x)
    return jax.checkpoint(model.apply)(variables, x).reshape(-1)
