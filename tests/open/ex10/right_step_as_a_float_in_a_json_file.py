"""The optimizer's step kept beside the arrays as a float in a JSON file: as
tests/open/ex10/right_step_as_a_string_in_a_json_file, with meta.json holding {"step": 4.0}
(float(optimizer.step), as a logger that writes every metric as a float does); restore sets optimizer.step
from int(meta["step"]).

Graded 11/22 in both modes (with and without --sandbox) at seeds 20261130, 7, 0 and 31031; should be 22/22.
It loses restore_reads_each_shard_straight_onto_its_device: "restore from there handed back 1 leaves (e.g.
optimizer.step) as they were saved before": the rewrite moves only JSON ints (checks.counted_on's numbers()
skips a float equal to a saved counter), so the rewritten checkpoint says step 4.0 beside counts of 11.
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
