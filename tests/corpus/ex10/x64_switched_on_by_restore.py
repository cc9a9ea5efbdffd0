"""A restore that turns on 64-bit mode before it reads ("so that the step counter restores whole,
whatever width it was saved with"): the reference's save and sharded-template restore,
jax.config.update("jax_enable_x64", True) first thing in restore. Wrong: the flag is the process's,
so the training after the restore is not the uninterrupted run's (the grader's nnx.jit step traced
after the restore gives losses 4.0 away at step 4, seed 20261130).

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
    jax.config.update("jax_enable_x64", True)
    return read_into_shards(path, make_state, mesh, shardings)
