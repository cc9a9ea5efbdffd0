"""Returns nn.checkpoint(MLP)'s value with the gradient of an unwrapped twin:
stop_gradient(checkpointed) + twin - stop_gradient(twin). Forward through the checkpoint,
backward around it.

loses: output_and_gradient_go_through_nn_checkpoint: a second model beside it that carries the gradient
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
    sg = jax.lax.stop_gradient
    return (sg(y) + z - sg(z)).reshape(-1)
