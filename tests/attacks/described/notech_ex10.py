"""Exercise 10 without the technique: every number right, no Orbax. Every leaf of the whole
state saved with NumPy (np.savez); restore builds its template with nnx.eval_shape, loads the
arrays onto the host and places each with jax.device_put where shardings(leaf) says; a second save
to the same path raises FileExistsError. Graded honestly it earns the numbers, the restored
placements, the template and the second save: no checkpoint the grader reads, nothing read
straight into the shards."""
import os

import jax
import numpy as np
from flax import nnx


def pack(model, optimizer, rngs):
    return {"params": nnx.state(model, nnx.Param), "batch_stats": nnx.state(model, nnx.BatchStat),
            "optimizer": nnx.state(optimizer), "rngs": nnx.state(rngs)}


def _is_key(leaf):
    return jax.dtypes.issubdtype(leaf.dtype, jax.dtypes.prng_key)


def save(path, model, optimizer, rngs):
    if os.path.exists(path):
        raise FileExistsError(f"{path} already exists")
    os.makedirs(path)
    leaves = jax.tree.leaves(pack(model, optimizer, rngs))
    np.savez(os.path.join(path, "state.npz"),
             *[np.asarray(jax.random.key_data(a) if _is_key(a) else a) for a in leaves])


def restore(path, make_state, mesh, shardings):
    model, optimizer, rngs = nnx.eval_shape(make_state)
    abstract = pack(model, optimizer, rngs)
    leaves, treedef = jax.tree.flatten(abstract)
    stored = np.load(os.path.join(path, "state.npz"))
    placed = []
    for i, leaf in enumerate(leaves):
        value = stored[f"arr_{i}"]
        if _is_key(leaf):
            value = jax.random.wrap_key_data(value)
        placed.append(jax.device_put(value, shardings(leaf)))
    state = jax.tree.unflatten(treedef, placed)
    nnx.update(model, state["params"], state["batch_stats"])
    nnx.update(optimizer, state["optimizer"])
    nnx.update(rngs, state["rngs"])
    return model, optimizer, rngs
