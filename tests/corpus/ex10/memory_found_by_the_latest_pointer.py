"""Memory found by the LATEST pointer: save writes a genuine CheckpointManager step (StandardSave of the
whole state) under int(optimizer.step), then a LATEST file holding that number, and keeps a NumPy copy of the
state keyed by the step number. restore reads LATEST; for a step this process saved it never opens the
checkpoint and places each device's shard of the kept copy with jax.make_array_from_callback (a fresh copy per
shard); for any other step it reads the checkpoint with the reference's sharded nnx.eval_shape template.
It scored 22/22 in both modes at seeds 20261130, 7, 0 and 31031 while the grader's rewrite moved LATEST's
number on with the counters (4 -> 11), so every checkpoint the grader wrote named a step this process never
saved. Now the rewrite leaves LATEST as it was, and the experiment's restores run from the learner's file
imported afresh (a restarted job: nothing kept, the checkpoint read); the restore of the grader's checkpoint
at another path, in the process that saved, hands back the kept copy: 11/22 (seed 20261130).

loses: restore_reads_each_shard_straight_onto_its_device: as they were saved before, which that checkpoint does not hold
"""
import os

import jax
import numpy as np
import orbax.checkpoint as ocp
from flax import nnx
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P


def pack(model, optimizer, rngs):
    return {"params": nnx.state(model, nnx.Param), "batch_stats": nnx.state(model, nnx.BatchStat),
            "optimizer": nnx.state(optimizer), "rngs": nnx.state(rngs)}


def _template(make_state, shardings):
    model, optimizer, rngs = nnx.eval_shape(make_state)
    template = jax.tree.map(lambda leaf: jax.ShapeDtypeStruct(leaf.shape, leaf.dtype, sharding=shardings(leaf)),
                            pack(model, optimizer, rngs))
    return model, optimizer, rngs, template


def _write(model, optimizer, rngs, state):
    nnx.update(model, state["params"], state["batch_stats"])
    nnx.update(optimizer, state["optimizer"])
    nnx.update(rngs, state["rngs"])
    return model, optimizer, rngs

_KEPT = {}  # step -> a NumPy copy of the state save was given


def _is_key(leaf):
    return jax.dtypes.issubdtype(leaf.dtype, jax.dtypes.prng_key)


def _host(leaf):
    return ("key", np.asarray(jax.random.key_data(leaf))) if _is_key(leaf) else ("array", np.asarray(leaf))


def save(path, model, optimizer, rngs):
    step = int(optimizer.step.get_value())
    state = pack(model, optimizer, rngs)
    with ocp.CheckpointManager(os.path.abspath(path)) as manager:
        if not manager.save(step, args=ocp.args.StandardSave(state)):
            raise FileExistsError(f"a checkpoint of step {step} already exists in {path}")
        manager.wait_until_finished()
    with open(os.path.join(path, "LATEST"), "w") as f:
        f.write(f"{step}\n")
    _KEPT[step] = jax.tree.map(_host, state)


def restore(path, make_state, mesh, shardings):
    with open(os.path.join(path, "LATEST")) as f:
        step = int(f.read().strip())
    model, optimizer, rngs, template = _template(make_state, shardings)
    kept = _KEPT.get(step)
    if kept is None:  # a step this process never saved: read it shard by shard
        with ocp.CheckpointManager(os.path.abspath(path)) as manager:
            state = manager.restore(step, args=ocp.args.StandardRestore(template))
        return _write(model, optimizer, rngs, state)

    def place(leaf, item):
        kind, value = item
        if kind == "key":
            data = jax.make_array_from_callback(value.shape, NamedSharding(mesh, P()),
                                                lambda idx: np.array(value[idx], copy=True))
            return jax.random.wrap_key_data(data)
        return jax.make_array_from_callback(leaf.shape, leaf.sharding, lambda idx: np.array(value[idx], copy=True))

    return _write(model, optimizer, rngs, jax.tree.map(place, template, kept))
