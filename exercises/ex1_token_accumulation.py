"""Exercise 1: gradient accumulation weighted by token count.

A language-model batch is padded: row b of the batch has some number of real tokens and the
rest is padding. The loss we train on is the mean over *all valid tokens of the whole batch*.
When the batch is split into micro-batches, each one holds a different number of valid tokens,
so averaging the micro-batches' own means gives the wrong gradient. Accumulate sums instead,
and divide once at the end.

Model, per token: prediction = tanh(x @ w), loss = (prediction - y) ** 2.

Shapes (float32):  x (B, T, D)   y (B, T)   m (B, T)   w (D,)
m[b, t] is 1.0 for a valid token and 0.0 for padding.

What is checked (`make grade EX=ex1`):
  * tok_loss_sum_count returns a *sum* over valid tokens (splitting the batch and adding the
    parts gives the whole) and the number of valid tokens; padding never counts;
  * accum_token_weighted equals the full-batch gradient of the global per-token mean, for
    several n_micro (1 and B included), on batches whose micro-batches hold very different
    numbers of valid tokens -- some hold none at all: the first, one in the middle, the last;
  * the accumulation is a lax.scan of length n_micro that takes one micro-batch per step and
    computes the result: the grader feeds the scan (and only the scan) another batch, and the
    result must become that batch's gradient. A Python loop, a scan whose result is dropped
    (dead, multiplied by 0, selected away) beside a full-batch gradient, or a scan that only
    adds up gradients computed outside it gets no technique points. The scan carries running
    sums: every micro-batch's gradient stacked (lax.map, the scan's ys) and summed after it is
    not accumulation, since its memory grows with n_micro;
  * outside the scan the batch is only reshaped (or sliced) into micro-batches: no arithmetic on
    the whole batch, not even work whose result is thrown away, and the token count is summed
    in the body too;
  * it also runs under jax.jit.
A solution with every number right but no working scan gets half of the points.
Sizes and data are chosen by the grader; do not assume any particular B, T or D.
"""

import jax
import jax.numpy as jnp
from jax import lax


def tok_loss_sum_count(w, x, y, m):
    """Sum of the per-token loss over valid tokens, and the number of valid tokens.

    Args:
      w: (D,) weights.  x: (B, T, D) inputs.  y: (B, T) targets.  m: (B, T) mask, 1.0 = valid.
    Returns:
      (loss_sum, n_valid): two float32 scalars. loss_sum = sum over b, t of
      m[b, t] * (tanh(x[b, t] @ w) - y[b, t]) ** 2; n_valid = sum of m.
    """
    raise NotImplementedError


def accum_token_weighted(w, x, y, m, n_micro):
    """Gradient of the global per-token mean loss, accumulated over micro-batches.

    Split the batch axis (B) into `n_micro` equal micro-batches (n_micro divides B; treat it as
    a static Python int). Iterate over them with `lax.scan`; in the body, take the gradient of
    the micro-batch's *loss sum* with respect to w and add it, and add its token count. After
    the scan, divide the summed gradient by the total number of valid tokens.

    Returns:
      (D,) float32 array equal to jax.grad(lambda w: loss_sum(w) / n_valid) on the full batch.
    """
    raise NotImplementedError
