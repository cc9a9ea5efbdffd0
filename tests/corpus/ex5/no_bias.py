"""Dense layers without bias (the default bias starts at zero, so the output is still right).

loses: parameter_tree_is_dense_0_dense_1: the layer has no bias
"""
import jax
import flax.linen as nn


class MLP(nn.Module):
    features: int

    @nn.compact
    def __call__(self, x):
        x = nn.Dense(self.features, use_bias=False)(x)
        x = nn.relu(x)
        return nn.Dense(self.features, use_bias=False)(x)


def nn_checkpoint_forward(seed, x, features):
    model = nn.checkpoint(MLP)(features=int(features))
    variables = model.init(jax.random.PRNGKey(int(seed)), x)
    return model.apply(variables, x).reshape(-1)
