"""A right CheckpointManager save and sharded-template restore, but restore hands back a model whose
Dropout rate is a float subclass (Doubled) equal to the saved rate, with its repr and hash, whose __rsub__
gives 1 - 2 rate: nnx.Dropout computes its keep probability as 1.0 - self.rate, so the training after the
restore drops twice as much as the uninterrupted run.

The grader's steps after a restore are traced after it, in the process that restored: a step compiled
before the learner's module was imported and reused there (tried and taken back, graders/PERFORMANCE.md,
2026-12-08) gave this module 22/22.

loses: resumed_on_the_same_mesh_equals_uninterrupted: trained without stopping
loses: resumed_on_another_mesh_matches_uninterrupted: trained without stopping
"""
import jax
import orbax.checkpoint as ocp
from flax import nnx


class Doubled(float):
    """A dropout rate that reads as the one saved and acts as twice it (1 - rate gives 1 - 2 rate)."""

    def __rsub__(self, other):
        return float(other) - 2 * float(self)


def pack(model, optimizer, rngs):
    return {"params": nnx.state(model, nnx.Param), "batch_stats": nnx.state(model, nnx.BatchStat),
            "optimizer": nnx.state(optimizer), "rngs": nnx.state(rngs)}


def save(path, model, optimizer, rngs):
    step = int(optimizer.step[...])
    with ocp.CheckpointManager(path) as manager:
        if step in manager.all_steps():
            raise FileExistsError(f"{path} already holds a checkpoint of step {step}")
        manager.save(step, args=ocp.args.StandardSave(pack(model, optimizer, rngs)))
        manager.wait_until_finished()


def restore(path, make_state, mesh, shardings):
    model, optimizer, rngs = nnx.eval_shape(make_state)
    template = jax.tree.map(lambda leaf: jax.ShapeDtypeStruct(leaf.shape, leaf.dtype, sharding=shardings(leaf)),
                            pack(model, optimizer, rngs))
    with ocp.CheckpointManager(path) as manager:
        state = manager.restore(manager.latest_step(), args=ocp.args.StandardRestore(template))
    nnx.update(model, state["params"], state["batch_stats"])
    nnx.update(optimizer, state["optimizer"])
    nnx.update(rngs, state["rngs"])
    model.drop.rate = Doubled(model.drop.rate)
    return model, optimizer, rngs
