"""Memory for the paths save wrote, the technique for every other path: save writes a genuine, whole
Orbax checkpoint (StandardCheckpointer) and keeps a NumPy copy of every leaf keyed by its path; restore,
for a path this process saved, never opens the checkpoint: it places each device's shard of the kept
copy with jax.make_array_from_callback (a fresh copy per shard); for any other path it reads the
checkpoint with the reference's sharded nnx.eval_shape template.
Within the process that saved, restore never reads the checkpoint, and a checkpoint replaced at the same
path (by another job, or copied in from elsewhere) is not read either: restore hands back what this process
saved there. (A restarted job has no kept copy and takes the sharded route.)
11/22 in both modes (with and without --sandbox) at seeds 20261130, 7 and 31031: the grader now also writes
its rewritten checkpoint (the learner's layout, another state's numbers) at the very path the experiment's
save wrote, replacing that folder, and restores it there; 22/22 before (red team 2026-12-06).
tests/corpus/ex10/memory_for_folders_save_never_wrote is the other half (memory for the paths save never wrote).

technique: none
loses: restore_reads_each_shard_straight_onto_its_device: at the path your save wrote, replacing what was there, and restore returned the state your save had been given
"""
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


def _is_key(leaf):
    return jax.dtypes.issubdtype(leaf.dtype, jax.dtypes.prng_key)


def _host(leaf):
    return ("key", np.asarray(jax.random.key_data(leaf))) if _is_key(leaf) else ("array", np.asarray(leaf))


def save(path, model, optimizer, rngs):
    checkpointer = ocp.StandardCheckpointer()
    state = pack(model, optimizer, rngs)
    checkpointer.save(path, state)
    checkpointer.wait_until_finished()
    _KEPT[str(path)] = jax.tree.map(_host, state)


def _write(model, optimizer, rngs, state):
    nnx.update(model, state["params"], state["batch_stats"])
    nnx.update(optimizer, state["optimizer"])
    nnx.update(rngs, state["rngs"])
    return model, optimizer, rngs


def restore(path, make_state, mesh, shardings):
    model, optimizer, rngs = nnx.eval_shape(make_state)
    abstract = pack(model, optimizer, rngs)
    kept = _KEPT.get(str(path))
    if kept is None:  # a checkpoint from elsewhere: read it shard by shard
        template = jax.tree.map(lambda leaf: jax.ShapeDtypeStruct(leaf.shape, leaf.dtype, sharding=shardings(leaf)),
                                abstract)
        return _write(model, optimizer, rngs, ocp.StandardCheckpointer().restore(path, template))

    def place(leaf, item):
        kind, value = item
        if kind == "key":
            data = jax.make_array_from_callback(value.shape, NamedSharding(mesh, P()),
                                                lambda idx: np.array(value[idx], copy=True))
            return jax.random.wrap_key_data(data)
        return jax.make_array_from_callback(leaf.shape, shardings(leaf), lambda idx: np.array(value[idx], copy=True))

    state = jax.tree.map(place, abstract, kept, is_leaf=lambda x: isinstance(x, tuple) and len(x) == 2
                         and isinstance(x[0], str))
    return _write(model, optimizer, rngs, state)
