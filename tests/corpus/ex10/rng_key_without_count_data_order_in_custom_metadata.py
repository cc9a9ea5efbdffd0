"""tests/corpus/ex10/rng_key_without_count (the dropout stream's key saved, its count not: the stream
restarts at 0 and dropout repeats its masks) with the data loader's fixed shuffle order, a permutation
of 0..255 drawn once from a constant seed, filed in the checkpoint's custom_metadata (as jobs file
their input pipeline's settings there). The order is the same for every run and every save: it holds
no counter of the state, and restore never reads it.

18/22 at seeds 20261130 and 7 since a document of more than MAX_BOOKKEEPING numbers (the shuffle order) attests no counter
(checks.bookkeeping); 19/22 before.

loses: checkpoint_is_an_orbax_folder_holding_the_whole_state: does not hold the dropout stream
loses: dropout_stream_continues: the dropout stream's count is
"""
import jax
import numpy as np
import orbax.checkpoint as ocp
from flax import nnx

# The input pipeline's epoch order: fixed for the run, independent of the training state.
DATA_ORDER = [int(i) for i in np.random.default_rng(1234).permutation(256)]


def pack(model, optimizer, rngs):
    return {"model": nnx.state(model), "optimizer": nnx.state(optimizer), "key": rngs.dropout.key}


def save(path, model, optimizer, rngs):
    checkpointer = ocp.StandardCheckpointer()
    checkpointer.save(path, pack(model, optimizer, rngs), custom_metadata={"data": {"shuffle_order": DATA_ORDER}})
    checkpointer.wait_until_finished()


def restore(path, make_state, mesh, shardings):
    model, optimizer, rngs = nnx.eval_shape(make_state)
    template = jax.tree.map(lambda leaf: jax.ShapeDtypeStruct(leaf.shape, leaf.dtype, sharding=shardings(leaf)),
                            pack(model, optimizer, rngs))
    state = ocp.StandardCheckpointer().restore(path, template)
    nnx.update(model, state["model"])
    nnx.update(optimizer, state["optimizer"])
    key = state["key"]
    rngs.dropout.key.set_value(key.get_value() if hasattr(key, "get_value") else key)
    rngs.dropout.count.set_value(jax.device_put(jax.numpy.zeros((), jax.numpy.uint32), shardings(rngs.dropout.count)))
    return model, optimizer, rngs
