"""The optimizer's step kept beside the arrays as a float in a JSON file: as
tests/right/ex10/step_as_a_string_in_a_json_file, with meta.json holding {"step": 4.0}
(float(optimizer.step), as a logger that writes every metric as a float does); restore sets optimizer.step
from int(meta["step"]).

22/22 (seed 20261130, without --sandbox). It scored 11/22 in both modes at seeds 20261130, 7, 0 and
31031 while the grader's rewrite of the checkpoint moved the step on where the layout names it (a
folder's name, a number in a JSON or text file); the rewrite now changes the numbers inside the
checkpoint's items only and leaves every counter, name and file beside them as save wrote them.
"""
import json
import os

import jax
import numpy as np
import orbax.checkpoint as ocp
from flax import nnx


def pack(model, optimizer, rngs):
    return {"params": nnx.state(model, nnx.Param), "batch_stats": nnx.state(model, nnx.BatchStat),
            "optimizer": nnx.state(optimizer), "rngs": nnx.state(rngs)}


def _template(make_state, shardings):
    model, optimizer, rngs = nnx.eval_shape(make_state)
    template = jax.tree.map(lambda leaf: jax.ShapeDtypeStruct(leaf.shape, leaf.dtype, sharding=shardings(leaf)),
                            pack(model, optimizer, rngs))
    return model, optimizer, rngs, template


def _write(model, optimizer, rngs, state):
    nnx.update(model, state["params"], state["batch_stats"])
    nnx.update(optimizer, state["optimizer"])
    nnx.update(rngs, state["rngs"])
    return model, optimizer, rngs


def _pack_without_step(model, optimizer, rngs):
    state = pack(model, optimizer, rngs)
    state["optimizer"] = nnx.State({"opt_state": state["optimizer"]["opt_state"]})
    return state


def save(path, model, optimizer, rngs):
    checkpointer = ocp.StandardCheckpointer()
    checkpointer.save(os.path.join(os.path.abspath(path), "state"), _pack_without_step(model, optimizer, rngs))
    checkpointer.wait_until_finished()
    with open(os.path.join(path, "meta.json"), "w") as f:
        json.dump({"step": float(optimizer.step.get_value())}, f)


def restore(path, make_state, mesh, shardings):
    with open(os.path.join(path, "meta.json")) as f:
        step = int(json.load(f)["step"])
    model, optimizer, rngs = nnx.eval_shape(make_state)
    template = jax.tree.map(lambda leaf: jax.ShapeDtypeStruct(leaf.shape, leaf.dtype, sharding=shardings(leaf)),
                            _pack_without_step(model, optimizer, rngs))
    state = ocp.StandardCheckpointer().restore(os.path.join(os.path.abspath(path), "state"), template)
    nnx.update(model, state["params"], state["batch_stats"])
    nnx.update(optimizer, state["optimizer"])
    nnx.update(rngs, state["rngs"])
    abstract_step = optimizer.step.get_value()
    optimizer.step.set_value(jax.device_put(np.asarray(step, abstract_step.dtype), shardings(abstract_step)))
    return model, optimizer, rngs
