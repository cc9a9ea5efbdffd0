"""Exercise 10: resume training from an Orbax checkpoint, restored straight onto another mesh.

A long training job stops (a preemption, a crash, the end of a reservation) and starts again,
maybe on another slice of devices. Resuming must give exactly the run that never stopped. That
needs the whole training state:
  * the parameters;
  * BatchNorm's running statistics (state, not parameters: nnx.BatchStat);
  * the optimizer state with its step: Adam's moments, the counts the warmup schedule reads its
    position from, and nnx.Optimizer's own `step`;
  * the RNG state: the key and the count of the dropout stream (nnx.Rngs).
On restore, the data should go straight to the devices of the new mesh, each device reading only
its own shards: an abstract template (nnx.eval_shape: shapes and dtypes, no arrays) whose leaves
carry the target NamedShardings tells Orbax where each shard goes.

Below are a model with BatchNorm and Dropout, an nnx.Optimizer (AdamW with a warmup schedule), and
a training step that draws one dropout key per step from `rngs`. The grader calls your functions
with its own copy of them, at sizes and settings it draws, starting from a state in mid-training
(non-zero step and counts), so write nothing that depends on the sizes below.

You write `pack`, `save` and `restore`, with orbax.checkpoint (StandardCheckpointer or
CheckpointManager). The grader trains k steps on a (data, model) = (2, 4) mesh of all 8 devices,
calls save(path, model, optimizer, rngs), then restore(path, make_state, mesh, shardings) onto a
mesh of 4 of the devices (or onto the same mesh), and trains m more steps from what restore
returns.

What is checked (`make grade EX=ex10`):
  * the m steps after restoring give the losses and the state of k+m steps trained straight
    through: bit for bit on the same mesh, and on another mesh within the grader's own measured
    rounding (it resumes on that mesh itself to measure it);
  * after restoring: optimizer.step, the schedule's counts and Adam's moments, BatchNorm's
    statistics, and the dropout stream's key and count are those saved;
  * each restored leaf is placed as shardings(leaf) says, on the mesh restore was given;
  * the folder save writes is an Orbax checkpoint that the grader's own StandardCheckpointer reads,
    holding every part of the state; when save returns, it is complete;
  * a second save to the same path raises an error saying the checkpoint exists, or replaces it
    whole (your choice): never a silent mix or a silently dropped save;
  * restore calls make_state only under nnx.eval_shape;
  * while restore runs, each device of the target mesh receives only its own shards, read from the
    checkpoint as shards: nothing goes to other devices, nothing is moved afterwards, and no split
    array is ever whole on one device or on the host.
Right numbers without Orbax, or without a sharded template, score at most half.
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
    """The whole training state, as pytrees Orbax can save.

    Return a dict (or any pytree) holding: the parameters (nnx.state(model, nnx.Param)), the
    BatchNorm statistics (nnx.state(model, nnx.BatchStat)), the optimizer state with its step
    (nnx.state(optimizer)) and the RNG state (nnx.state(rngs)). Called on real objects it gives
    the arrays; called on the abstract objects nnx.eval_shape makes, the same tree of shapes.
    """
    raise NotImplementedError


def save(path, model, optimizer, rngs):
    """Save pack(model, optimizer, rngs) to `path` with orbax.checkpoint, and return only once it
    is written.

    `path` is an absolute path that does not exist yet; its parent does. Use
    ocp.StandardCheckpointer (its save(path, tree)) or an ocp.CheckpointManager (path as its
    directory, a step number of your choice). Orbax writes in the background: wait for it
    (wait_until_finished) before returning. If `path` already holds a checkpoint, raise an error
    that says it exists (StandardCheckpointer does), or replace it whole if you choose to
    (force=True); never leave the old one silently or a mix (a CheckpointManager asked to save a
    step it already has returns False and writes nothing).
    """
    raise NotImplementedError


def restore(path, make_state, mesh, shardings):
    """Read the checkpoint `save` wrote at `path` onto `mesh`; return (model, optimizer, rngs)
    ready to train on.

    make_state() builds a fresh (model, optimizer, rngs) like the one saved: call it only under
    nnx.eval_shape, which gives the same objects holding shapes and dtypes instead of arrays.
    shardings(leaf) returns the NamedSharding on `mesh` where a leaf goes (leaf: anything with a
    .shape, e.g. a jax.ShapeDtypeStruct). Make the template pack(...) of the abstract objects
    with each leaf jax.ShapeDtypeStruct(leaf.shape, leaf.dtype, sharding=shardings(leaf)), restore
    with it (Orbax then reads each shard straight onto its device), and write the restored state
    into the abstract objects (nnx.update) or merge it with their graphdef (nnx.merge). Do not
    jax.device_put afterwards, and do not use jax.device_put_replicated (gone in JAX 0.12).
    Read everything from the checkpoint: the grader calls restore as a job restarted after save
    would, in a process that never saved, with nothing kept in memory since save.
    """
    raise NotImplementedError
