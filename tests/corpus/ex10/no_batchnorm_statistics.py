"""Saves the parameters, the optimizer and the RNG, but not BatchNorm's running statistics
(nnx.state(model, nnx.Param) leaves them out).

loses: batchnorm_statistics_continue: no BatchNorm statistics were saved
loses: checkpoint_is_an_orbax_folder_holding_the_whole_state: No BatchNorm statistics
loses: resumed_on_the_same_mesh_equals_uninterrupted: BatchNorm statistics
loses: resumed_on_another_mesh_matches_uninterrupted: BatchNorm statistics
"""
import jax
import orbax.checkpoint as ocp
from flax import nnx


def pack(model, optimizer, rngs):
    return {"params": nnx.state(model, nnx.Param), "optimizer": nnx.state(optimizer), "rngs": nnx.state(rngs)}


def save(path, model, optimizer, rngs):
    checkpointer = ocp.StandardCheckpointer()
    checkpointer.save(path, pack(model, optimizer, rngs))
    checkpointer.wait_until_finished()


def restore(path, make_state, mesh, shardings):
    model, optimizer, rngs = nnx.eval_shape(make_state)
    placed = lambda leaf: jax.ShapeDtypeStruct(leaf.shape, leaf.dtype, sharding=shardings(leaf))  # noqa: E731
    template = jax.tree.map(placed, pack(model, optimizer, rngs))
    state = ocp.StandardCheckpointer().restore(path, template)
    nnx.update(model, state["params"])
    # BatchNorm's statistics as make_state starts them, on the mesh
    stats = nnx.state(make_state()[0], nnx.BatchStat)
    nnx.update(model, jax.tree.map(lambda a: jax.device_put(a, shardings(a)), stats))
    nnx.update(optimizer, state["optimizer"])
    nnx.update(rngs, state["rngs"])
    return model, optimizer, rngs
