"""Saves nnx.Optimizer's step but not its opt_state: Adam's moments and the schedule's counts start
again from zero (the warmup restarts) while optimizer.step says otherwise.

loses: step_and_schedule_continue: schedule reads its position
loses: checkpoint_is_an_orbax_folder_holding_the_whole_state: Adam's moments
"""
import jax
import orbax.checkpoint as ocp
from flax import nnx


def pack(model, optimizer, rngs):
    return {"model": nnx.state(model), "step": optimizer.step, "rngs": nnx.state(rngs)}


def save(path, model, optimizer, rngs):
    checkpointer = ocp.StandardCheckpointer()
    checkpointer.save(path, pack(model, optimizer, rngs))
    checkpointer.wait_until_finished()


def restore(path, make_state, mesh, shardings):
    model, optimizer, rngs = nnx.eval_shape(make_state)
    template = jax.tree.map(lambda leaf: jax.ShapeDtypeStruct(leaf.shape, leaf.dtype, sharding=shardings(leaf)),
                            pack(model, optimizer, rngs))
    state = ocp.StandardCheckpointer().restore(path, template)
    nnx.update(model, state["model"])
    fresh = nnx.state(optimizer)  # a new optimizer state: zero moments, counts at 0
    nnx.update(optimizer, jax.tree.map(lambda a: jax.device_put(jax.numpy.zeros(a.shape, a.dtype), shardings(a)),
                                       fresh))
    optimizer.step.set_value(state["step"].get_value() if hasattr(state["step"], "get_value") else state["step"])
    nnx.update(rngs, state["rngs"])
    return model, optimizer, rngs
