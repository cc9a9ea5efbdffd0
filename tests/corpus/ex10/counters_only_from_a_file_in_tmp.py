"""tests/corpus/ex10/counters_and_key_from_a_file_in_tmp with only the integer leaves (the optimizer's
step, the schedule's counts, the dropout stream's count) taken from a file save leaves in the temporary
directory (tempfile.gettempdir(), outside the checkpoint folder); the key and every floating-point leaf are
read from the checkpoint with a sharded template. A job restarted on another machine has no such file.

4/22 in both modes (with and without --sandbox) at seeds 20261130 and 7: the experiment's restores run with
an empty temporary folder of their own (a job restarted on another machine has the checkpoint folder and
nothing else save wrote), where the file is not: restore fails there (FileNotFoundError), and every check
that reads a restore says so. 22/22 before: the restores ran in a process that never saved but saw the
same temporary folder, and the grader's rewrite keeps the counters as saved (moving them broke right
layouts that file the step in a folder's name, a pointer or an index), so the file's counters equalled the
checkpoint's everywhere the grader looked.

loses: restore_reads_each_shard_straight_onto_its_device: of what save wrote only the checkpoint folder
loses: step_and_schedule_continue: FileNotFoundError
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
