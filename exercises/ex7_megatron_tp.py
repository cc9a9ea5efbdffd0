"""Exercise 7: Megatron tensor parallelism on a 2-D (data, model) mesh.

Model: y = relu(x @ w1) @ w2, float32, with
  w1 (D, H)   split by columns over "model": P(None, "model")  (each device: D x H/model)
  w2 (H, D)   split by rows over "model":    P("model", None)  (each device: H/model x D)
  x  (B, D)   split by rows over "data":     P("data", None)   (each device: B/data x D)
The output y (B, D) comes out P("data", None). Because relu works element by element, each device
computes relu(x_blk @ w1_blk) for its own H/model hidden units without talking to anyone; the
second matmul then gives each device a partial sum over its hidden units, and ONE all-reduce over
"model" adds them. That is the whole communication of the forward pass.

The grader builds meshes with jax.make_mesh(shape, ("data", "model")) (Explicit axes, 0.12's
default), places the inputs as above, and calls your functions under `with jax.set_mesh(mesh):`.
It picks D, H, B and the mesh shapes (2, 4), (4, 2), (1, 8) and (8, 1): assume none of them, and
never write an axis size as a number.

What is checked (`make grade EX=ex7`):
  * tp_mlp and the shard_map version equal relu(x @ w1) @ w2 computed in NumPy float64, on all four
    meshes, and both outputs come out sharded P("data", None);
  * tp_mlp returns the second matmul itself, taking the split hidden units as they are and stating
    out_sharding=P("data", None);
  * the shard_map version returns its shard_map's result, and the body returns exactly one
    lax.psum over "model" only, of the (B/data, D) partial sums, with no other collective;
  * the compiled forward pass of each version holds exactly one all-reduce and no all-gather,
    reduce-scatter, all-to-all or collective-permute;
  * each device does its share of the work: per-device FLOPs of both forwards are about
    1/(data*model) of a single-device program's, and those of the compiled training step about
    1/(data*model) of your own step's compiled on one device;
  * 5 training steps with optax.sgd(0.1, momentum=0.9), and 5 with optax.adam, match the grader's
    own single-device training (params and losses);
  * the step make_tp_train_step returns is jitted as it is (the grader calls it as you return it),
    and its compiled program holds no collective that Megatron's step does not need (the grader
    compiles its own on the same mesh): no gathered predictions, gradients, updates or moments;
  * init_tp_state returns the parameters placed Megatron-style and an optimizer state whose
    moments carry the same specs, on all four meshes, and a training step keeps them.
The checks of the technique run on a (2, 4) or a (4, 2) mesh, and D, H and B for each mesh, drawn
at grading time.
"""

import jax
import jax.numpy as jnp
import optax
from jax import lax
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P


def tp_mlp(w1, w2, x):
    """The global view: write the model as if on one device and say where the result lives.

    Called (under jax.jit) with w1 P(None, "model"), w2 P("model", None), x P("data", None) on a
    mesh with Explicit axes. Compute h = relu(x @ w1) (its sharding follows from the inputs), then
    the second matmul with jnp.matmul(h, w2, out_sharding=P("data", None)): its contracting dim is
    split, so JAX cannot guess where the sum should live and asks you. Return y (B, D), float32,
    sharded P("data", None). Do not reshard the inputs: moving the weights is communication.
    """
    raise NotImplementedError


def make_tp_mlp_shard_map(mesh):
    """The per-device view: return jax.shard_map(f, mesh=mesh, in_specs=..., out_specs=...).

    f(w1_blk, w2_blk, x_blk) sees this device's blocks (D, H/model), (H/model, D), (B/data, D);
    it computes the partial sum relu(x_blk @ w1_blk) @ w2_blk, of shape (B/data, D), and adds the
    partial sums of the "model" axis with exactly one lax.psum(..., "model"). Use
      in_specs=(P(None, "model"), P("model", None), P("data", None)), out_specs=P("data", None)
    and pass `mesh` on (each call gets the mesh it must run on).
    """
    raise NotImplementedError


def init_tp_state(mesh, tx, params):
    """Place the parameters Megatron-style and build the optimizer state for them.

    params = {"w1": (D, H), "w2": (H, D)}, NumPy float32 arrays on the host. Return
    (placed, opt_state): placed["w1"] on NamedSharding(mesh, P(None, "model")), placed["w2"] on
    NamedSharding(mesh, P("model", None)) (jax.device_put), and opt_state = tx.init(...) of the
    placed parameters, so that each moment (e.g. Adam's mu and nu) is split like its parameter.
    """
    raise NotImplementedError


def make_tp_train_step(mesh, tx):
    """Return a jitted step(params, opt_state, x, y) -> (params, opt_state, loss).

    loss = mean((tp_mlp(params["w1"], params["w2"], x) - y) ** 2) over every element (float32
    scalar); take jax.value_and_grad of it, then tx.update(grads, opt_state, params) and
    optax.apply_updates. params arrive split as above, x and y as P("data", None), and opt_state
    as tx.init of the placed params; the step is called under jax.set_mesh(mesh). The returned
    params and opt_state keep the specs they came in with.
    """
    raise NotImplementedError
