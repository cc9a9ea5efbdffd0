"""Restores from an nnx.eval_shape template whose leaves carry no sharding: Orbax reads every array
onto the devices it was saved from (the checkpoint's own shardings), and restore then moves it with
jax.device_put. Every number is right.

technique: none
loses: restore_reads_each_shard_straight_onto_its_device: which are not in the mesh restore was given
"""
import jax
import orbax.checkpoint as ocp
from flax import nnx

from reference.ex10_orbax_resume import pack, save  # noqa: F401  (right as they are)


def restore(path, make_state, mesh, shardings):
    model, optimizer, rngs = nnx.eval_shape(make_state)
    state = ocp.StandardCheckpointer().restore(path, pack(model, optimizer, rngs))
    state = jax.tree.map(lambda a: jax.device_put(a, shardings(a)), state)
    nnx.update(model, state["params"], state["batch_stats"])
    nnx.update(optimizer, state["optimizer"])
    nnx.update(rngs, state["rngs"])
    return model, optimizer, rngs
