"""Restores every array onto the host (NumPy arrays as the template) and places it afterwards with
jax.device_put: the whole model passes through host memory. Every number is right.

technique: none
loses: restore_reads_each_shard_straight_onto_its_device: cut from larger host arrays
loses: restore_never_holds_a_whole_array: was on the host
"""
import jax
import numpy as np
import orbax.checkpoint as ocp
from flax import nnx

from reference.ex10_orbax_resume import pack, save  # noqa: F401  (right as they are)


def restore(path, make_state, mesh, shardings):
    model, optimizer, rngs = nnx.eval_shape(make_state)

    def on_host(leaf):
        if jax.dtypes.issubdtype(leaf.dtype, jax.dtypes.prng_key):
            return leaf
        return np.zeros(leaf.shape, leaf.dtype)

    state = ocp.StandardCheckpointer().restore(path, jax.tree.map(on_host, pack(model, optimizer, rngs)))
    state = jax.tree.map(lambda a: jax.device_put(a, shardings(a)), state)
    nnx.update(model, state["params"], state["batch_stats"])
    nnx.update(optimizer, state["optimizer"])
    nnx.update(rngs, state["rngs"])
    return model, optimizer, rngs
