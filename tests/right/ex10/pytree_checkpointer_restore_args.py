"""The older PyTreeCheckpointer with explicit restore_args (ArrayRestoreArgs carrying each leaf's
sharding, made by construct_restore_args), a composite of named items in the checkpoint, and the
args style of save."""
import jax
import orbax.checkpoint as ocp
from flax import nnx


def pack(model, optimizer, rngs):
    return {"model": nnx.state(model), "optimizer": nnx.state(optimizer), "rngs": nnx.state(rngs)}


def save(path, model, optimizer, rngs):
    checkpointer = ocp.AsyncCheckpointer(ocp.PyTreeCheckpointHandler())
    checkpointer.save(path, args=ocp.args.PyTreeSave(pack(model, optimizer, rngs)))
    checkpointer.wait_until_finished()
    checkpointer.close()


def restore(path, make_state, mesh, shardings):
    model, optimizer, rngs = nnx.eval_shape(make_state)
    template = jax.tree.map(lambda leaf: jax.ShapeDtypeStruct(leaf.shape, leaf.dtype, sharding=shardings(leaf)),
                            pack(model, optimizer, rngs))
    restore_args = ocp.checkpoint_utils.construct_restore_args(template)
    state = ocp.PyTreeCheckpointer().restore(path, args=ocp.args.PyTreeRestore(template, restore_args=restore_args))
    for objects, part in ((model, "model"), (optimizer, "optimizer"), (rngs, "rngs")):
        nnx.update(objects, state[part])
    return model, optimizer, rngs
