"""Exercise 9: AdamW by hand with a decay mask, and ZeRO-1 on a data-parallel mesh.

Adam keeps two moments per parameter, so its state is twice the parameters' size. Optax has no
sharding logic: its state is made with zeros_like from the parameters, so under data parallelism
(parameters replicated) every device keeps a whole copy of it. ZeRO-1 splits the optimizer state
over the "data" axis while the parameters stay replicated: the gradients are reduce-scattered
(each device gets the sum of its 1/N block only), each device updates its block of the moments and
of the parameters, and the updated blocks are all-gathered back to replicated parameters.

AdamW (the chapter's section 6.9), with g the gradient and t the step count after this step:
  1. m_t = b1 * m_{t-1} + (1 - b1) * g          v_t = b2 * v_{t-1} + (1 - b2) * g**2
  2. m_hat = m_t / (1 - b1**t)                   v_hat = v_t / (1 - b2**t)
  3. theta' = theta_{t-1} - lr * m_hat / (sqrt(v_hat) + eps)
  4. theta_t = theta' - lr * wd * theta_{t-1}    (masked leaves only; decoupled decay)
The decay is not added to the gradient (that is Adam with L2, a different optimizer), it uses the
parameters from before the step, and biases and norm scales are not decayed.

The model below is given and must not change: params is a dict
  {"dense1": {"kernel": (d_in, d_hidden), "bias": (d_hidden,)},
   "norm":   {"scale": (d_hidden,)},
   "dense2": {"kernel": (d_hidden, d_out), "bias": (d_out,)}}
of float32 arrays; x is (B, d_in), y is (B, d_out). The grader chooses the sizes (some leaves have
an axis the mesh's "data" size divides, some do not), the data and the hyper-parameters.

The optimizer state is a dict {"mu": <tree like params>, "nu": <tree like params>,
"count": int32 scalar} (count = the number of steps taken so far).

The grader builds 1-D meshes with jax.make_mesh((n,), ("data",), devices=jax.devices()[:n]) for
n = 8, 4 and 2 (Explicit axes, 0.12's default; `make_mesh` below does the same) and calls your
step under `with jax.set_mesh(mesh):`, with the parameters replicated, P(), and x and y split by
rows, P("data", None). Never write a mesh size as a number: read mesh.shape["data"].

What is checked (`make grade EX=ex9`):
  * decay_mask on the tree below and on trees of the grader's own (other names, lists, nesting);
  * adamw_step against optax.adamw(..., mask=...) over several steps from a fresh state, and
    against the grader's float64 arithmetic from a saved state (a count > 0, moments not zero),
    both with a mask of the grader's choosing and some gradients as small as eps;
  * init_zero1_state on meshes of 8, 4 and 2 devices: the moments are zeros, each placed by the
    rule in its docstring, so that a device holds 1/N of every moment that can be split;
  * 5 steps of your ZeRO-1 step on each mesh against the grader's own single-device AdamW
    (params and losses); after every step the parameters are replicated and the moments still
    split as init_zero1_state placed them;
  * the compiled step (read from its HLO): the updated parameters are all-gathered, once each,
    and nothing else is (not the moments, not the gradients);
  * the traced step: no lax.psum you write (or shard_map adds) sums a whole gradient, in any shape,
    to be sliced after (under jax.jit the compiler's own reduction is not judged: on CPU it is an
    all-reduce and a slice even when written right);
  * per-device FLOPs of the optimizer's part of the compiled step are about 1/N of the grader's
    own single-device AdamW update: each device updates only its blocks.
Right numbers with the optimizer state replicated (no ZeRO-1) score at most half of the points.
"""

import jax
import jax.numpy as jnp
from jax import lax
from jax.sharding import NamedSharding  # noqa: F401
from jax.sharding import PartitionSpec as P  # noqa: F401

LN_EPS = 1e-5


def init_params(key, d_in, d_hidden, d_out):
    """Given: float32 parameters of the model, for trying your code (the grader draws its own)."""
    k1, k2 = jax.random.split(key)
    return {"dense1": {"kernel": jax.random.normal(k1, (d_in, d_hidden)) / jnp.sqrt(d_in),
                       "bias": jnp.zeros((d_hidden,))},
            "norm": {"scale": jnp.ones((d_hidden,))},
            "dense2": {"kernel": jax.random.normal(k2, (d_hidden, d_out)) / jnp.sqrt(d_hidden),
                       "bias": jnp.zeros((d_out,))}}


def mlp(params, x):
    """Given: dense, LayerNorm (a scale, no offset), tanh, dense."""
    h = x @ params["dense1"]["kernel"] + params["dense1"]["bias"]
    mean = jnp.mean(h, axis=-1, keepdims=True)
    var = jnp.mean((h - mean) ** 2, axis=-1, keepdims=True)
    h = (h - mean) * lax.rsqrt(var + LN_EPS) * params["norm"]["scale"]
    return jnp.tanh(h) @ params["dense2"]["kernel"] + params["dense2"]["bias"]


def loss(params, x, y):
    """Given: the mean squared error over every element (a float32 scalar)."""
    return jnp.mean((mlp(params, x) - y) ** 2)


def make_mesh(n=8):
    """Given: a 1-D mesh of the first n devices, its axis named "data"."""
    return jax.make_mesh((n,), ("data",), devices=jax.devices()[:n])


def decay_mask(params):
    """Which leaves weight decay applies to: a pytree with exactly params' structure, one Python
    bool per leaf, True for weight matrices and False for biases and norm scales.

    Decide by the leaf's shape, not its name: True when leaf.ndim >= 2, False otherwise (a 1-D
    bias or scale, a 0-d scalar). params may be any pytree of arrays (dicts, lists, tuples,
    nested); the grader calls it on trees with other names and shapes than the model's.
    """
    raise NotImplementedError


def adamw_step(params, grads, state, lr, b1, b2, eps, wd, mask):
    """One AdamW step, by hand (no optax), on every leaf of params: returns (params, state).

    state = {"mu": tree, "nu": tree, "count": int32 scalar}; grads and both moments have params'
    structure; lr, b1, b2, eps, wd are Python floats; mask is decay_mask's kind of tree (Python
    bools, or anything `if` can read). Follow the five steps of the module docstring: count + 1
    is the t of the bias correction; the decay -lr * wd * theta uses the parameters passed in,
    and only where mask is True. Return the new params and {"mu", "nu", "count": count + 1}.
    It must work under jax.jit (the grader calls it jitted, with the mask and the
    hyper-parameters fixed), on blocks of the leaves as well as on whole leaves.
    """
    raise NotImplementedError


def init_zero1_state(params, mesh):
    """The ZeRO-1 optimizer state for replicated params: {"mu", "nu", "count"}, placed on mesh.

    mu and nu are float32 zeros shaped like params. Split each moment over "data" along the
    FIRST axis of its leaf that mesh.shape["data"] divides: e.g. on 8 devices a (12, 48) leaf is
    placed P(None, "data") (12 is not a multiple of 8, 48 is) and a (48,) leaf P("data"). A leaf
    with no such axis (say (5,)) stays replicated, P(). count is an int32 0, replicated. Use
    jax.device_put(..., NamedSharding(mesh, spec)). The parameters themselves stay replicated:
    this function does not move them.
    """
    raise NotImplementedError


def make_zero1_step(mesh, lr=1e-3, b1=0.9, b2=0.999, eps=1e-8, wd=1e-2):
    """Return a jitted ZeRO-1 training step: step(params, state, x, y) -> (params, state, loss).

    params arrive replicated, P(); state as init_zero1_state placed it; x and y split by rows,
    P("data", None). loss is the given loss of the params passed in, over the whole batch (a
    float32 scalar). In the step:
      * the gradient of each leaf is reduce-scattered to its moments' placement: each device
        gets the sum over the whole batch of ITS block only (leaves kept replicated get the whole
        sum);
      * each device runs adamw_step on its blocks of the moments and of the parameters, with
        decay_mask's mask of the whole params and the hyper-parameters given here;
      * the updated parameter blocks are all-gathered: params come back replicated, the new
        state split as it came in.
    Write it with shardings under jax.jit (jax.reshard, out_shardings; on Explicit axes
    jax.lax.with_sharding_constraint only asserts a sharding, so use it inside
    jax.sharding.auto_axes), or with jax.shard_map(..., mesh=mesh) and lax.psum_scatter /
    lax.all_gather; either is fine, the compiled program is graded. In shard_map, differentiate
    with respect to the parameters made varying (lax.pcast(params, "data", to="varying")):
    the gradient of a replicated input is otherwise summed whole for you, by an all-reduce.
    """
    raise NotImplementedError
