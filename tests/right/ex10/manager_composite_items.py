"""A CheckpointManager with one named item per part of the state (Composite args), a fixed step
number, and the save's returned flag checked: a second save that the manager would skip raises."""
import jax
import orbax.checkpoint as ocp
from flax import nnx

STEP = 0


def pack(model, optimizer, rngs):
    return {"model": nnx.state(model), "optimizer": nnx.state(optimizer), "rngs": nnx.state(rngs)}


def save(path, model, optimizer, rngs):
    manager = ocp.CheckpointManager(path, item_names=("model", "optimizer", "rngs"))
    parts = pack(model, optimizer, rngs)
    saved = manager.save(STEP, args=ocp.args.Composite(**{k: ocp.args.StandardSave(v) for k, v in parts.items()}))
    manager.wait_until_finished()
    manager.close()
    if not saved:
        raise FileExistsError(f"a checkpoint already exists at {path}; not overwriting it")


def restore(path, make_state, mesh, shardings):
    objects = nnx.eval_shape(make_state)
    parts = pack(*objects)
    templates = {k: jax.tree.map(lambda leaf: jax.ShapeDtypeStruct(leaf.shape, leaf.dtype, sharding=shardings(leaf)), v)
                 for k, v in parts.items()}
    manager = ocp.CheckpointManager(path, item_names=("model", "optimizer", "rngs"))
    restored = manager.restore(STEP, args=ocp.args.Composite(**{k: ocp.args.StandardRestore(v)
                                                                 for k, v in templates.items()}))
    manager.close()
    for objects_part, name in zip(objects, ("model", "optimizer", "rngs")):
        nnx.update(objects_part, restored[name])
    return objects
