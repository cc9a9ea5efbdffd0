"""Right: nn_checkpoint_forward itself decorated with jax.jit, seed and features static (hashable,
floats included, converted with int() inside the trace).
"""
import functools

import jax
import flax.linen as nn


class MLP(nn.Module):
    features: int

    @nn.compact
    def __call__(self, x):
        x = nn.Dense(self.features)(x)
        x = nn.relu(x)
        return nn.Dense(self.features)(x)


@functools.partial(jax.jit, static_argnums=(0, 2))
def nn_checkpoint_forward(seed, x, features):
    model = nn.checkpoint(MLP)(features=int(features))
    variables = model.init(jax.random.PRNGKey(int(seed)), x)
    return model.apply(variables, x).reshape(-1)
