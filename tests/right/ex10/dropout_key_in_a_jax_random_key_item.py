"""A CheckpointManager step with two items: "state" (StandardSave of the whole state but the dropout
stream's key: parameters, BatchNorm statistics, nnx.state(optimizer), the dropout count) and
"dropout_key" (ocp.args.JaxRandomKeySave, Orbax's own handler for a typed JAX PRNG key, which keeps
the key's implementation beside its data). Restore opens the manager at `path` and reads both items
of its latest step: StandardRestore with the sharded template, and JaxRandomKeyRestore with
ArrayRestoreArgs placing the key where shardings says (replicated). Everything comes from the one
Orbax checkpoint at `path`. A second save to a path that already holds a step raises FileExistsError.

The key item's array is read and written again with Orbax's ArrayCheckpointHandler (checks.read_tree)."""
import jax
import orbax.checkpoint as ocp
from flax import nnx


def pack(model, optimizer, rngs):
    rng_state = nnx.state(rngs)
    return {"params": nnx.state(model, nnx.Param), "batch_stats": nnx.state(model, nnx.BatchStat),
            "optimizer": nnx.state(optimizer), "dropout_count": rng_state["dropout"]["count"]}


def save(path, model, optimizer, rngs):
    key = rngs.dropout.key.get_value()
    with ocp.CheckpointManager(path, item_names=("state", "dropout_key")) as manager:
        if manager.all_steps():
            raise FileExistsError(f"a checkpoint already exists at {path}")
        manager.save(int(optimizer.step.get_value()), args=ocp.args.Composite(
            state=ocp.args.StandardSave(pack(model, optimizer, rngs)), dropout_key=ocp.args.JaxRandomKeySave(key)))
        manager.wait_until_finished()


def restore(path, make_state, mesh, shardings):
    model, optimizer, rngs = nnx.eval_shape(make_state)
    template = jax.tree.map(lambda leaf: jax.ShapeDtypeStruct(leaf.shape, leaf.dtype, sharding=shardings(leaf)),
                            pack(model, optimizer, rngs))
    key_sharding = shardings(rngs.dropout.key.get_value())
    with ocp.CheckpointManager(path, item_names=("state", "dropout_key")) as manager:
        got = manager.restore(manager.latest_step(), args=ocp.args.Composite(
            state=ocp.args.StandardRestore(template),
            dropout_key=ocp.args.JaxRandomKeyRestore(ocp.ArrayRestoreArgs(sharding=key_sharding))))
    state = got.state
    nnx.update(model, state["params"], state["batch_stats"])
    nnx.update(optimizer, state["optimizer"])
    rngs.dropout.count.set_value(state["dropout_count"].get_value() if hasattr(state["dropout_count"], "get_value")
                                 else state["dropout_count"])
    rngs.dropout.key.set_value(got.dropout_key)
    return model, optimizer, rngs
