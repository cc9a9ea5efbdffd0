"""Right: nn.checkpoint with its default written out, policy=nothing_saveable (saves nothing,
like no policy), prevent_cse=True and static_argnums=(); seed and features converted once, up
front, with int(round(...)).
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
    seed, features = int(round(seed)), int(round(features))
    Checkpointed = nn.checkpoint(MLP, policy=jax.checkpoint_policies.nothing_saveable,
                                 prevent_cse=True, static_argnums=())
    model = Checkpointed(features=features)
    variables = model.init(jax.random.PRNGKey(seed), x)
    return model.apply(variables, x).reshape(features)
