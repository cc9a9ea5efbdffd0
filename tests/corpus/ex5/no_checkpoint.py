"""The right MLP, never wrapped with nn.checkpoint: right numbers, nothing checkpointed.

loses: forward_holds_remat2: your model is not checkpointed
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
    return model.apply(variables, x).reshape(-1)
