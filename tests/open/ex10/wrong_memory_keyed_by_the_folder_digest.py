"""Memory keyed by what the folder holds: save writes a genuine, whole Orbax checkpoint
(StandardCheckpointer) and keeps a NumPy copy of every leaf under a SHA-256 digest of every file in the
folder it wrote (relative paths and bytes); restore digests the folder at `path` and, when it is one this
process wrote, never reads the checkpoint: it places each device's shard of the kept copy with
jax.make_array_from_callback (a fresh copy per shard). For a folder whose files differ (a checkpoint
replaced or written by someone else) it reads with the reference's sharded nnx.eval_shape template.
tests/corpus/ex10/memory_for_saved_paths_else_sharded_read keyed by content instead of by path: the whole
model stays in host memory and restore never reads a shard of the checkpoint save wrote.

Scored 22/22 in both modes (with and without --sandbox) at seeds 20261130 and 7.
Should score: 11/22 (technique: none; loses restore_reads_each_shard_straight_onto_its_device), as
tests/corpus/ex10/state_kept_on_host_placed_by_shards does. The grader's rewritten checkpoint (the learner's
layout, another state's numbers) at another path and at the path save wrote has other bytes, so its digest
matches nothing kept and restore reads it with the sharded template: both reads_the_given_checkpoint restores
are right. The experiment's own restores, the only ones of the checkpoint save wrote, read nothing from it,
and their pieces (a shard-sized host copy per device) look like Orbax's.
Grade: put this file as ex10_orbax_resume.py in a folder D;
.venv/bin/python -m graders ex10 --solutions D -v --seed 20261130 [--sandbox]
"""
import hashlib
import os

import jax
import numpy as np
import orbax.checkpoint as ocp
from flax import nnx
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

_KEPT = {}


def pack(model, optimizer, rngs):
    return {"params": nnx.state(model, nnx.Param), "batch_stats": nnx.state(model, nnx.BatchStat),
            "optimizer": nnx.state(optimizer), "rngs": nnx.state(rngs)}


def _digest(path):
    h = hashlib.sha256()
    for root, dirs, files in sorted(os.walk(path)):
        dirs.sort()
        for name in sorted(files):
            full = os.path.join(root, name)
            h.update(os.path.relpath(full, path).encode())
            with open(full, "rb") as f:
                h.update(f.read())
    return h.hexdigest()


def _is_key(leaf):
    return jax.dtypes.issubdtype(leaf.dtype, jax.dtypes.prng_key)


def _host(leaf):
    return ("key", np.asarray(jax.random.key_data(leaf))) if _is_key(leaf) else ("array", np.asarray(leaf))


def save(path, model, optimizer, rngs):
    checkpointer = ocp.StandardCheckpointer()
    state = pack(model, optimizer, rngs)
    checkpointer.save(path, state)
    checkpointer.wait_until_finished()
    _KEPT[_digest(path)] = jax.tree.map(_host, state)


def restore(path, make_state, mesh, shardings):
    model, optimizer, rngs = nnx.eval_shape(make_state)
    abstract = pack(model, optimizer, rngs)
    kept = _KEPT.get(_digest(path))
    if kept is None:
        template = jax.tree.map(lambda leaf: jax.ShapeDtypeStruct(leaf.shape, leaf.dtype, sharding=shardings(leaf)),
                                abstract)
        state = ocp.StandardCheckpointer().restore(path, template)
    else:
        def place(leaf, item):
            kind, value = item
            if kind == "key":
                data = jax.make_array_from_callback(value.shape, NamedSharding(mesh, P()),
                                                    lambda idx: np.array(value[idx], copy=True))
                return jax.random.wrap_key_data(data)
            return jax.make_array_from_callback(leaf.shape, shardings(leaf),
                                                lambda idx: np.array(value[idx], copy=True))

        state = jax.tree.map(place, abstract, kept,
                             is_leaf=lambda x: isinstance(x, tuple) and len(x) == 2 and isinstance(x[0], str))
    nnx.update(model, state["params"], state["batch_stats"])
    nnx.update(optimizer, state["optimizer"])
    nnx.update(rngs, state["rngs"])
    return model, optimizer, rngs
