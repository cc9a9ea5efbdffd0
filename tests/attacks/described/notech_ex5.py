"""Exercise 5 without the technique: every number right, no checkpoint (the MLP is applied as it
is). Graded honestly it earns the numeric checks and nothing of the technique."""
import jax
import flax.linen as nn


class MLP(nn.Module):
    features: int

    @nn.compact
    def __call__(self, x):
        h = nn.relu(nn.Dense(self.features)(x))  # Dense_0: Flax names layers as they are made
        return nn.Dense(self.features)(h)


def nn_checkpoint_forward(seed, x, features):
    model = MLP(features=int(features))
    return model.apply(model.init(jax.random.PRNGKey(int(seed)), x), x).reshape(-1)
