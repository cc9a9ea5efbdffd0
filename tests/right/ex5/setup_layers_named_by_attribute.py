"""Right: the MLP written with setup() instead of @nn.compact. Its layers are attributes named
Dense_0 and Dense_1, which are the names Flax gives them and folds into their keys, so the
parameters (and their values) are the compact MLP's; ReLU spelled jax.nn.relu; the class wrapped
with nn.remat, the same function as nn.checkpoint.
"""

import jax
import flax.linen as nn


class MLP(nn.Module):
    features: int

    def setup(self):
        self.Dense_0 = nn.Dense(self.features)
        self.Dense_1 = nn.Dense(self.features)

    def __call__(self, x):
        return self.Dense_1(jax.nn.relu(self.Dense_0(x)))


def nn_checkpoint_forward(seed, x, features):
    model = nn.remat(MLP)(features=int(features))
    variables = model.init(jax.random.PRNGKey(int(seed)), x)
    return model.apply(variables, x).reshape(-1)
