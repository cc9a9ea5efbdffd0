"""jax.checkpoint(model.init_with_output) and jax.checkpoint(model.apply) of an unwrapped MLP:
its init remat2 has the very outputs Linen's lifted init has (the model's output and the
parameters), and its apply remat2 is the same program, yet no module is checkpointed.

loses: output_and_gradient_go_through_nn_checkpoint: not inside Linen's nn.checkpoint
technique: none (every number right, the technique not doing the work)
"""
import jax

from reference.ex5_linen_checkpoint import MLP  # right as they are


def nn_checkpoint_forward(seed, x, features):
    model = MLP(features=int(features))
    _, variables = jax.checkpoint(model.init_with_output)(jax.random.PRNGKey(int(seed)), x)
    return jax.checkpoint(model.apply)(variables, x).reshape(-1)
