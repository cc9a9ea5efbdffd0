"""nn.checkpoint(MLP) only when x is a concrete array; under a trace (jax.grad, jax.jit), the only
place a checkpoint matters, the plain MLP: eager calls are checkpointed, gradients are not.

loses: forward_holds_remat2: the traced function holds no remat2
technique: none (every number right, the technique not doing the work)
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
    traced = isinstance(x, jax.core.Tracer)
    model = (MLP if traced else nn.checkpoint(MLP))(features=int(features))
    variables = model.init(jax.random.PRNGKey(int(seed)), x)
    return model.apply(variables, x).reshape(-1)
