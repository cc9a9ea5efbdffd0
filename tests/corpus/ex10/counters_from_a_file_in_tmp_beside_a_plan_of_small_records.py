"""The checkpoint holds every array but the counters (optimizer.step, the schedule's counts, the
dropout stream's count); beside them, in the checkpoint's custom metadata, a dashboard's planned
learning-rate schedule filed as one small record per step ({"plan": [{"step": s, "lr": ...}, ...]},
steps 0..199), which restore never reads; the counters are written to a file in /tmp and read back
from there. A job restarted on another machine has no such file, and the checkpoint holds no counter:
the planned steps are a table in which any small counter stands by chance.

Loses the restore's technique points at seeds 20261130 and 7 since a list of more than MAX_BOOKKEEPING records is a table (checks.bookkeeping) (22/22 before).

Now 3/22 in both modes (with and without --sandbox) at seeds 20261130 and 7: the experiment's restores
run with an empty temporary folder of their own (a job restarted on another machine has the checkpoint
folder and nothing else save wrote), where the file is not: restore fails there, and every check that
reads a restore says so.
No longer declared technique-free: its numbers are right only where the file save wrote
outside the checkpoint folder is.

loses: checkpoint_is_an_orbax_folder_holding_the_whole_state: does not hold the optimizer's step
loses: restore_reads_each_shard_straight_onto_its_device: of what save wrote only the checkpoint folder
"""
import json
import os
import tempfile

import jax
import numpy as np
import optax
import orbax.checkpoint as ocp
from flax import nnx

_PLANNED = optax.warmup_cosine_decay_schedule(0.0, 1e-2, warmup_steps=10, decay_steps=100, end_value=1e-3)
PLAN = [{"step": step, "lr": float(_PLANNED(step))} for step in range(200)]
_SIDE = os.path.join(tempfile.gettempdir(), "ex10_counters_beside_a_planned_schedule.json")


def pack(model, optimizer, rngs):
    return {"params": nnx.state(model, nnx.Param), "batch_stats": nnx.state(model, nnx.BatchStat),
            "optimizer": nnx.state(optimizer), "rngs": nnx.state(rngs)}


def _counter(leaf):
    return leaf.shape == () and jax.numpy.issubdtype(leaf.dtype, np.integer)


def _split(state):
    flat = jax.tree_util.tree_flatten_with_path(state)[0]
    arrays = {jax.tree_util.keystr(p): v for p, v in flat if not _counter(v)}
    counters = {jax.tree_util.keystr(p): v for p, v in flat if _counter(v)}
    return arrays, counters


def save(path, model, optimizer, rngs):
    arrays, counters = _split(pack(model, optimizer, rngs))
    checkpointer = ocp.StandardCheckpointer()
    checkpointer.save(path, arrays, custom_metadata={"plan": PLAN})
    checkpointer.wait_until_finished()
    with open(_SIDE, "w") as f:
        json.dump({k: int(v) for k, v in counters.items()}, f)


def restore(path, make_state, mesh, shardings):
    model, optimizer, rngs = nnx.eval_shape(make_state)
    abstract = pack(model, optimizer, rngs)
    arrays, counters = _split(abstract)
    template = {k: jax.ShapeDtypeStruct(v.shape, v.dtype, sharding=shardings(v)) for k, v in arrays.items()}
    got = ocp.StandardCheckpointer().restore(path, template)
    with open(_SIDE) as f:
        stored = json.load(f)
    for k, v in counters.items():
        got[k] = jax.device_put(np.asarray(stored[k], v.dtype), shardings(v))
    paths, treedef = jax.tree_util.tree_flatten_with_path(abstract)
    state = jax.tree_util.tree_unflatten(treedef, [got[jax.tree_util.keystr(p)] for p, _ in paths])
    nnx.update(model, state["params"], state["batch_stats"])
    nnx.update(optimizer, state["optimizer"])
    nnx.update(rngs, state["rngs"])
    return model, optimizer, rngs
