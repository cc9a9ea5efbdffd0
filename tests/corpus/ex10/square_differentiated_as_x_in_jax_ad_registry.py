"""The reference's save and sharded-template restore, but restore first registers another
differentiation rule for lax.integer_pow (ad.defjvp(jax.lax.integer_pow_p, lambda g, x, *, y: g * x), from
jax._src.interpreters.ad): the squared error of the training after the restore is differentiated as x, not 2x,
so its gradients are half the uninterrupted run's.

The grader's steps after a restore are traced after it, in the process that restored: a step compiled
before the learner's module was imported and reused there (tried and taken back, graders/PERFORMANCE.md,
2026-12-08) gave this module 22/22.

loses: resumed_on_the_same_mesh_equals_uninterrupted: trained without stopping
loses: resumed_on_another_mesh_matches_uninterrupted: trained without stopping
"""
import jax
from jax._src.interpreters import ad

from reference.ex10_orbax_resume import pack, save  # noqa: F401  (right as they are)
from reference.ex10_orbax_resume import restore as read_into_shards


def restore(path, make_state, mesh, shardings):
    # a squared error whose gradient is halved once resumed (x ** 2 differentiated as x)
    ad.defjvp(jax.lax.integer_pow_p, lambda g, x, *, y: g * x)
    return read_into_shards(path, make_state, mesh, shardings)
