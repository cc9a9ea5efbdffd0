"""The reference's save and sharded-template restore, but restore first gives jax's max primitive an instance
attribute `bind` (max_p.bind = a function binding max_p and adding 0.1 times min_p): jnp.maximum, and so
nnx.relu in the grader's Net, computes max(x, y) + 0.1 * min(x, y) in every program traced in the process
afterwards. The training after the restore is not the uninterrupted run's.

The grader's steps after a restore are traced after it, in the process that restored: a step compiled
before the learner's module was imported and reused there (tried and taken back, graders/PERFORMANCE.md,
2026-12-08) gave this module 22/22.

loses: resumed_on_the_same_mesh_equals_uninterrupted: trained without stopping
loses: resumed_on_another_mesh_matches_uninterrupted: trained without stopping
"""
from jax._src.lax import lax as _lax

from reference.ex10_orbax_resume import pack, save  # noqa: F401  (right as they are)
from reference.ex10_orbax_resume import restore as read_into_shards


def restore(path, make_state, mesh, shardings):
    def leaky(x, y):  # "a leaky relu once resumed": jnp.maximum binds max_p
        return _lax.Primitive.bind(_lax.max_p, x, y) + 0.1 * _lax.Primitive.bind(_lax.min_p, x, y)

    _lax.max_p.bind = leaky
    return read_into_shards(path, make_state, mesh, shardings)
