"""One CheckpointManager per checkpoint directory, kept for the process's life and never reloaded: save
and restore get the manager for `path` from a module-level dict (made on first use); save files the whole
state (the reference's pack, StandardSave) under step int(optimizer.step) and waits for it (a step the
manager already has raises), restore reads the manager's latest_step() with the reference's sharded
nnx.eval_shape template. A manager lists the step folders once and then keeps its own list: a checkpoint
replaced at that directory since (by another job, or copied in) is not seen, and restore asks for a step
folder that is gone (Orbax's docs: call manager.reload() when the directory changed). With reload() before
restoring it is right: tests/right/ex10/one_manager_per_directory_reloaded.

Graded 11/22 in both modes at seeds 20261130 and 7 while the grader's rewrite of the checkpoint moved the
step folder on (the stale manager asked for the old one); 22/22 (seed 20261130) now that the rewrite keeps
every name: the checkpoint the grader writes at the path save wrote has the step the manager lists, and
its files are read afresh. Should be 11/22: a checkpoint of another step written there is not seen.
"""
import jax
import orbax.checkpoint as ocp
from flax import nnx

_MANAGERS = {}


def _manager(path):
    if path not in _MANAGERS:
        _MANAGERS[path] = ocp.CheckpointManager(path)
    return _MANAGERS[path]


def pack(model, optimizer, rngs):
    return {"params": nnx.state(model, nnx.Param), "batch_stats": nnx.state(model, nnx.BatchStat),
            "optimizer": nnx.state(optimizer), "rngs": nnx.state(rngs)}


def save(path, model, optimizer, rngs):
    manager = _manager(path)
    step = int(optimizer.step.get_value())
    if not manager.save(step, args=ocp.args.StandardSave(pack(model, optimizer, rngs))):
        raise FileExistsError(f"a checkpoint of step {step} already exists in {path}")
    manager.wait_until_finished()


def restore(path, make_state, mesh, shardings):
    model, optimizer, rngs = nnx.eval_shape(make_state)
    template = jax.tree.map(lambda leaf: jax.ShapeDtypeStruct(leaf.shape, leaf.dtype, sharding=shardings(leaf)),
                            pack(model, optimizer, rngs))
    manager = _manager(path)
    state = manager.restore(manager.latest_step(), args=ocp.args.StandardRestore(template))
    nnx.update(model, state["params"], state["batch_stats"])
    nnx.update(optimizer, state["optimizer"])
    nnx.update(rngs, state["rngs"])
    return model, optimizer, rngs
