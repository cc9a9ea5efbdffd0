"""tests/corpus/ex10/state_kept_on_host_placed_by_shards (nothing read from the checkpoint: restore places
each device's shard of a NumPy copy kept since save with jax.make_array_from_callback), with one more
small Orbax item saved inside the checkpoint's folder (path/"format", a StandardCheckpointer holding
{"version": 1}). A restarted job has no kept copy. 11/22 in both modes (seeds 20261130, 7). It scored 22
while the grader's rewrite of the checkpoint deleted the inner item with the outer one, failed, and then
skipped the check; the rewrite now keeps what the item holds beside its own data (and a rewrite that fails
fails the check) (red team 2026-12-06).
Now 4/22 (seed 20261130): the experiment's restores run from the learner's file imported afresh, as
a job restarted after save has it, and the copy kept since save is not there.

loses: resumed_on_the_same_mesh_equals_uninterrupted: restore runs here as a job restarted after save runs it
loses: restore_reads_each_shard_straight_onto_its_device: nothing your code kept since save is there
"""
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


def _host(leaf):
    if jax.dtypes.issubdtype(leaf.dtype, jax.dtypes.prng_key):
        return ("key", np.asarray(jax.random.key_data(leaf)))
    return ("array", np.asarray(leaf))


def save(path, model, optimizer, rngs):
    checkpointer = ocp.StandardCheckpointer()
    state = pack(model, optimizer, rngs)
    checkpointer.save(path, state)
    checkpointer.wait_until_finished()
    inner = ocp.StandardCheckpointer()
    inner.save(os.path.join(str(path), "format"), {"version": np.asarray(1, np.int32)})
    inner.wait_until_finished()
    _KEPT[str(path)] = jax.tree.map(_host, state)


def restore(path, make_state, mesh, shardings):
    model, optimizer, rngs = nnx.eval_shape(make_state)
    abstract = pack(model, optimizer, rngs)
    kept = _KEPT[str(path)]

    def place(leaf, item):
        kind, value = item
        if kind == "key":
            data = jax.make_array_from_callback(value.shape, NamedSharding(mesh, P()),
                                                lambda idx: np.array(value[idx], copy=True))
            return jax.random.wrap_key_data(data)
        return jax.make_array_from_callback(leaf.shape, shardings(leaf), lambda idx: np.array(value[idx], copy=True))

    state = jax.tree.map(place, abstract, kept, is_leaf=lambda x: isinstance(x, tuple) and len(x) == 2
                         and isinstance(x[0], str))
    nnx.update(model, state["params"], state["batch_stats"])
    nnx.update(optimizer, state["optimizer"])
    nnx.update(rngs, state["rngs"])
    return model, optimizer, rngs
