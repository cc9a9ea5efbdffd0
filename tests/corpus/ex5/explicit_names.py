"""Names its layers fc1/fc2: other parameter names and other seeded values.

loses: parameter_tree_is_dense_0_dense_1: Explicit layer names change the parameter names
"""
import jax
import flax.linen as nn


class MLP(nn.Module):
    features: int

    @nn.compact
    def __call__(self, x):
        x = nn.Dense(self.features, name="fc1")(x)
        x = nn.relu(x)
        return nn.Dense(self.features, name="fc2")(x)


def nn_checkpoint_forward(seed, x, features):
    model = nn.checkpoint(MLP)(features=int(features))
    variables = model.init(jax.random.PRNGKey(int(seed)), x)
    return model.apply(variables, x).reshape(-1)
