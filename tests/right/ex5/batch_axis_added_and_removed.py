"""Right: x given a batch axis of one, x[None, :], for init and apply, and the output's row taken
back, out[0]; the checkpointed class made by a closure that is called once per call.
"""

import jax
import flax.linen as nn


def checkpointed_mlp():
    class MLP(nn.Module):
        features: int

        @nn.compact
        def __call__(self, x):
            x = nn.Dense(self.features)(x)
            x = nn.relu(x)
            return nn.Dense(self.features)(x)

    return nn.checkpoint(MLP)


def nn_checkpoint_forward(seed, x, features):
    model = checkpointed_mlp()(features=int(features))
    batch = x[None, :]
    variables = model.init(jax.random.PRNGKey(int(seed)), batch)
    return model.apply(variables, batch)[0]
