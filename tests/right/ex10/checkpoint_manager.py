"""A CheckpointManager, the path as its directory and the optimizer's step as the checkpoint's
number; a second save at a step the folder has raises, since the manager would drop it silently."""
import jax
import orbax.checkpoint as ocp
from flax import nnx


def pack(model, optimizer, rngs):
    return {"params": nnx.state(model, nnx.Param), "batch_stats": nnx.state(model, nnx.BatchStat),
            "optimizer": nnx.state(optimizer), "rngs": nnx.state(rngs)}


def save(path, model, optimizer, rngs):
    step = int(optimizer.step[...])
    with ocp.CheckpointManager(path) as manager:
        if step in manager.all_steps():
            raise FileExistsError(f"{path} already holds a checkpoint of step {step}")
        manager.save(step, args=ocp.args.StandardSave(pack(model, optimizer, rngs)))
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
