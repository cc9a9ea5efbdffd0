"""Right: the reference's restore followed by a smoke test of what it restored: one forward pass of the
restored model in eval mode (BatchNorm on its running statistics, Dropout off, nothing drawn from the
stream) on a batch of ones made inside the program, under jax.jit on the restored arrays where they
lie, and an assertion that the output is finite. Nothing restored is moved or changed: the forward pass's only collective is the
second layer's partial sums (its kernel is split by rows) added over "model", activations and not state.

Full marks: reductions (all-reduce, reduce-scatter) of a program restore runs carry no state from device to device (checks.CARRYING).
"""
import functools

import jax
import jax.numpy as jnp
import orbax.checkpoint as ocp
from flax import nnx

SMOKE_BATCH = 16


def pack(model, optimizer, rngs):
    return {"params": nnx.state(model, nnx.Param),
            "batch_stats": nnx.state(model, nnx.BatchStat),
            "optimizer": nnx.state(optimizer),
            "rngs": nnx.state(rngs)}


def save(path, model, optimizer, rngs):
    checkpointer = ocp.StandardCheckpointer()
    checkpointer.save(path, pack(model, optimizer, rngs))
    checkpointer.wait_until_finished()


@functools.partial(jax.jit, static_argnums=(0, 2))
def _outputs(graphdef, state, din):
    x = jnp.ones((SMOKE_BATCH, din), jnp.float32)  # made inside the program: nothing placed
    model = nnx.merge(graphdef, state)
    model.eval()  # BatchNorm reads its running statistics; Dropout passes x through
    return model(x, None)


def smoke_test(model):
    """Raise if the restored model's output on a batch of ones is not finite."""
    graphdef, state = nnx.split(model)
    din = model.l1.kernel.value.shape[0]
    y = _outputs(graphdef, state, din)
    if not bool(jnp.isfinite(y).all()):
        raise ValueError("the restored model's output is not finite: the checkpoint is damaged")


def restore(path, make_state, mesh, shardings):
    model, optimizer, rngs = nnx.eval_shape(make_state)
    template = jax.tree.map(lambda leaf: jax.ShapeDtypeStruct(leaf.shape, leaf.dtype, sharding=shardings(leaf)),
                            pack(model, optimizer, rngs))
    state = ocp.StandardCheckpointer().restore(path, template)
    nnx.update(model, state["params"], state["batch_stats"])
    nnx.update(optimizer, state["optimizer"])
    nnx.update(rngs, state["rngs"])
    smoke_test(model)
    return model, optimizer, rngs
