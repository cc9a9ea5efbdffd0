"""WRONG: tests/corpus/ex10/batch_stats_from_a_file_in_tmp with one element of each statistic nudged by
one float32 ulp (np.nextafter) after reading it from the file in /tmp. BatchNorm's running statistics
are left out of the Orbax checkpoint and written to a NumPy file at save; restore reads them from
there (a job restarted on another machine has none). Everything else is the reference's.

7/22 at seeds 20261130 and 7: a part the checkpoint lacks handed back within NEAR_SAVED of its saved value counts as
come from outside the checkpoint (18/22 before).

Now 3/22 in both modes (with and without --sandbox) at seeds 20261130 and 7: the experiment's restores
run with an empty temporary folder of their own (a job restarted on another machine has the checkpoint
folder and nothing else save wrote), where the file is not: restore fails there, and every check that
reads a restore says so.

loses: restore_reads_each_shard_straight_onto_its_device: of what save wrote only the checkpoint folder
loses: batchnorm_statistics_continue: FileNotFoundError
"""
import os
import tempfile

import jax
import numpy as np
import orbax.checkpoint as ocp
from flax import nnx

_SIDE = os.path.join(tempfile.gettempdir(), "ex10_batch_stats_beside.npz")


def pack(model, optimizer, rngs):
    return {"params": nnx.state(model, nnx.Param), "optimizer": nnx.state(optimizer), "rngs": nnx.state(rngs)}


def save(path, model, optimizer, rngs):
    stats = nnx.state(model, nnx.BatchStat)
    leaves = jax.tree.leaves(stats)
    np.savez(_SIDE, *[np.asarray(v) for v in leaves])
    checkpointer = ocp.StandardCheckpointer()
    checkpointer.save(path, pack(model, optimizer, rngs))
    checkpointer.wait_until_finished()


def restore(path, make_state, mesh, shardings):
    model, optimizer, rngs = nnx.eval_shape(make_state)
    template = jax.tree.map(lambda leaf: jax.ShapeDtypeStruct(leaf.shape, leaf.dtype, sharding=shardings(leaf)),
                            pack(model, optimizer, rngs))
    state = ocp.StandardCheckpointer().restore(path, template)
    abstract = nnx.state(model, nnx.BatchStat)
    side = np.load(_SIDE)
    values = []
    for i, leaf in enumerate(jax.tree.leaves(abstract)):
        v = np.array(side[f"arr_{i}"], leaf.dtype)
        v.reshape(-1)[0] = np.nextafter(v.reshape(-1)[0], np.inf, dtype=v.dtype)
        values.append(jax.device_put(v, shardings(leaf)))
    stats = jax.tree.unflatten(jax.tree.structure(abstract), values)
    nnx.update(model, state["params"], stats)
    nnx.update(optimizer, state["optimizer"])
    nnx.update(rngs, state["rngs"])
    return model, optimizer, rngs
