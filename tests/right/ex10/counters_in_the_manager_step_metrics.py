"""A CheckpointManager step whose counters are filed as the step's metrics: one item "arrays"
(StandardSave of every leaf of the state but the 0-d integer counters: the floats and the dropout
key, keyed by path), and optimizer.step, the schedule's counts and the dropout stream's count passed
as Python ints in manager.save(..., metrics=...), which Orbax writes as the step's JSON "metrics"
item (for a manager ranking its steps by them: best_fn on the optimizer's step). Restore opens the
manager at `path`, reads the arrays of its latest step with the sharded template and the counters
with manager.metrics(step), placing each where shardings says (replicated): everything comes from
the one Orbax checkpoint at `path`. A second save to a path that already holds a step raises
FileExistsError."""
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
    return ({jax.tree_util.keystr(p): v for p, v in flat if not _counter(v)},
            {jax.tree_util.keystr(p): v for p, v in flat if _counter(v)})


# Orbax files a step's metrics only for a manager that ranks its steps by them (best_fn).
OPTIONS = ocp.CheckpointManagerOptions(best_fn=lambda metrics: metrics["['optimizer']['step']"], best_mode="max")


def save(path, model, optimizer, rngs):
    arrays, counters = _split(pack(model, optimizer, rngs))
    with ocp.CheckpointManager(path, options=OPTIONS, item_names=("arrays",)) as manager:
        if manager.all_steps():
            raise FileExistsError(f"a checkpoint already exists at {path}")
        manager.save(int(optimizer.step.get_value()), args=ocp.args.Composite(arrays=ocp.args.StandardSave(arrays)),
                     metrics={k: int(v) for k, v in counters.items()})
        manager.wait_until_finished()


def restore(path, make_state, mesh, shardings):
    model, optimizer, rngs = nnx.eval_shape(make_state)
    abstract = pack(model, optimizer, rngs)
    arrays, counters = _split(abstract)
    template = {k: jax.ShapeDtypeStruct(v.shape, v.dtype, sharding=shardings(v)) for k, v in arrays.items()}
    with ocp.CheckpointManager(path, options=OPTIONS, item_names=("arrays",)) as manager:
        step = manager.latest_step()
        got = manager.restore(step, args=ocp.args.Composite(arrays=ocp.args.StandardRestore(template)))
        stored = manager.metrics(step)
    values = dict(got.arrays)
    for k, v in counters.items():
        values[k] = jax.device_put(np.asarray(stored[k], v.dtype), shardings(v))
    paths, treedef = jax.tree_util.tree_flatten_with_path(abstract)
    state = jax.tree_util.tree_unflatten(treedef, [values[jax.tree_util.keystr(p)] for p, _ in paths])
    nnx.update(model, state["params"], state["batch_stats"])
    nnx.update(optimizer, state["optimizer"])
    nnx.update(rngs, state["rngs"])
    return model, optimizer, rngs
