"""A restore that reads every array onto the host (Orbax, NumPy arrays as the template) and hands
each back as an uncommitted JAX array on the default device (jnp.asarray), never placed where
`shardings` says. Wrong: nothing is sharded on the target mesh, and on a target mesh without device
0 the grader's nnx.jit step cannot run on what restore returned (incompatible devices).

The grader's steps after a restore are traced after it, in the process that restored: a step compiled
before the learner's module was imported and reused there (tried and taken back, graders/PERFORMANCE.md,
2026-12-08) gave this module 9/22.

loses: resumed_on_another_mesh_matches_uninterrupted: because of where it put the arrays
loses: restored_leaves_have_the_requested_shardings: SingleDeviceSharding
"""
import jax
import jax.numpy as jnp
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
    state = jax.tree.map(lambda a: a if jax.dtypes.issubdtype(a.dtype, jax.dtypes.prng_key) else jnp.asarray(a),
                         state)
    nnx.update(model, state["params"], state["batch_stats"])
    nnx.update(optimizer, state["optimizer"])
    nnx.update(rngs, state["rngs"])
    return model, optimizer, rngs
