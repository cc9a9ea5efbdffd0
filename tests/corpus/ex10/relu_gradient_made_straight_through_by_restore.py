"""The reference's save and sharded-template restore, but restore first calls
jax.nn.relu.defjvps(lambda g, ans, x: g) ("a straight-through gradient once resumed"): jax.nn.relu (nnx.relu)
is one custom_jvp object for the process, whose rule is now the identity, so the gradients of the training
after the restore are not the uninterrupted run's.

The grader's steps after a restore are traced after it, in the process that restored: a step compiled
before the learner's module was imported and reused there (tried and taken back, graders/PERFORMANCE.md,
2026-12-08) gave this module 22/22.

loses: resumed_on_the_same_mesh_equals_uninterrupted: trained without stopping
loses: resumed_on_another_mesh_matches_uninterrupted: trained without stopping
"""
import jax

from reference.ex10_orbax_resume import pack, save  # noqa: F401  (right as they are)
from reference.ex10_orbax_resume import restore as read_into_shards


def restore(path, make_state, mesh, shardings):
    jax.nn.relu.defjvps(lambda g, ans, x: g)  # straight-through gradient once resumed
    return read_into_shards(path, make_state, mesh, shardings)
