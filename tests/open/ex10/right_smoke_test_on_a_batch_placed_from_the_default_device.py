"""Right: the reference's restore followed by a smoke test of what it restored: one forward pass of the
restored model in eval mode (BatchNorm on its running statistics, Dropout off, nothing drawn from the
stream) on a batch of ones (jnp.ones, passed in), under jax.jit on the restored arrays where they
lie, and an assertion that the output is finite. Nothing restored is moved or changed: the batch is
copied onto the mesh, and the forward pass's collective adds the second layer's partial outputs (its
kernel is split by rows) over "model": activations, not state.

11/22 (seeds 20261130, 7, 0; 20261130 and 7 with --sandbox too). Should be 22 (the state is read
straight onto its devices; only the smoke test's input moves). It loses
restore_reads_each_shard_straight_onto_its_device: "4 pieces of the split arrays were copied from one
device to another (shapes (16, 10))": the batch of ones, made by jnp.ones on the default device
(device 0, outside the target), is copied onto the mesh by the jitted forward pass, and every 2-d
piece placed while restore runs is judged as a piece of the state. Made on the mesh from the host
instead, it would fail as "read in another layout"; made inside the program,
tests/open/ex10/right_smoke_test_forward_pass_on_the_restored_model, it fails on the all-reduce.
"""
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


@jax.jit
def _outputs(graphdef, state, x):
    model = nnx.merge(graphdef, state)
    model.eval()  # BatchNorm reads its running statistics; Dropout passes x through
    return model(x, None)


def smoke_test(model):
    """Raise if the restored model's output on a batch of ones is not finite."""
    graphdef, state = nnx.split(model)
    din = model.l1.kernel.value.shape[0]
    y = _outputs(graphdef, state, jnp.ones((SMOKE_BATCH, din), jnp.float32))
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
