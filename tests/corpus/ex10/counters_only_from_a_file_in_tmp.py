"""tests/corpus/ex10/counters_and_key_from_a_file_in_tmp with only the integer leaves (the optimizer's step,
the schedule's counts, the dropout stream's count) taken from the file in /tmp; the key is read from the
checkpoint. A job restarted on another machine has no such file.

22/22 (seed 20261130, without --sandbox); should be about 11/22 (the 11 points of reading the state from
the checkpoint). The experiment's restores run in a process that never saved but shares the file system,
and the grader's rewrite keeps the counters as saved (moving them broke right layouts that file the step
in a folder's name, a pointer or an index), so counters read from a file beside the checkpoint equal the
checkpoint's everywhere the grader looks. Catching it needs the restore to run where only the checkpoint
folder exists (another file system), or counters the rewrite can move without breaking those layouts.
"""
import os
import tempfile

import jax
import numpy as np
import orbax.checkpoint as ocp
from flax import nnx

_SIDE = os.path.join(tempfile.gettempdir(), "ex10_resume_counters_only.npz")


def pack(model, optimizer, rngs):
    return {"params": nnx.state(model, nnx.Param), "batch_stats": nnx.state(model, nnx.BatchStat),
            "optimizer": nnx.state(optimizer), "rngs": nnx.state(rngs)}


def _is_key(leaf):
    return jax.dtypes.issubdtype(leaf.dtype, jax.dtypes.prng_key)


def _counter(leaf):
    return not _is_key(leaf) and not jax.numpy.issubdtype(leaf.dtype, jax.numpy.floating)


def save(path, model, optimizer, rngs):
    checkpointer = ocp.StandardCheckpointer()
    state = pack(model, optimizer, rngs)
    checkpointer.save(path, state)
    checkpointer.wait_until_finished()
    leaves = jax.tree_util.tree_leaves(state)
    np.savez(_SIDE, *[np.asarray(leaf)
                      for leaf in leaves if _counter(leaf)])


def restore(path, make_state, mesh, shardings):
    model, optimizer, rngs = nnx.eval_shape(make_state)
    template = jax.tree.map(lambda leaf: jax.ShapeDtypeStruct(leaf.shape, leaf.dtype, sharding=shardings(leaf)),
                            pack(model, optimizer, rngs))
    state = ocp.StandardCheckpointer().restore(path, template)
    with np.load(_SIDE) as side:  # not in the checkpoint folder: a restarted job elsewhere has none
        kept = iter([side[f"arr_{i}"] for i in range(len(side.files))])

    def from_the_file(leaf):
        if not _counter(leaf):
            return leaf
        return jax.device_put(next(kept).astype(leaf.dtype), leaf.sharding)

    state = jax.tree.map(from_the_file, state)
    nnx.update(model, state["params"], state["batch_stats"])
    nnx.update(optimizer, state["optimizer"])
    nnx.update(rngs, state["rngs"])
    return model, optimizer, rngs
