"""Exercise 8: dynamic loss scaling for fp16, written by hand.

fp16 keeps 5 exponent bits: its smallest normal number is about 6.1e-5, so the gradients of a
loss with a small weight fall into the subnormal range during the backward pass and many become
exactly 0. Multiplying the loss by a scale S *before* differentiating makes every cotangent of
the backward pass S times larger, out of the underflow range; dividing the gradients by S
afterwards (in fp32) gives the true gradients back. Too large an S overflows to inf instead, so
the scale is adjusted while training: shrink it and skip the step on an overflow, grow it after
`period` good steps in a row. Optax 0.2.x has no loss-scaling tool, so you write it yourself.

The model below is given and must not change: the parameters (a dict of float32 arrays,
w1 (D, H), b1 (H,), w2 (H, K), b2 (K,)) are cast to float16 for the compute, the loss comes back
in float32, and LOSS_WEIGHT makes the true gradients smaller than fp16's smallest normal number.
x is (N, D) float32, y is (N, K) float32; the grader chooses N, D, H, K and the data.

What is checked (`make grade EX=ex8`):
  * dyn_scale_step against the grader's own step-by-step simulation, on sequences of finite
    flags that reach every branch (growth exactly at `period`, shrinking, the `min_scale` floor,
    the counter reset, an overflow at every count), from non-zero counters, for several periods
    and factors; it must also run under jax.jit and inside lax.scan, and the scale must stay
    float32;
  * all_finite on trees of float16 and float32 leaves (an inf, -inf or NaN in any one of them,
    and finite values so large that their sums and squares overflow);
  * scaled_grads against float64 gradients: with scale 1 a share of the entries underflows to 0
    as in fp16; with scale 2**15 none does and the error is no more than fp16's own; with scale
    2**32 it reports "not finite"; the gradients come back float32, computed in fp16 (every
    dot_general of the traced program has float16 operands);
  * train_fp16_dynamic against the grader's own simulation of the same steps with an Adam
    optimizer it chooses, from several ls0: skipped steps leave the parameters and Adam's state
    exactly unchanged, the scales follow the rule, and from a scale far too large it recovers;
  * the training loop is one loop of `steps` steps (lax.scan; fori_loop or while_loop do too)
    inside one jax.jit, not unrolled (its program must not grow with `steps`), computing in
    fp16; one step of it, run on its own, skips when any gradient is not finite and otherwise
    updates with that step's scaled fp16 gradients.
The gradients' numbers count only when they are computed in fp16 (where loss scaling matters),
and the loop's only when it is one loop: right numbers without the technique (an fp32 model, a
Python loop, an unrolled scan) score at most half of the points.
"""

from typing import NamedTuple

import jax
import jax.numpy as jnp
import optax  # noqa: F401  (tx is an optax.GradientTransformation)
from jax import lax  # noqa: F401

LOSS_WEIGHT = 5e-5


class DynScale(NamedTuple):
    scale: jax.Array       # float32 scalar: the current loss scale
    good_steps: jax.Array  # int32 scalar: finite steps in a row since the last change of scale


def fp16_loss(params, x, y):
    """Given: fp32 parameters cast to fp16 for the compute; returns the loss as a float32 scalar."""
    f16 = jnp.float16
    h = jnp.tanh(x.astype(f16) @ params["w1"].astype(f16) + params["b1"].astype(f16))
    out = h @ params["w2"].astype(f16) + params["b2"].astype(f16)
    return LOSS_WEIGHT * jnp.mean((out.astype(jnp.float32) - y) ** 2)


def all_finite(tree):
    """True when every entry of every leaf of `tree` is finite (no inf, no NaN).

    Returns: a boolean JAX array of shape () (not a Python bool: it must work under jit).
    """
    raise NotImplementedError


def scaled_grads(params, x, y, scale):
    """Gradients of fp16_loss(params, x, y) * scale with respect to params, divided by scale.

    Multiply the loss by `scale` (a float32 scalar, possibly traced) *before* differentiating,
    then unscale each gradient in float32.
    Returns: (grads, finite): grads has the structure of params, float32 leaves of the same
    shapes; finite is all_finite(grads), a boolean array of shape ().
    """
    raise NotImplementedError


def dyn_scale_step(ls, finite, period=50, factor=2.0, min_scale=1.0):
    """The next DynScale after a step whose gradients were `finite` (a boolean array, maybe traced).

    finite:     good_steps + 1; when that reaches `period`, the scale is multiplied by `factor`
                and good_steps goes back to 0.
    not finite: the scale is divided by `factor`, but never goes below `min_scale`; good_steps
                goes to 0.
    Choose with jnp.where / lax.select, not a Python `if`: it must run inside jit and lax.scan.
    Keep the scale float32 and good_steps an integer.
    """
    raise NotImplementedError


def train_fp16_dynamic(params, x, y, ls0, steps, tx):
    """`steps` training steps with dynamic loss scaling, in one jax.jit and one lax.scan.

    Args: params (fp32 dict as above), x, y, ls0 (a DynScale), steps (a Python int, static),
    tx (an optax.GradientTransformation, static: its state starts at tx.init(params)).
    Each step: scaled_grads at the current scale; if the gradients are finite, update the
    parameters and the optimizer state with tx; if not, keep both exactly as they were (skip the
    step); then ls = dyn_scale_step(ls, finite) with the default period, factor and min_scale.
    Returns: (params, ls, scales, finites, losses): the final fp32 parameters and DynScale, and
    per step (arrays of length steps) the scale used, the finite flag, and fp16_loss (unscaled,
    float32) at the parameters the step started from.
    Hint: jax.jit with static_argnames=("steps", "tx").
    """
    raise NotImplementedError
