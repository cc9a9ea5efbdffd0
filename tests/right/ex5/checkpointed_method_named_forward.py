"""Right: the MLP's forward pass is a compact method named forward, checkpointed with
nn.checkpoint(MLP, methods=["forward"]) and called with method="forward" at init and apply.
"""
import jax
import flax.linen as nn


class MLP(nn.Module):
    features: int

    @nn.compact
    def forward(self, x):
        x = nn.Dense(self.features)(x)
        x = nn.relu(x)
        return nn.Dense(self.features)(x)


def nn_checkpoint_forward(seed, x, features):
    model = nn.checkpoint(MLP, methods=["forward"])(features=int(features))
    variables = model.init(jax.random.PRNGKey(int(seed)), x, method="forward")
    return model.apply(variables, x, method="forward").reshape(-1)
