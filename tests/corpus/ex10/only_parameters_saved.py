"""Saves the parameters only, as a checkpoint for inference would, and resumes from a fresh
optimizer, fresh BatchNorm statistics and a fresh dropout stream.

loses: step_and_schedule_continue: only the parameters were saved
loses: batchnorm_statistics_continue: no BatchNorm statistics were saved
loses: dropout_stream_continues: the RNG was not saved
loses: checkpoint_is_an_orbax_folder_holding_the_whole_state: With no optimizer state
loses: resumed_on_the_same_mesh_equals_uninterrupted: already differs from what was saved
loses: resumed_on_another_mesh_matches_uninterrupted: already differs from what was saved
"""
import jax
import orbax.checkpoint as ocp
from flax import nnx


def pack(model, optimizer, rngs):
    return {"params": nnx.state(model, nnx.Param)}


def save(path, model, optimizer, rngs):
    checkpointer = ocp.StandardCheckpointer()
    checkpointer.save(path, pack(model, optimizer, rngs))
    checkpointer.wait_until_finished()


def restore(path, make_state, mesh, shardings):
    model, optimizer, rngs = nnx.eval_shape(make_state)
    template = jax.tree.map(lambda leaf: jax.ShapeDtypeStruct(leaf.shape, leaf.dtype, sharding=shardings(leaf)),
                            pack(model, optimizer, rngs))
    params = ocp.StandardCheckpointer().restore(path, template)["params"]
    model, optimizer, rngs = make_state()  # the rest as a new job starts
    nnx.update(model, params)
    return model, optimizer, rngs
