"""nn.checkpoint(MLP, policy=offload_dot_with_no_batch_dims("device", "pinned_host")): the matrix
products are kept for the backward pass (offloaded to the host) rather than recomputed; the
exercise asks for the default policy, which saves nothing. As tests/corpus/ex5/policy_dots_saveable,
which keeps them on the device. (Red team; its program was unreadable: a MemorySpace.)

loses: checkpoint_policy_saves_nothing: saves 1 value(s) for the backward pass (float32[6] output of a matrix product (@, jnp.dot, jnp.einsum), offloaded to the host)
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
    policy = jax.checkpoint_policies.offload_dot_with_no_batch_dims("device", "pinned_host")
    model = nn.checkpoint(MLP, policy=policy)(features=int(features))
    variables = model.init(jax.random.PRNGKey(int(seed)), x)
    return model.apply(variables, x).reshape(-1)
