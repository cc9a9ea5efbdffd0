"""No sharded read at all, every route: save writes a genuine StandardCheckpointer checkpoint; restore
opens that checkpoint's own arrays with TensorStore (the OCDBT database Orbax wrote, one zarr array per
leaf), reads each leaf whole onto the host (no Orbax handler involved), and places each device's shard with
jax.make_array_from_callback (a fresh copy per shard). It reads the checkpoint at the path it is given (a
restarted job gets the right numbers), but every split array passes whole through host memory:
tests/corpus/ex10/host_whole_then_shards_copied_by_callback with TensorStore instead of Orbax's NumPy reads.

Scored 22/22 in both modes (with and without --sandbox) at seeds 20261130 and 7.
Should score: 10/22 (technique: none; loses restore_reads_each_shard_straight_onto_its_device and
restore_never_holds_a_whole_array). It reads the checkpoint at the path it is given on every route (the
grader's rewrite included), so no memory is involved: the grader records Orbax's NumPy reads and the
placements, and a whole-array read by any other reader (TensorStore here, the same library Orbax reads
with) followed by per-shard copies leaves no trace in either.
Grade: put this file as ex10_orbax_resume.py in a folder D;
.venv/bin/python -m graders ex10 --solutions D -v --seed 20261130 [--sandbox]
"""
import os

import jax
import numpy as np
import orbax.checkpoint as ocp
import tensorstore as ts
from flax import nnx


def pack(model, optimizer, rngs):
    return {"params": nnx.state(model, nnx.Param), "batch_stats": nnx.state(model, nnx.BatchStat),
            "optimizer": nnx.state(optimizer), "rngs": nnx.state(rngs)}


def save(path, model, optimizer, rngs):
    checkpointer = ocp.StandardCheckpointer()
    checkpointer.save(path, pack(model, optimizer, rngs))
    checkpointer.wait_until_finished()


def _name(path):
    parts = []
    for k in path:
        for attr in ("key", "idx", "name"):
            if hasattr(k, attr):
                parts.append(str(getattr(k, attr)))
                break
    return ".".join(parts)


def _is_key(leaf):
    return jax.dtypes.issubdtype(leaf.dtype, jax.dtypes.prng_key)


def restore(path, make_state, mesh, shardings):
    model, optimizer, rngs = nnx.eval_shape(make_state)
    abstract = pack(model, optimizer, rngs)
    base = "file://" + os.path.abspath(str(path)) + "/"
    flat, treedef = jax.tree_util.tree_flatten_with_path(abstract)
    placed = []
    for p, leaf in flat:
        spec = {"driver": "zarr", "kvstore": {"driver": "ocdbt", "base": base, "path": _name(p)}}
        whole = np.asarray(ts.open(spec).result().read().result())  # the whole array on the host
        if _is_key(leaf):
            data = jax.make_array_from_callback(whole.shape, shardings(whole), lambda idx, v=whole: np.array(v[idx]))
            placed.append(jax.random.wrap_key_data(data))
            continue
        whole = whole.astype(leaf.dtype)
        placed.append(jax.make_array_from_callback(leaf.shape, shardings(leaf),
                                                   lambda idx, v=whole: np.array(v[idx], copy=True)))
    state = jax.tree_util.tree_unflatten(treedef, placed)
    nnx.update(model, state["params"], state["batch_stats"])
    nnx.update(optimizer, state["optimizer"])
    nnx.update(rngs, state["rngs"])
    return model, optimizer, rngs
