"""Right: Linen's lifted checkpoint of a function inside @nn.compact, nn.checkpoint(body)(self, x),
where body(mdl, x) builds the two Dense layers (a lifted transform of a function of the module,
not of the class; the layers are still named Dense_0 and Dense_1 in the MLP's scope).
"""
import jax
import flax.linen as nn


def body(mdl, x):
    h = nn.relu(nn.Dense(mdl.features)(x))
    return nn.Dense(mdl.features)(h)


class MLP(nn.Module):
    features: int

    @nn.compact
    def __call__(self, x):
        return nn.checkpoint(body)(self, x)


def nn_checkpoint_forward(seed, x, features):
    model = MLP(features=int(features))
    variables = model.init(jax.random.PRNGKey(int(seed)), x)
    return model.apply(variables, x).reshape(-1)
