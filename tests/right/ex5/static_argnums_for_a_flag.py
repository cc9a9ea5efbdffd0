"""Right: __call__ takes a static Python flag (deterministic: bool, as a model with dropout would),
so the class is wrapped with nn.checkpoint(MLP, static_argnums=(2,)) (self is argument 0, x is 1);
the flag is passed positionally to init and apply.
"""
import jax
import flax.linen as nn


class MLP(nn.Module):
    features: int

    @nn.compact
    def __call__(self, x, deterministic: bool):
        h = nn.relu(nn.Dense(self.features)(x))
        if not deterministic:
            h = h * 1.0  # no dropout in this exercise; the flag only selects a Python branch
        return nn.Dense(self.features)(h)


def nn_checkpoint_forward(seed, x, features):
    model = nn.checkpoint(MLP, static_argnums=(2,))(features=int(features))
    variables = model.init(jax.random.PRNGKey(int(seed)), x, True)
    return model.apply(variables, x, True).reshape(-1)
