"""nnx.get_abstract_model: the template's shardings come from the partitioning each Variable
carries (nnx.with_partitioning on the kernels, inherited by Adam's moments), which say what
shardings says; restore merges the graphdef with what Orbax read. A second save overwrites the
first, as chosen here (force=True)."""
import orbax.checkpoint as ocp
from flax import nnx


def pack(model, optimizer, rngs):
    return nnx.state((model, optimizer, rngs))


def save(path, model, optimizer, rngs):
    checkpointer = ocp.StandardCheckpointer()
    checkpointer.save(path, pack(model, optimizer, rngs), force=True)
    checkpointer.wait_until_finished()


def restore(path, make_state, mesh, shardings):
    graphdef, template = nnx.get_abstract_model(make_state, mesh)
    state = ocp.StandardCheckpointer().restore(path, template)
    return nnx.merge(graphdef, state)
