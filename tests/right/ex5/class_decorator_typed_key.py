"""Right: nn.checkpoint used as a class decorator (the class is wrapped where it is defined, so
the name MLP already holds the checkpointed class), initialised with a typed key,
jax.random.key(int(seed)), which draws the same numbers as jax.random.PRNGKey(int(seed)).
"""

import jax
import flax.linen as nn


@nn.checkpoint
class MLP(nn.Module):
    features: int

    @nn.compact
    def __call__(self, x):
        x = nn.Dense(self.features)(x)
        x = nn.relu(x)
        return nn.Dense(self.features)(x)


def nn_checkpoint_forward(seed, x, features):
    model = MLP(features=int(features))
    variables = model.init(jax.random.key(int(seed)), x)
    return model.apply(variables, x).reshape(-1)
