"""Right: Linen's lifted checkpoint put on the MLP's __call__ method (@nn.checkpoint above
@nn.compact) rather than on the class: the same lifted transform around the same call.
"""

import jax
import flax.linen as nn


class MLP(nn.Module):
    features: int

    @nn.checkpoint
    @nn.compact
    def __call__(self, x):
        x = nn.Dense(self.features)(x)
        x = nn.relu(x)
        return nn.Dense(self.features)(x)


def nn_checkpoint_forward(seed, x, features):
    model = MLP(features=int(features))
    variables = model.init(jax.random.PRNGKey(int(seed)), x)
    return model.apply(variables, x).reshape(-1)
