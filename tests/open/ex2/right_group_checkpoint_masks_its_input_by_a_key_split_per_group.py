"""Right: the reference with a typed PRNG key carried by the outer scan and split per group, each
group's checkpoint taking its key and multiplying its input by a keep-everything bernoulli mask
(keep probability 1.0: the reference's numbers).

12/20 with and without --sandbox at seeds 20261130 and 7, 15/20 at seed 0; should be 20/20? (a policy
question, like ex7/right_step_dropout_keeping_every_unit's FLOPs). Its numbers and its checkpoints are
the reference's, but the mask, recomputed in each group's backward pass, costs temporaries of the
activations' size: the gradient grows by 864 bytes per batch row at k=1 where
the grader's own grows by 816 (384 against 336 at k=4; D=3), so
gradient_memory_matches_the_grouped_checkpoint (3) fails, temp_memory_bytes_matches_measurement (2)
fails although temp_memory_bytes measures this very program as the stub asks (5188 bytes against the
grader's 3588 at k=4; own_curve_if_right admits another right grouped checkpoint's own figures only),
and at seeds 20261130 and 7 best_group_size_is_the_measured_minimum (3) fails since this program's
least-memory k (2) is not the grader's (1). tests/right/ex2/input_scaled_by_a_draw_of_a_key (a
scalar draw) keeps full marks; a mask the size of the activations does not.
"""

from functools import partial

import jax
import jax.numpy as jnp
from jax import lax


def layer(x, w):
    # Without a checkpoint, the backward pass keeps x and 1 - tanh(x @ w)**2 of every layer, each the size of x.
    return x + jnp.tanh(x @ w), None


def grouped_loss(params, x, k=None):
    w = params["w"]
    if k is None:
        x, _ = lax.scan(layer, x, w)
        return jnp.mean(x ** 2)
    n_layers = w.shape[0]
    if n_layers % k:
        raise ValueError(f"k={k} does not divide the number of layers {n_layers}")
    groups = w.reshape(n_layers // k, k, *w.shape[1:])

    @jax.checkpoint  # keeps only the group's input; the group's k layers rerun in the backward pass
    def group(x, group_w, key):
        keep = jax.random.bernoulli(key, 1.0, x.shape)  # dropout at keep 1.0 for now
        x, _ = lax.scan(layer, x * keep, group_w)
        return x

    def outer(carry, group_w):
        x, key = carry
        key, sub = jax.random.split(key)
        return (group(x, group_w, sub), key), None

    (x, _), _ = lax.scan(outer, (x, jax.random.key(1)), groups)
    return jnp.mean(x ** 2)


def temp_memory_bytes(params, x, k=None):
    compiled = jax.jit(jax.grad(partial(grouped_loss, k=k))).lower(params, x).compile()
    return int(compiled.memory_analysis().temp_size_in_bytes)


def best_group_size(params, x):
    n_layers = params["w"].shape[0]
    divisors = [k for k in range(1, n_layers + 1) if n_layers % k == 0]
    return min(divisors, key=lambda k: temp_memory_bytes(params, x, k))
