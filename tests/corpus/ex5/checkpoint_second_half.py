"""Checkpoints a block holding the ReLU and the second Dense layer; the first Dense layer runs
outside nn.checkpoint, so its activations are stored for the backward pass.

loses: nn_checkpoint_wraps_whole_mlp: only the second Dense layer runs inside nn.checkpoint
"""
import jax
import flax.linen as nn


class Head(nn.Module):
    features: int

    @nn.compact
    def __call__(self, h):
        return nn.Dense(self.features)(nn.relu(h))


class MLP(nn.Module):
    features: int

    @nn.compact
    def __call__(self, x):
        return nn.checkpoint(Head)(self.features)(nn.Dense(self.features)(x))


def nn_checkpoint_forward(seed, x, features):
    model = MLP(features=int(features))
    variables = model.init(jax.random.PRNGKey(int(seed)), x)
    return model.apply(variables, x).reshape(-1)
