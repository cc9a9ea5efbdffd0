"""Right: the scan body comes from a factory closing over w (a closure), the micro-batches are
passed as a dict of arrays (a pytree as xs), and per row the gradient is taken with jax.vmap and
summed: the count rides along in a dict carry.
"""

import jax
import jax.numpy as jnp
from jax import lax


def tok_loss_sum_count(w, x, y, m):
    per_token = jnp.square(jnp.tanh(jnp.einsum("...d,d->...", x, w)) - y)
    return jnp.sum(jnp.where(m > 0, per_token, 0.0)), jnp.sum(m)


def make_step(w):
    row_grad = jax.vmap(jax.grad(lambda w, x, y, m: tok_loss_sum_count(w, x, y, m)[0]), in_axes=(None, 0, 0, 0))

    def step(acc, micro):
        g = row_grad(w, micro["x"], micro["y"], micro["m"]).sum(axis=0)
        return {"grad": acc["grad"] + g, "tokens": acc["tokens"] + micro["m"].sum()}, None

    return step


def accum_token_weighted(w, x, y, m, n_micro):
    micro = {k: v.reshape(n_micro, v.shape[0] // n_micro, *v.shape[1:]) for k, v in dict(x=x, y=y, m=m).items()}
    acc, _ = lax.scan(make_step(w), {"grad": jnp.zeros_like(w), "tokens": jnp.float32(0.0)}, micro)
    return acc["grad"] / acc["tokens"]
