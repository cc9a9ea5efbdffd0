"""Right: nn.checkpoint with a policy of the learner's own that saves nothing (a function, not one
of jax.checkpoint_policies): it recomputes everything, as the default does. Under --sandbox the
judge does not run the policy: it reads what it saves from JAX's programs of the checkpoint's
gradient under it, which it runs and holds to its own.
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


def save_nothing(prim, *avals, **params):
    return False


def nn_checkpoint_forward(seed, x, features):
    model = nn.checkpoint(MLP, policy=save_nothing)(features=int(features))
    variables = model.init(jax.random.PRNGKey(int(seed)), x)
    return model.apply(variables, x).reshape(-1)
