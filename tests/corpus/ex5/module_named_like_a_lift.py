"""Names a submodule "remat()", the way Flax's lift marks a scope, and checkpoints model.apply
with jax.checkpoint: a name is not a lifted transform.

loses: output_and_gradient_go_through_nn_checkpoint: not inside Linen's nn.checkpoint
"""
import jax
import flax.linen as nn

from reference.ex5_linen_checkpoint import MLP  # right as it is


class Outer(nn.Module):
    features: int

    @nn.compact
    def __call__(self, x):
        return MLP(self.features, name="remat()")(x)


def nn_checkpoint_forward(seed, x, features):
    model = Outer(features=int(features))
    variables = model.init(jax.random.PRNGKey(int(seed)), x)
    return jax.checkpoint(model.apply)(variables, x).reshape(-1)
