"""Right: the forward pass as one jitted function of (key, x) with features static, whose apply
runs under jax.vmap over a batch axis of one added to x; seed and features converted with int()
outside the jit, as they must be (a traced seed cannot be converted).
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


@functools.partial(jax.jit, static_argnums=2)
def _forward(key, x, features):
    model = nn.checkpoint(MLP)(features=features)
    variables = model.init(key, x)
    batched = jax.vmap(model.apply, in_axes=(None, 0))(variables, x[None])
    return batched.reshape(-1)


def nn_checkpoint_forward(seed, x, features):
    return _forward(jax.random.PRNGKey(int(seed)), x, int(features))
