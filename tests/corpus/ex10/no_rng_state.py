"""Saves the parameters, BatchNorm's statistics and the optimizer (the chapter's pack), but not
the RNG: the dropout stream starts again from make_state's.

loses: dropout_stream_continues: the RNG was not saved
loses: checkpoint_is_an_orbax_folder_holding_the_whole_state: With no RNG state
loses: resumed_on_the_same_mesh_equals_uninterrupted: the dropout stream
loses: resumed_on_another_mesh_matches_uninterrupted: the dropout stream
"""
import jax
import orbax.checkpoint as ocp
from flax import nnx


def pack(model, optimizer, rngs):
    return {"params": nnx.state(model, nnx.Param), "batch_stats": nnx.state(model, nnx.BatchStat),
            "optimizer": nnx.state(optimizer)}


def save(path, model, optimizer, rngs):
    checkpointer = ocp.StandardCheckpointer()
    checkpointer.save(path, pack(model, optimizer, rngs))
    checkpointer.wait_until_finished()


def restore(path, make_state, mesh, shardings):
    model, optimizer, rngs = nnx.eval_shape(make_state)
    template = jax.tree.map(lambda leaf: jax.ShapeDtypeStruct(leaf.shape, leaf.dtype, sharding=shardings(leaf)),
                            pack(model, optimizer, rngs))
    state = ocp.StandardCheckpointer().restore(path, template)
    nnx.update(model, state["params"], state["batch_stats"])
    nnx.update(optimizer, state["optimizer"])
    new = make_state()[2]  # the stream as a new job starts it: make_state's key, count 0
    nnx.update(rngs, jax.tree.map(lambda a: jax.device_put(a, shardings(a)), nnx.state(new)))
    return model, optimizer, rngs
