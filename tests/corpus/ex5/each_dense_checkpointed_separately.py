"""Checkpoints each Dense layer on its own, nn.checkpoint(nn.Dense) twice (named Dense_0 and
Dense_1, so the numbers stay right), with the ReLU between them outside both: a lone Dense layer's
backward pass needs only its input and kernel, so neither checkpoint recomputes anything.

loses: forward_holds_remat2: your checkpoint holds only the first Dense layer and the second Dense layer
loses: output_and_gradient_go_through_nn_checkpoint: recomputes nothing and saves no memory
loses: nn_checkpoint_wraps_whole_mlp: recomputes nothing and saves no memory
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
        return nn.checkpoint(nn.Dense)(self.features, name="Dense_1")(x)


def nn_checkpoint_forward(seed, x, features):
    model = MLP(features=int(features))
    variables = model.init(jax.random.PRNGKey(int(seed)), x)
    return model.apply(variables, x).reshape(-1)
