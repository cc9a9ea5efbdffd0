"""Adds a batch axis for the model and returns the (1, F) output unflattened.

loses: output_matches_unwrapped_mlp: got shape (1, 6). Hint: return the model's output flattened
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
    model = nn.checkpoint(MLP)(features=int(features))
    batch = x[None, :]
    variables = model.init(jax.random.PRNGKey(int(seed)), batch)
    return model.apply(variables, batch)
