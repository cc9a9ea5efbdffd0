"""A restore that switches JAX's random bits process-wide before it reads: a right CheckpointManager
save, a right sharded-template restore, and, first thing in restore,
jax.config.update("jax_threefry_partitionable", False) ("so that the dropout masks do not depend on
the mesh"). Wrong: the flag is the process's, so every dropout mask drawn after the restore has other
bits than the uninterrupted run's; the steps after a restore are not those of a job that never
stopped (a real resumed job, or the grader's nnx.jit step traced after the restore, gives losses 1.6
away at step 4).

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
    jax.config.update("jax_threefry_partitionable", False)
    return read_into_shards(path, make_state, mesh, shardings)
