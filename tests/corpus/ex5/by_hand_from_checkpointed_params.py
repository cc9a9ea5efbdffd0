"""Initialises nn.checkpoint(MLP) for its parameters, then computes the MLP by hand with jnp from
them: the checkpointed model is never applied, so nothing is checkpointed.

loses: parameter_tree_is_dense_0_dense_1: no Flax Linen module was applied to parameters
loses: forward_holds_remat2: no nn.Dense layer was applied while your function ran
technique: none (every number right, the technique not doing the work)
"""
import jax
import jax.numpy as jnp
import flax.linen as nn


class MLP(nn.Module):
    features: int

    @nn.compact
    def __call__(self, x):
        x = nn.Dense(self.features)(x)
        x = nn.relu(x)
        return nn.Dense(self.features)(x)


def nn_checkpoint_forward(seed, x, features):
    model = nn.checkpoint(MLP)(features=int(features))
    p = model.init(jax.random.PRNGKey(int(seed)), x)["params"]
    h = jnp.maximum(x @ p["Dense_0"]["kernel"] + p["Dense_0"]["bias"], 0.0)
    return (h @ p["Dense_1"]["kernel"] + p["Dense_1"]["bias"]).reshape(-1)
