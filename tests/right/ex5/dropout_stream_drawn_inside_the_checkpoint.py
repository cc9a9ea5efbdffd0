"""Right: the reference's checkpointed class, its hidden layer multiplied by a dropout mask of
keep probability 1.0 (every unit kept: the reference's numbers) drawn with self.make_rng("dropout")
inside the checkpoint; apply is given a "dropout" stream, a typed key folded from the seed.

Full marks (14/14 with and without --sandbox at seeds 20261130, 7 and 0): the stream's key enters
the lifted checkpoint as an input of its body.
"""

import jax
import flax.linen as nn


class MLP(nn.Module):
    features: int

    @nn.compact
    def __call__(self, x):
        x = nn.Dense(self.features)(x)
        x = nn.relu(x)
        keep = jax.random.bernoulli(self.make_rng("dropout"), 1.0, x.shape)  # dropout off for now
        x = x * keep
        return nn.Dense(self.features)(x)


def nn_checkpoint_forward(seed, x, features):
    checkpointed = nn.checkpoint(MLP)  # the class is transformed, then instantiated
    model = checkpointed(features=int(features))
    params_key, dropout_key = jax.random.split(jax.random.PRNGKey(int(seed)))
    variables = model.init({"params": jax.random.PRNGKey(int(seed)), "dropout": dropout_key}, x)
    return model.apply(variables, x, rngs={"dropout": jax.random.fold_in(jax.random.key(int(seed)), 1)}).reshape(-1)
