"""Restores without shardings in the template and returns the arrays where Orbax put them: on the
devices the checkpoint was saved from, not on the mesh restore was given.

loses: restored_leaves_have_the_requested_shardings: on the mesh restore was given
loses: restore_reads_each_shard_straight_onto_its_device: which are not in the mesh restore was given
"""
import orbax.checkpoint as ocp
from flax import nnx

from reference.ex10_orbax_resume import pack, save  # noqa: F401  (right as they are)


def restore(path, make_state, mesh, shardings):
    model, optimizer, rngs = nnx.eval_shape(make_state)
    state = ocp.StandardCheckpointer().restore(path, pack(model, optimizer, rngs))
    nnx.update(model, state["params"], state["batch_stats"])
    nnx.update(optimizer, state["optimizer"])
    nnx.update(rngs, state["rngs"])
    return model, optimizer, rngs
