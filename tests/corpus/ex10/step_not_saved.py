"""Saves the optimizer's opt_state (Adam's moments, the schedule's counts) but not nnx.Optimizer's
own step, which restarts at 0.

loses: step_and_schedule_continue: the step was not saved
loses: resumed_on_the_same_mesh_equals_uninterrupted: optimizer.step
"""
import jax
import orbax.checkpoint as ocp
from flax import nnx


def pack(model, optimizer, rngs):
    return {"params": nnx.state(model, nnx.Param), "batch_stats": nnx.state(model, nnx.BatchStat),
            "opt_state": nnx.state(optimizer)["opt_state"], "rngs": nnx.state(rngs)}


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
    nnx.update(optimizer, {"opt_state": state["opt_state"]})
    optimizer.step.set_value(jax.device_put(jax.numpy.zeros((), jax.numpy.uint32), shardings(optimizer.step)))
    nnx.update(rngs, state["rngs"])
    return model, optimizer, rngs
