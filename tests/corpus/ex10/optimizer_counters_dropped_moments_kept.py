"""Saves the whole state but optimizer.step and the schedule's counts (the 0-d integers of
nnx.state(optimizer)): the parameters, BatchNorm statistics, Adam's moments and the dropout stream,
keyed by path, in one CheckpointManager step. Restore sets the step and the counts to 0: the warmup
schedule restarts (its learning rate at step 0 is 0) while Adam's moments carry on.

loses: step_and_schedule_continue: the schedule's counts are
loses: checkpoint_is_an_orbax_folder_holding_the_whole_state: does not hold the optimizer's step
"""
import jax
import numpy as np
import orbax.checkpoint as ocp
from flax import nnx


def pack(model, optimizer, rngs):
    return {"params": nnx.state(model, nnx.Param), "batch_stats": nnx.state(model, nnx.BatchStat),
            "optimizer": nnx.state(optimizer), "rngs": nnx.state(rngs)}


def _step_counter(path, leaf):
    name = jax.tree_util.keystr(path)
    return name.startswith("['optimizer']") and leaf.shape == () and jax.numpy.issubdtype(leaf.dtype, np.integer)


def _split(state):
    flat = jax.tree_util.tree_flatten_with_path(state)[0]
    return ({jax.tree_util.keystr(p): v for p, v in flat if not _step_counter(p, v)},
            {jax.tree_util.keystr(p): v for p, v in flat if _step_counter(p, v)})


def save(path, model, optimizer, rngs):
    arrays, _ = _split(pack(model, optimizer, rngs))
    with ocp.CheckpointManager(path, item_names=("arrays",)) as manager:
        if manager.all_steps():
            raise FileExistsError(f"a checkpoint already exists at {path}")
        manager.save(0, args=ocp.args.Composite(arrays=ocp.args.StandardSave(arrays)))
        manager.wait_until_finished()


def restore(path, make_state, mesh, shardings):
    model, optimizer, rngs = nnx.eval_shape(make_state)
    abstract = pack(model, optimizer, rngs)
    arrays, counters = _split(abstract)
    template = {k: jax.ShapeDtypeStruct(v.shape, v.dtype, sharding=shardings(v)) for k, v in arrays.items()}
    with ocp.CheckpointManager(path, item_names=("arrays",)) as manager:
        got = manager.restore(manager.latest_step(), args=ocp.args.Composite(arrays=ocp.args.StandardRestore(template)))
    values = dict(got.arrays)
    for k, v in counters.items():  # not in the checkpoint: the step and the counts start again
        values[k] = jax.device_put(np.zeros((), v.dtype), shardings(v))
    paths, treedef = jax.tree_util.tree_flatten_with_path(abstract)
    state = jax.tree_util.tree_unflatten(treedef, [values[jax.tree_util.keystr(p)] for p, _ in paths])
    nnx.update(model, state["params"], state["batch_stats"])
    nnx.update(optimizer, state["optimizer"])
    nnx.update(rngs, state["rngs"])
    return model, optimizer, rngs
