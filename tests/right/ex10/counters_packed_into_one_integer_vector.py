"""The whole state in one StandardCheckpointer tree, every 0-d integer counter (optimizer.step, the
schedule's counts, the dropout stream's count) packed into one int64 vector "counters" (in the order
of the state's leaves) beside the arrays (the floats and the dropout key, keyed by path), as a job
keeps its bookkeeping in one small array. Restore reads the tree with the sharded template (the
vector replicated, where shardings puts a 1-d leaf of its size), takes each counter from its
position in the vector with a local jitted index and places it where shardings says. Everything
comes from the one Orbax checkpoint at `path`; a second save to the same path raises (the
destination exists).

A counter counts as held inside a small integer array of counters (checks.counter_in_a_small_vector)."""
import jax
import numpy as np
import orbax.checkpoint as ocp
from flax import nnx


def pack(model, optimizer, rngs):
    return {"params": nnx.state(model, nnx.Param), "batch_stats": nnx.state(model, nnx.BatchStat),
            "optimizer": nnx.state(optimizer), "rngs": nnx.state(rngs)}


def _counter(leaf):
    return leaf.shape == () and jax.numpy.issubdtype(leaf.dtype, np.integer)


def _split(state):
    flat = jax.tree_util.tree_flatten_with_path(state)[0]
    return ({jax.tree_util.keystr(p): v for p, v in flat if not _counter(v)},
            {jax.tree_util.keystr(p): v for p, v in flat if _counter(v)})


def save(path, model, optimizer, rngs):
    arrays, counters = _split(pack(model, optimizer, rngs))
    arrays["counters"] = np.asarray([int(counters[k]) for k in sorted(counters)], np.int64)
    checkpointer = ocp.StandardCheckpointer()
    checkpointer.save(path, arrays)  # raises if path already holds a checkpoint
    checkpointer.wait_until_finished()


def restore(path, make_state, mesh, shardings):
    model, optimizer, rngs = nnx.eval_shape(make_state)
    abstract = pack(model, optimizer, rngs)
    arrays, counters = _split(abstract)
    arrays["counters"] = jax.ShapeDtypeStruct((len(counters),), np.int64)
    template = {k: jax.ShapeDtypeStruct(v.shape, v.dtype, sharding=shardings(v)) for k, v in arrays.items()}
    values = dict(ocp.StandardCheckpointer().restore(path, template))
    vector = values.pop("counters")
    for i, k in enumerate(sorted(counters)):
        v = counters[k]
        values[k] = jax.jit(lambda c, i=i: c[i].astype(v.dtype), out_shardings=shardings(v))(vector)
    paths, treedef = jax.tree_util.tree_flatten_with_path(abstract)
    state = jax.tree_util.tree_unflatten(treedef, [values[jax.tree_util.keystr(p)] for p, _ in paths])
    nnx.update(model, state["params"], state["batch_stats"])
    nnx.update(optimizer, state["optimizer"])
    nnx.update(rngs, state["rngs"])
    return model, optimizer, rngs
