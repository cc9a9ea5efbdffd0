"""Copies the restored state to the devices with jax.device_put_replicated, as the course's code
does after restoring: JAX 0.12 no longer has it.

loses: restored_leaves_have_the_requested_shardings: device_put_replicated
loses: resumed_on_another_mesh_matches_uninterrupted: device_put_replicated
loses: restore_reads_each_shard_straight_onto_its_device: device_put_replicated
"""
import jax
import orbax.checkpoint as ocp
from flax import nnx

from reference.ex10_orbax_resume import pack, save  # noqa: F401  (right as they are)


def restore(path, make_state, mesh, shardings):
    model, optimizer, rngs = nnx.eval_shape(make_state)
    state = ocp.StandardCheckpointer().restore(path, pack(model, optimizer, rngs))
    state = jax.device_put_replicated(state, list(mesh.devices.flat))
    nnx.update(model, state["params"], state["batch_stats"])
    nnx.update(optimizer, state["optimizer"])
    nnx.update(rngs, state["rngs"])
    return model, optimizer, rngs
