"""Right: the group is a module-level function decorated @jax.checkpoint over @jax.jit (nested
transforms; k is the length of the group's weights); the outer scan's xs is the weight array
reshaped with jnp.reshape(w, (-1, k, D, D)); grouped_loss itself is jitted with k static.
best_group_size keeps a cache of measurements and picks with numpy.argmin.
"""

from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax


@jax.checkpoint
@jax.jit
def run_group(x, group_w):
    def layer(x, w):
        return x + jnp.tanh(jnp.dot(x, w)), None
    return lax.scan(layer, x, group_w)[0]


@partial(jax.jit, static_argnames="k")
def grouped_loss(params, x, k=None):
    w = params["w"]
    if k is None:
        x, _ = lax.scan(lambda x, w: (x + jnp.tanh(jnp.dot(x, w)), None), x, w)
    else:
        x, _ = lax.scan(lambda x, gw: (run_group(x, gw), None), x, jnp.reshape(w, (-1, k) + w.shape[1:]))
    return jnp.mean(x * x)


def temp_memory_bytes(params, x, k=None):
    compiled = jax.jit(jax.grad(grouped_loss), static_argnames="k").lower(params, x, k=k).compile()
    return int(compiled.memory_analysis().temp_size_in_bytes)


def best_group_size(params, x):
    L = params["w"].shape[0]
    ks = [k for k in range(1, L + 1) if L % k == 0]
    sizes = np.array([temp_memory_bytes(params, x, k) for k in ks])
    return int(ks[int(np.argmin(sizes))])
