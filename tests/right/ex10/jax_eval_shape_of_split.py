"""jax.eval_shape (not nnx.eval_shape) of a function that builds and splits the state, the
shardings set with a tree_map over the ShapeDtypeStructs, and a context-managed checkpointer per
call; the restored state merged back with the graphdef."""
import jax
import orbax.checkpoint as ocp
from flax import nnx


def pack(model, optimizer, rngs):
    return {"state": nnx.state((model, optimizer, rngs))}


def save(path, model, optimizer, rngs):
    with ocp.StandardCheckpointer() as checkpointer:
        checkpointer.save(path, pack(model, optimizer, rngs))
        checkpointer.wait_until_finished()


def restore(path, make_state, mesh, shardings):
    graphdef = None

    def abstract():
        nonlocal graphdef
        graphdef, state = nnx.split(make_state())
        return state

    shapes = jax.eval_shape(abstract)
    template = {"state": jax.tree.map(lambda s: s.update(sharding=shardings(s)), shapes)}
    with ocp.StandardCheckpointer() as checkpointer:
        state = checkpointer.restore(path, template)["state"]
    return nnx.merge(graphdef, state)
