"""The reference's restore, then the restored parameters' global norm computed and logged: a jitted
optax.global_norm over nnx.state(model, nnx.Param) on the arrays where they lie (each split kernel's sum
of squares added over "model" by an all-reduce of one number), the norm written to the log so that a
job's log shows what it resumed from. Restore-time arithmetic on the restored state whose collectives
carry scalars, not shards.

22/22 in both modes (seeds 20261130, 7): the all-reduces of restore's programs carry a few numbers, fewer
than a shard holds.
"""
import logging

import jax
import optax
import orbax.checkpoint as ocp
from flax import nnx

log = logging.getLogger(__name__)


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
def _norm(params):
    return optax.global_norm(params)


def restore(path, make_state, mesh, shardings):
    model, optimizer, rngs = nnx.eval_shape(make_state)
    template = jax.tree.map(lambda leaf: jax.ShapeDtypeStruct(leaf.shape, leaf.dtype, sharding=shardings(leaf)),
                            pack(model, optimizer, rngs))
    state = ocp.StandardCheckpointer().restore(path, template)
    log.info("restored %s: parameter norm %.6g", path, float(_norm(state["params"])))
    nnx.update(model, state["params"], state["batch_stats"])
    nnx.update(optimizer, state["optimizer"])
    nnx.update(rngs, state["rngs"])
    return model, optimizer, rngs
