"""Right: the class checkpointed twice, nn.checkpoint(nn.checkpoint(MLP)), both with the default
policy: a remat2 inside a remat2 (saves nothing, as one does).
"""
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
    model = nn.checkpoint(nn.checkpoint(MLP))(features=int(features))
    variables = model.init(jax.random.PRNGKey(int(seed)), x)
    return model.apply(variables, x).reshape(-1)
