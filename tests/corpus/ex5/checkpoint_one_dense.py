"""Checkpoints only the first Dense layer instead of the MLP class.

loses: checkpoint_wraps_whole_mlp_class: none holds both Dense layers
"""
import jax
import flax.linen as nn


class MLP(nn.Module):
    features: int

    @nn.compact
    def __call__(self, x):
        x = nn.checkpoint(nn.Dense)(self.features)(x)
        x = nn.relu(x)
        return nn.Dense(self.features)(x)


def nn_checkpoint_forward(seed, x, features):
    model = MLP(features=int(features))
    variables = model.init(jax.random.PRNGKey(int(seed)), x)
    return model.apply(variables, x).reshape(-1)
