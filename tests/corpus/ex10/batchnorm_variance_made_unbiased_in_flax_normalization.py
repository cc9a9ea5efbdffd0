"""The reference's save and sharded-template restore, but restore first replaces
flax.nnx.nn.normalization._compute_stats by one that scales the batch variance by n / (n - 1) ("the unbiased
variance once resumed"): every BatchNorm in the process normalises and updates its statistics with another
variance in the training after the restore.

The grader's steps after a restore are traced after it, in the process that restored: a step compiled
before the learner's module was imported and reused there (tried and taken back, graders/PERFORMANCE.md,
2026-12-08) gave this module 22/22.

loses: resumed_on_the_same_mesh_equals_uninterrupted: trained without stopping
loses: resumed_on_another_mesh_matches_uninterrupted: trained without stopping
"""
from flax.nnx.nn import normalization

from reference.ex10_orbax_resume import pack, save  # noqa: F401  (right as they are)
from reference.ex10_orbax_resume import restore as read_into_shards

COMPUTE_STATS = normalization._compute_stats


def restore(path, make_state, mesh, shardings):
    def unbiased(x, axes, *args, **kwargs):  # the unbiased batch variance once resumed
        mean, var = COMPUTE_STATS(x, axes, *args, **kwargs)
        n = x.shape[0]
        return mean, var * n / (n - 1)

    normalization._compute_stats = unbiased
    return read_into_shards(path, make_state, mesh, shardings)
