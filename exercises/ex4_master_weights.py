"""Exercise 4: why mixed precision keeps fp32 master weights.

SGD on one scalar parameter with a constant gradient: w <- w - lr * grad, repeated `steps` times.

  (a) sgd_bf16: the parameter is *stored* in bfloat16: after every step the new value is
      rounded to bfloat16 and the next step starts from that rounded value.
  (b) sgd_fp32_master: an fp32 "master" copy takes every update (a bf16 copy would only be
      used for the forward/backward compute, which this exercise does not need).

Then explain (a) in a checkable way: bf16_rounding_threshold(w) is the update size below which
w - u rounds straight back to w.

What is checked (`make grade EX=ex4`):
  * dtypes: sgd_bf16 returns a bfloat16 scalar, sgd_fp32_master a float32 scalar;
  * w_bf16 and w_master below are the chapter's case (w0=1.0, lr=1e-3, grad=1.0, steps=100);
  * on a grid of (w0, lr, grad, steps) chosen by the grader -- cases where bf16 is stuck, where
    it moves, where it moves by the wrong amount, where w - lr*grad lands exactly halfway between
    two bf16 numbers, where w crosses a power of two, and negative w -- both functions equal the
    grader's own step-by-step simulation, so closed forms and fp32-then-cast-at-the-end do not pass;
  * sgd_fp32_master bit for bit: each step rounds to float32, and after many steps those
    roundings make the result differ from float32(w0 - steps*lr*grad);
  * bf16_rounding_threshold(w) for several w: powers of two and not, small and large, w that
    bf16 rounds onto a power of two or off it (exact ties included), and subnormal numbers.
"""

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax


def sgd_bf16(w0, lr, grad, steps):
    """Scheme (a): `steps` SGD steps with the parameter stored in bfloat16.

    Args: w0, lr, grad: Python floats; steps: Python int >= 0.
    Start from w0 rounded to bfloat16. Each step: w = round_to_bf16(w - lr * grad).
    Returns: a bfloat16 scalar (a jax array with dtype jnp.bfloat16).
    """
    raise NotImplementedError


def sgd_fp32_master(w0, lr, grad, steps):
    """Scheme (b): `steps` SGD steps applied to an fp32 master weight.

    Args: as sgd_bf16. Start from w0 as float32; each step: w = w - lr * grad in float32
    (lr * grad as one float32 number; every step's result rounded to float32, as JAX does).
    Compared bit for bit with a step-by-step float32 simulation.
    Returns: the float32 master weight (a jax array with dtype jnp.float32).
    """
    raise NotImplementedError


def bf16_rounding_threshold(w):
    """How small an update bf16 storage rounds away, at the parameter value w.

    Args: w: a Python float, w > 0. First round it to bfloat16 (round to nearest, ties to even),
      as a stored parameter would be: call that s. Note that s may be a power of two even when w
      is not (0.5 + 2**-10 is stored as 0.5, and 1 - 2**-10 as 1.0).
    Returns: a Python float, half the gap between s and the largest bfloat16 number below s
      (that number is 0 when s is the smallest positive bfloat16). An update u smaller than this
      leaves bf16(s - u) == s.

    bfloat16 keeps 8 significant bits, so numbers in [1, 2) are 2**-7 apart and numbers in
    [0.5, 1) are 2**-8 apart. Below 2**-126 (the smallest normal number) bf16 has subnormal
    numbers, all 2**-133 apart; the grader tries those too. XLA on CPU flushes subnormals to zero,
    so compute this in NumPy: np.asarray(w, jnp.bfloat16) is an exact bfloat16 NumPy value.
    """
    raise NotImplementedError


# The chapter's case: w0=1.0, lr=1e-3, grad=1.0, steps=100. Replace None with calls to your
# functions, e.g. w_bf16 = sgd_bf16(1.0, 1e-3, 1.0, 100).
w_bf16 = None
w_master = None
