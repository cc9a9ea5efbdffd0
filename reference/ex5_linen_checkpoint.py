"""Exercise 5 (solution): a Linen MLP whose class is wrapped with nn.checkpoint."""

import jax
import flax.linen as nn


class MLP(nn.Module):
    features: int

    @nn.compact
    def __call__(self, x):
        x = nn.Dense(self.features)(x)
        x = nn.relu(x)
        return nn.Dense(self.features)(x)


def nn_checkpoint_forward(seed, x, features):
    checkpointed = nn.checkpoint(MLP)  # the class is transformed, then instantiated
    model = checkpointed(features=int(features))
    variables = model.init(jax.random.PRNGKey(int(seed)), x)
    return model.apply(variables, x).reshape(-1)
