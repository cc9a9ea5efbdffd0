"""BatchNorm's running statistics restored from a NumPy file in /tmp written at save (after the Orbax
checkpoint is written), while the checkpoint holds them too, packed: mean and var end to end in one
vector beside the state, which restore reads and never uses. Everything else is the reference's:
parameters, optimizer state and RNG state read from the checkpoint with a sharded template. A job
restarted on another machine, or after /tmp was cleaned, has no such file.
tests/corpus/ex10/batch_stats_from_a_file_in_tmp with a packed copy of the statistics in the checkpoint.

11/22 in both modes (with and without --sandbox) at seeds 20261130, 7 and 0: the checkpoint holds the
statistics (runs inside the packed vector), the grader's rewrite writes another state's statistics into
that vector, and restore hands back the saved ones from the file. 21/22 at seed 20261130 before the
grader found leaves packed into a larger stored array: the statistics then counted as missing from the
checkpoint, which exempted them from the rewrite's reading.

Now 4/22 in both modes (with and without --sandbox) at seeds 20261130 and 7: the experiment's restores
run with an empty temporary folder of their own (a job restarted on another machine has the checkpoint
folder and nothing else save wrote), where the file is not: restore fails there, and every check that
reads a restore says so.

loses: restore_reads_each_shard_straight_onto_its_device: of what save wrote only the checkpoint folder
"""
import os
import tempfile

import jax
import jax.numpy as jnp
import numpy as np
import orbax.checkpoint as ocp
from flax import nnx
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

_SIDE = os.path.join(tempfile.gettempdir(), "ex10_batch_stats_beside_a_packed_copy_after.npz")


def pack(model, optimizer, rngs):
    return {"params": nnx.state(model, nnx.Param), "optimizer": nnx.state(optimizer), "rngs": nnx.state(rngs)}


def save(path, model, optimizer, rngs):
    stats = nnx.state(model, nnx.BatchStat)
    leaves = jax.tree.leaves(stats)
    # the statistics also in the checkpoint, end to end in one vector: never read back
    tree = dict(pack(model, optimizer, rngs), stats=jnp.concatenate([jnp.ravel(v) for v in leaves]))
    checkpointer = ocp.StandardCheckpointer()
    checkpointer.save(path, tree)
    checkpointer.wait_until_finished()
    np.savez(_SIDE, *[np.asarray(v) for v in leaves])


def restore(path, make_state, mesh, shardings):
    model, optimizer, rngs = nnx.eval_shape(make_state)
    template = jax.tree.map(lambda leaf: jax.ShapeDtypeStruct(leaf.shape, leaf.dtype, sharding=shardings(leaf)),
                            pack(model, optimizer, rngs))
    reader = ocp.StandardCheckpointer()
    stored = reader.metadata(path)
    stored = getattr(stored, "item_metadata", stored)["stats"]
    template["stats"] = jax.ShapeDtypeStruct(stored.shape, stored.dtype, sharding=NamedSharding(mesh, P()))
    state = reader.restore(path, template)  # the packed statistics read, and not used
    abstract = nnx.state(model, nnx.BatchStat)
    side = np.load(_SIDE)
    values = []
    for i, leaf in enumerate(jax.tree.leaves(abstract)):
        v = np.array(side[f"arr_{i}"], leaf.dtype)
        values.append(jax.device_put(v, shardings(leaf)))
    stats = jax.tree.unflatten(jax.tree.structure(abstract), values)
    nnx.update(model, state["params"], stats)
    nnx.update(optimizer, state["optimizer"])
    nnx.update(rngs, state["rngs"])
    return model, optimizer, rngs
