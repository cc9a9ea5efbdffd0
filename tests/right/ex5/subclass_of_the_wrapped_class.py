"""Right: a subclass of the checkpointed class (class CheckpointedMLP(nn.checkpoint(MLP))), applied
through a bound module, model.bind(variables)(x), instead of model.apply; the output flattened
with jnp.ravel.
"""

import jax
import jax.numpy as jnp
import flax.linen as nn


class MLP(nn.Module):
    features: int

    @nn.compact
    def __call__(self, x):
        hidden = nn.relu(nn.Dense(self.features)(x))
        return nn.Dense(self.features)(hidden)


class CheckpointedMLP(nn.checkpoint(MLP)):
    """The MLP whose calls are rematerialised in the backward pass."""


def nn_checkpoint_forward(seed, x, features):
    model = CheckpointedMLP(int(features))
    variables = model.init(jax.random.PRNGKey(int(seed)), x)
    return jnp.ravel(model.bind(variables)(x))
