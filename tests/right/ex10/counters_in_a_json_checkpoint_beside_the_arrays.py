"""Two Orbax checkpoints in the folder at `path`: `path/state`, written by ocp.StandardCheckpointer
(every leaf of the state but the 0-d integer counters: the floats and the dropout key, keyed by path),
and `path/counters`, written by an ocp.Checkpointer of Orbax's JsonCheckpointHandler
(ocp.args.JsonSave of optimizer.step, the schedule's counts and the dropout stream's count as Python
ints). Restore reads both with Orbax (the sharded template for the arrays, ocp.args.JsonRestore for
the counters) and places each counter where shardings says: everything comes from the folder at
`path`. A second save to the same path raises (StandardCheckpointer: the destination exists).

A JSON checkpoint of its own beside the arrays counts as Orbax's metadata (checks.orbax_numbers)."""
import os

import jax
import numpy as np
import orbax.checkpoint as ocp
from flax import nnx


def pack(model, optimizer, rngs):
    return {"params": nnx.state(model, nnx.Param), "batch_stats": nnx.state(model, nnx.BatchStat),
            "optimizer": nnx.state(optimizer), "rngs": nnx.state(rngs)}


def _counter(leaf):
    return leaf.shape == () and jax.numpy.issubdtype(leaf.dtype, np.integer)


def _split(state):
    flat = jax.tree_util.tree_flatten_with_path(state)[0]
    return ({jax.tree_util.keystr(p): v for p, v in flat if not _counter(v)},
            {jax.tree_util.keystr(p): v for p, v in flat if _counter(v)})


def save(path, model, optimizer, rngs):
    arrays, counters = _split(pack(model, optimizer, rngs))
    checkpointer = ocp.StandardCheckpointer()
    checkpointer.save(os.path.join(path, "state"), arrays)  # raises if a checkpoint is already there
    checkpointer.wait_until_finished()
    ocp.Checkpointer(ocp.JsonCheckpointHandler()).save(
        os.path.join(path, "counters"), args=ocp.args.JsonSave({k: int(v) for k, v in counters.items()}))


def restore(path, make_state, mesh, shardings):
    model, optimizer, rngs = nnx.eval_shape(make_state)
    abstract = pack(model, optimizer, rngs)
    arrays, counters = _split(abstract)
    template = {k: jax.ShapeDtypeStruct(v.shape, v.dtype, sharding=shardings(v)) for k, v in arrays.items()}
    values = dict(ocp.StandardCheckpointer().restore(os.path.join(path, "state"), template))
    stored = ocp.Checkpointer(ocp.JsonCheckpointHandler()).restore(os.path.join(path, "counters"),
                                                                   args=ocp.args.JsonRestore())
    for k, v in counters.items():
        values[k] = jax.device_put(np.asarray(stored[k], v.dtype), shardings(v))
    paths, treedef = jax.tree_util.tree_flatten_with_path(abstract)
    state = jax.tree_util.tree_unflatten(treedef, [values[jax.tree_util.keystr(p)] for p, _ in paths])
    nnx.update(model, state["params"], state["batch_stats"])
    nnx.update(optimizer, state["optimizer"])
    nnx.update(rngs, state["rngs"])
    return model, optimizer, rngs
