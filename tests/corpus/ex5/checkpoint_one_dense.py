"""Checkpoints only the first Dense layer, keeping the layer names (so the numbers stay right):
a lone Dense layer's backward pass needs only its input and kernel, so nothing is recomputed.

loses: nn_checkpoint_wraps_whole_mlp: your checkpoint holds only the first Dense layer
loses: forward_holds_remat2: recomputes nothing and saves no memory
technique: none (every number right, the technique not doing the work)
"""
import jax
import flax.linen as nn


class MLP(nn.Module):
    features: int

    @nn.compact
    def __call__(self, x):
        x = nn.checkpoint(nn.Dense)(self.features, name="Dense_0")(x)
        x = nn.relu(x)
        return nn.Dense(self.features, name="Dense_1")(x)


def nn_checkpoint_forward(seed, x, features):
    model = MLP(features=int(features))
    variables = model.init(jax.random.PRNGKey(int(seed)), x)
    return model.apply(variables, x).reshape(-1)
