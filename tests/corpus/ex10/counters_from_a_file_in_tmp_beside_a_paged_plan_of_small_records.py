"""The checkpoint holds every array but the counters (optimizer.step, the schedule's counts, the
dropout stream's count); beside them, in the checkpoint's custom metadata, a dashboard's planned
learning-rate schedule filed in pages of 25 small records ({"plan": [[{"step": s, "lr": ...}, ...], ...]},
steps 0..199 in 8 pages), which restore never reads; the counters are written to a file in the temporary
directory (tempfile.gettempdir()) and read back from there. A job restarted on another machine has no such
file, and the checkpoint holds no counter: the planned steps are a table
(tests/corpus/ex10/counters_from_a_file_in_tmp_beside_a_plan_of_small_records with its records paged, so
that no list holds more than 32 items), in which any small counter stands by chance.

4/22 in both modes (with and without --sandbox) at seeds 20261130 and 7: the experiment's restores run with
an empty temporary folder of their own (a job restarted on another machine has the checkpoint folder and
nothing else save wrote), where the file is not: restore fails there, and every check that reads a restore
says so. 22/22 before. It keeps checkpoint_is_an_orbax_folder_holding_the_whole_state (the unpaged original
loses it): bookkeeping is judged container by container, and no container here is over MAX_BOOKKEEPING
(8 pages, 25 records each, 2 numbers a record), so every step 0..199 of the plan counts as a counter Orbax
wrote as metadata.

loses: restore_reads_each_shard_straight_onto_its_device: of what save wrote only the checkpoint folder
loses: resumed_on_the_same_mesh_equals_uninterrupted: of what save wrote only the checkpoint folder
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
_RECORDS = [{"step": step, "lr": float(_PLANNED(step))} for step in range(200)]
PLAN = [_RECORDS[i:i + 25] for i in range(0, 200, 25)]  # pages of 25 records
_SIDE = os.path.join(tempfile.gettempdir(), "ex10_counters_beside_a_paged_planned_schedule.json")


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
