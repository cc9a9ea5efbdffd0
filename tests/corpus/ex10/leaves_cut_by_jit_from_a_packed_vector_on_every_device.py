"""Every split array whole on every device, behind a sharded read that is thrown away: save writes the
state as it is and, beside it in the same checkpoint, every floating-point leaf end to end in one float32
vector. restore reads both with a sharded template (the state by shardings(leaf), the vector replicated,
P(): each device of the mesh reads the whole vector), drops the state it read except the counters and the
dropout key, and cuts every floating-point leaf out of the vector with a jitted slice whose out_shardings
are shardings(leaf). What it returns is valued and placed right, yet each device held every kernel and
moment whole while restore ran.

11/22 at seeds 20261130 and 7: the collectives of the programs compiled while restore runs are read, and only vectors count as
held inside a larger stored array (22/22 before both).

technique: none
loses: restore_reads_each_shard_straight_onto_its_device: compiled programs moved data between devices
"""
import jax
import jax.numpy as jnp
import numpy as np
import orbax.checkpoint as ocp
from flax import nnx
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P


def pack(model, optimizer, rngs):
    return {"params": nnx.state(model, nnx.Param), "batch_stats": nnx.state(model, nnx.BatchStat),
            "optimizer": nnx.state(optimizer), "rngs": nnx.state(rngs)}


def _is_float(leaf):
    return jnp.issubdtype(leaf.dtype, jnp.floating)


def save(path, model, optimizer, rngs):
    state = pack(model, optimizer, rngs)
    leaves = jax.tree_util.tree_leaves(state)
    # the state as it is, and beside it every floating-point leaf end to end in one vector
    flat = jnp.concatenate([jnp.ravel(leaf).astype(jnp.float32) for leaf in leaves if _is_float(leaf)])
    checkpointer = ocp.StandardCheckpointer()
    checkpointer.save(path, {"state": state, "flat": flat})
    checkpointer.wait_until_finished()


def restore(path, make_state, mesh, shardings):
    model, optimizer, rngs = nnx.eval_shape(make_state)
    abstract = pack(model, optimizer, rngs)
    leaves, treedef = jax.tree_util.tree_flatten(abstract)
    total = sum(int(np.prod(leaf.shape)) for leaf in leaves if _is_float(leaf))
    template = {"state": jax.tree.map(lambda leaf: jax.ShapeDtypeStruct(leaf.shape, leaf.dtype,
                                                                        sharding=shardings(leaf)), abstract),
                "flat": jax.ShapeDtypeStruct((total,), jnp.float32, sharding=NamedSharding(mesh, P()))}
    got = ocp.StandardCheckpointer().restore(path, template)
    read = jax.tree_util.tree_leaves(got["state"])
    out, offset = [], 0
    for leaf, mine in zip(leaves, read):
        if not _is_float(leaf):
            out.append(mine)
            continue
        n = int(np.prod(leaf.shape))
        # cut from the whole vector, which every device holds
        cut = jax.jit(lambda f, o=offset, n=n, shape=leaf.shape, dtype=leaf.dtype:
                      f[o:o + n].reshape(shape).astype(dtype), out_shardings=shardings(leaf))
        out.append(cut(got["flat"]))
        offset += n
    state = jax.tree_util.tree_unflatten(treedef, out)
    nnx.update(model, state["params"], state["batch_stats"])
    nnx.update(optimizer, state["optimizer"])
    nnx.update(rngs, state["rngs"])
    return model, optimizer, rngs
