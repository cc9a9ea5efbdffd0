"""nnx.split of the three objects at once: the state is one nnx.State, saved whole; restore merges
the graphdef of the abstract objects with what Orbax read. The checkpointer is a context manager,
whose close waits for the write."""
import jax
import orbax.checkpoint as ocp
from flax import nnx


def pack(model, optimizer, rngs):
    return nnx.split((model, optimizer, rngs))[1]


def save(path, model, optimizer, rngs):
    with ocp.StandardCheckpointer() as checkpointer:
        checkpointer.save(path, pack(model, optimizer, rngs))


def restore(path, make_state, mesh, shardings):
    graphdef, abstract = nnx.split(nnx.eval_shape(make_state))
    template = jax.tree.map(lambda leaf: jax.ShapeDtypeStruct(leaf.shape, leaf.dtype, sharding=shardings(leaf)),
                            abstract)
    with ocp.StandardCheckpointer() as checkpointer:
        state = checkpointer.restore(path, template)
    return nnx.merge(graphdef, state)
