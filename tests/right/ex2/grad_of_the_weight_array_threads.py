"""Right: temp_memory_bytes measures jax.grad of the loss through a wrapper that takes the weight
array itself (params rebuilt inside), compiled with jax.jit(...).lower(...).compile(); the groups'
checkpoint written as jax.checkpoint(fun, prevent_cse=True) around a function that scans the
group with unroll=1 given explicitly. best_group_size measures the divisors in threads.
"""

from concurrent.futures import ThreadPoolExecutor

import jax
import jax.numpy as jnp
from jax import lax


def _group(x, gw):
    return lax.scan(lambda h, w: (h + jnp.tanh(h @ w), None), x, gw, unroll=1)[0]


_checkpointed_group = jax.checkpoint(_group, prevent_cse=True)


def grouped_loss(params, x, k=None):
    w = params["w"]
    if k is None:
        return jnp.mean(_group(x, w) ** 2)
    groups = w.reshape((w.shape[0] // k, k) + w.shape[1:])
    x, _ = lax.scan(lambda h, gw: (_checkpointed_group(h, gw), None), x, groups)
    return jnp.mean(x ** 2)


def temp_memory_bytes(params, x, k=None):
    def loss_of_w(w, x):
        return grouped_loss({"w": w}, x, k)
    compiled = jax.jit(jax.grad(loss_of_w)).lower(params["w"], x).compile()
    return int(compiled.memory_analysis().temp_size_in_bytes)


def best_group_size(params, x):
    L = params["w"].shape[0]
    ks = [k for k in range(1, L + 1) if L % k == 0]
    with ThreadPoolExecutor(4) as pool:
        sizes = dict(zip(ks, pool.map(lambda k: temp_memory_bytes(params, x, k), ks)))
    return min(ks, key=lambda k: sizes[k])
