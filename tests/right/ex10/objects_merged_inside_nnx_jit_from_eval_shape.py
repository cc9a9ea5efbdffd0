"""The returned objects built inside a compiled nnx.jit: restore reads the checkpoint with a template from
nnx.eval_shape(make_state) (each leaf given shardings(leaf)), then passes make_state (static) and the
restored state to an nnx.jit function that calls nnx.eval_shape(make_state) inside its trace and updates
those abstract objects with the restored arrays. The jit is compiled and run, but the shape evaluation
inside it traces make_state into a program of its own that is discarded: the compiled program holds none of
make_state's equations, only the restored arrays passed through.

Full marks: 22/22 in both modes (with and without --sandbox) at seeds 20261130, 7 and 0 (a compiled program
without make_state's equations is not marked).
"""
import jax
import orbax.checkpoint as ocp
from flax import nnx


def pack(model, optimizer, rngs):
    return {"params": nnx.state(model, nnx.Param), "batch_stats": nnx.state(model, nnx.BatchStat),
            "optimizer": nnx.state(optimizer), "rngs": nnx.state(rngs)}


def save(path, model, optimizer, rngs):
    checkpointer = ocp.StandardCheckpointer()
    checkpointer.save(path, pack(model, optimizer, rngs))
    checkpointer.wait_until_finished()


def _fill(objects, state):
    model, optimizer, rngs = objects
    nnx.update(model, state["params"], state["batch_stats"])
    nnx.update(optimizer, state["optimizer"])
    nnx.update(rngs, state["rngs"])
    return model, optimizer, rngs


@nnx.jit(static_argnums=0)
def _built(make_state, state):
    return _fill(nnx.eval_shape(make_state), state)


def restore(path, make_state, mesh, shardings):
    abstract = nnx.eval_shape(make_state)
    template = jax.tree.map(lambda leaf: jax.ShapeDtypeStruct(leaf.shape, leaf.dtype, sharding=shardings(leaf)),
                            pack(*abstract))
    state = ocp.StandardCheckpointer().restore(path, template)
    return _built(make_state, state)
