"""Returns the mean of nn.checkpoint(MLP)'s output and an unwrapped twin's: the same numbers,
but half of the output (and of the gradient) goes around the checkpoint.

loses: output_and_gradient_go_through_nn_checkpoint: averaged with another
technique: none (every number right, the technique not doing the work)
"""
import jax
import flax.linen as nn

from reference.ex5_linen_checkpoint import MLP  # right as they are


def nn_checkpoint_forward(seed, x, features):
    key = jax.random.PRNGKey(int(seed))
    checkpointed = nn.checkpoint(MLP)(features=int(features))
    twin = MLP(features=int(features))
    y = checkpointed.apply(checkpointed.init(key, x), x)
    z = twin.apply(twin.init(key, x), x)
    return (0.5 * y + 0.5 * z).reshape(-1)
