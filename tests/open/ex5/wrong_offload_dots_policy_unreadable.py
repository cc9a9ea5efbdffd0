"""WRONG but over-penalised: nn.checkpoint(MLP, policy=offload_dot_with_no_batch_dims("device",
"pinned_host")): the matrix products are kept for the backward pass (offloaded to the host) rather
than recomputed; the exercise asks for the default policy. Its program cannot be read, so every
technique check fails with "your program could not be read: your program holds a parameter of
kind MemorySpace" (tests/right/ex5/offload_policy_saving_nothing, save_and_offload_only_these_names
with no names, is read and gets 14/14).

Scored (seed 20261130): 5/14 without --sandbox, 5/14 with --sandbox; seed 7: 5/14 and 5/14.
Should score: 13/14, losing checkpoint_policy_saves_nothing only, as
tests/corpus/ex5/policy_dots_saveable (which saves the same products on the device) does; or
that and an honest message, if offloading is to cost more.
Why: graders/kit/program.py's encoding has no kind for a MemorySpace parameter (the offload
policy's destination, in the traced program), so the whole program is unreadable and the verdicts
speak of an unreadable program, not of the policy.
Grade: put this file as ex5_linen_checkpoint.py in a folder D; .venv/bin/python -m graders ex5 --solutions D -v --seed 20261130 [--sandbox]
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
