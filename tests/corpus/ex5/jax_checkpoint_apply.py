"""Checkpoints the function model.apply with jax.checkpoint; init is not wrapped.

loses: checkpoint_wraps_whole_mlp_class: You checkpointed a function
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
    model = MLP(features=int(features))
    variables = model.init(jax.random.PRNGKey(int(seed)), x)
    return jax.checkpoint(model.apply)(variables, x).reshape(-1)
