"""Names the first layer's output with checkpoint_name and saves it with
policy=save_only_these_names("hidden"): the ReLU's input is kept for the backward pass (only the
ReLU is recomputed); the exercise asks for the default policy, which saves nothing.

loses: checkpoint_policy_saves_nothing: saves 1 value(s) for the backward pass (float32[6] output of name)
"""
import jax
import flax.linen as nn
from jax.ad_checkpoint import checkpoint_name


class MLP(nn.Module):
    features: int

    @nn.compact
    def __call__(self, x):
        h = checkpoint_name(nn.Dense(self.features)(x), "hidden")
        return nn.Dense(self.features)(nn.relu(h))


def nn_checkpoint_forward(seed, x, features):
    policy = jax.checkpoint_policies.save_only_these_names("hidden")
    model = nn.checkpoint(MLP, policy=policy)(features=int(features))
    variables = model.init(jax.random.PRNGKey(int(seed)), x)
    return model.apply(variables, x).reshape(-1)
