"""Exercise 2: sqrt(L) grouped checkpointing, measured with memory_analysis.

The network is a stack of L residual layers; layer l does  x <- x + tanh(x @ W[l]).
The loss is jnp.mean(x_out ** 2), the mean over every entry of the last layer's output.

Shapes (float32):  params = {"w": (L, D, D)}   x (B, D).  Read L from params["w"].shape[0];
the grader uses several L, B and D, some drawn at grading time (the report prints the seed).

Checkpointing trades compute for memory. Cut the L layers into L/k groups of k consecutive
layers and wrap each group in one jax.checkpoint: the backward pass then keeps only the L/k
group inputs, and recomputes one group at a time (holding that group's k layers' activations).
Memory ~ (L/k) * a_in + k * a_layer, smallest near k = sqrt(L * a_in / a_layer).
k = 1 keeps every layer's input; k = L (one checkpoint around everything) saves nothing.

What is checked (`make grade EX=ex2`):
  * the loss and its gradient equal a float64 NumPy computation, for k = None, 1, a k near
    sqrt(L), and L;
  * the traced program (jax.make_jaxpr), for every k graded (1 and L included): no checkpoint for
    k=None; exactly one jax.checkpoint (`remat2` in the jaxpr) around k layers, inside a
    lax.scan of length L/k -- not one around everything, not one per layer, none nested, no
    layer outside it; inside it, a lax.scan over the group's k layers (not a Python loop);
  * every jax.checkpoint keeps the default policy, which saves nothing (no policy= argument);
  * memory: what the temporary memory of your gradient grows by per row of the batch (the
    activations it holds) equals the grader's own measurement of the grouped checkpoint this
    exercise asks for, at k = 1, near sqrt(L), and L;
  * temp_memory_bytes agrees with the grader's own measurement of that program;
  * best_group_size finds the least-memory k of the grader's own measurements, on two
    configurations with the same L (drawn, with many divisors) whose answers differ: no formula
    in L, and no search over only a few divisors, finds both.
The report shows your measured curve (k against memory) as a bar chart.
"""

from functools import partial

import jax
import jax.numpy as jnp
from jax import lax


def grouped_loss(params, x, k=None):
    """The loss of the L-layer residual network, checkpointed in groups of k layers.

    Args:
      params: {"w": (L, D, D) float32}.  x: (B, D) float32.
      k: None, or a Python int that divides L (static: it decides the program's structure).
    Returns:
      a float32 scalar, jnp.mean(x_out ** 2).

    k=None: lax.scan over params["w"], one layer per step; no jax.checkpoint anywhere.
    k given: reshape the weights to (L // k, k, D, D); lax.scan over the L // k groups; the scan
    body calls a function, decorated with jax.checkpoint (default policy: no policy= argument),
    that runs the group's k layers with their own lax.scan (no further checkpoint inside it).
    The same holds for k = 1 and k = L. The value is the same for every k.
    """
    raise NotImplementedError


def temp_memory_bytes(params, x, k=None):
    """Temporary memory, in bytes, of the compiled gradient of grouped_loss(., k=k).

    Compile jax.jit of jax.grad of grouped_loss (with k fixed, e.g. functools.partial) with
    respect to params, at these arguments: .lower(params, x).compile(). Return
    memory_analysis().temp_size_in_bytes as an int -- not peak_memory_in_bytes, and not the
    forward pass's figure. Compiling is enough; do not run the program.
    """
    raise NotImplementedError


def best_group_size(params, x):
    """The divisor k of L whose gradient needs the least temporary memory (an int).

    Measure temp_memory_bytes for every k in 1..L with L % k == 0 and return the k with the
    smallest figure. The grader checks the k you return against its own measurements.
    """
    raise NotImplementedError
