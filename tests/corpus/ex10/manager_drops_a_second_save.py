"""Saves with a CheckpointManager at the optimizer's step, and ignores what save returns: a second
save at a step the folder already has writes nothing, and says nothing.

loses: saving_twice_is_an_error_or_an_overwrite: silently dropped
"""
import jax
import orbax.checkpoint as ocp
from flax import nnx

from reference.ex10_orbax_resume import pack


def save(path, model, optimizer, rngs):
    with ocp.CheckpointManager(path) as manager:
        manager.save(int(optimizer.step[...]), args=ocp.args.StandardSave(pack(model, optimizer, rngs)))
        manager.wait_until_finished()


def restore(path, make_state, mesh, shardings):
    model, optimizer, rngs = nnx.eval_shape(make_state)
    template = jax.tree.map(lambda leaf: jax.ShapeDtypeStruct(leaf.shape, leaf.dtype, sharding=shardings(leaf)),
                            pack(model, optimizer, rngs))
    with ocp.CheckpointManager(path) as manager:
        state = manager.restore(manager.latest_step(), args=ocp.args.StandardRestore(template))
    nnx.update(model, state["params"], state["batch_stats"])
    nnx.update(optimizer, state["optimizer"])
    nnx.update(rngs, state["rngs"])
    return model, optimizer, rngs
