"""Right: init and apply each compiled with jax.jit (the checkpoint is then inside a jitted
program), the ReLU written as jnp.maximum(h, 0.0), the output flattened with jnp.reshape.
"""

import jax
import jax.numpy as jnp
import flax.linen as nn


class MLP(nn.Module):
    features: int

    @nn.compact
    def __call__(self, x):
        h = nn.Dense(self.features)(x)
        return nn.Dense(self.features)(jnp.maximum(h, 0.0))


def nn_checkpoint_forward(seed, x, features):
    model = nn.checkpoint(MLP)(features=int(features))
    variables = jax.jit(model.init)(jax.random.PRNGKey(int(seed)), x)
    out = jax.jit(model.apply)(variables, x)
    return jnp.reshape(out, (-1,))
