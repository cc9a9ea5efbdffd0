"""A checkpoint of the floating-point state only, the counters and the dropout stream in a file
outside the checkpoint folder: save writes a genuine Orbax checkpoint (StandardCheckpointer) of the parameters, the
BatchNorm statistics and Adam's moments, and nothing else (no optimizer step, no schedule counts, no
RNG state); the optimizer's step, the schedule's counts and the dropout stream's key and count go to
<tmp>/ex10_resume_side/counters.npz (the home directory's ~/.cache when the red team found it). restore reads the checkpoint with a
sharded template of the floating-point leaves and fills the rest from that file (a job restarted on
another machine has none: FileNotFoundError).

Scored 21/22 in both modes (with and without --sandbox) at seeds 20261130, 7 and 0: it loses only
checkpoint_is_an_orbax_folder_holding_the_whole_state ("does not hold the optimizer's step and the
schedule's counts, the dropout stream (key and count)").
Should score: about 3/22, as tests/corpus/ex10/only_parameters_in_checkpoint_rest_in_memory and
counters_and_key_from_memory do: a job restarted on another machine has no file in the home directory,
so its restore fails. step_and_schedule_continue and dropout_stream_continues pass on numbers that never
came from the checkpoint: the forked process shares the file system (and the home directory) with the
process that saved.
10/22 (seed 20261130, without --sandbox) since the grader holds every leaf its rewrite changed (the
floating-point numbers, the dropout key) to the rewrite where the checkpoint holds that part, and an
experiment's restore may not hand back, as saved, a part the checkpoint lacks.

Now 3/22 in both modes (with and without --sandbox) at seeds 20261130 and 7: the experiment's restores
run with an empty temporary folder of their own (a job restarted on another machine has the checkpoint
folder and nothing else save wrote), where the file is not: restore fails there, and every check that
reads a restore says so.

loses: checkpoint_is_an_orbax_folder_holding_the_whole_state: does not hold the optimizer's step
loses: restore_reads_each_shard_straight_onto_its_device: of what save wrote only the checkpoint folder
"""
import os
import tempfile

import jax
import numpy as np
import orbax.checkpoint as ocp
from flax import nnx

_SIDE = os.path.join(tempfile.gettempdir(), "ex10_resume_side", "counters.npz")


def pack(model, optimizer, rngs):
    return {"params": nnx.state(model, nnx.Param), "batch_stats": nnx.state(model, nnx.BatchStat),
            "optimizer": nnx.state(optimizer), "rngs": nnx.state(rngs)}


def _is_key(leaf):
    return jax.dtypes.issubdtype(leaf.dtype, jax.dtypes.prng_key)


def _counter(leaf):
    return _is_key(leaf) or not jax.numpy.issubdtype(leaf.dtype, jax.numpy.floating)


def _floats(state):
    leaves, _ = jax.tree_util.tree_flatten(state)
    return {str(i): leaf for i, leaf in enumerate(leaves) if not _counter(leaf)}


def save(path, model, optimizer, rngs):
    state = pack(model, optimizer, rngs)
    checkpointer = ocp.StandardCheckpointer()
    checkpointer.save(path, _floats(state))
    checkpointer.wait_until_finished()
    os.makedirs(os.path.dirname(_SIDE), exist_ok=True)
    np.savez(_SIDE, *[np.asarray(jax.random.key_data(leaf) if _is_key(leaf) else leaf)
                      for leaf in jax.tree_util.tree_leaves(state) if _counter(leaf)])


def restore(path, make_state, mesh, shardings):
    model, optimizer, rngs = nnx.eval_shape(make_state)
    abstract = jax.tree.map(lambda leaf: jax.ShapeDtypeStruct(leaf.shape, leaf.dtype, sharding=shardings(leaf)),
                            pack(model, optimizer, rngs))
    leaves, treedef = jax.tree_util.tree_flatten(abstract)
    read = ocp.StandardCheckpointer().restore(path, _floats(abstract))
    with np.load(_SIDE) as side:  # outside the checkpoint folder
        kept = iter([side[f"arr_{i}"] for i in range(len(side.files))])
    out = []
    for i, leaf in enumerate(leaves):
        if not _counter(leaf):
            out.append(read[str(i)])
        elif _is_key(leaf):
            out.append(jax.random.wrap_key_data(jax.device_put(next(kept), leaf.sharding)))
        else:
            out.append(jax.device_put(next(kept).astype(leaf.dtype), leaf.sharding))
    state = jax.tree_util.tree_unflatten(treedef, out)
    nnx.update(model, state["params"], state["batch_stats"])
    nnx.update(optimizer, state["optimizer"])
    nnx.update(rngs, state["rngs"])
    return model, optimizer, rngs
