"""Right: a class holds the hyper-parameters and its __call__ is jitted with static self
(functools.partial(jax.jit, static_argnums=0)); jit + reshard; the moments travel inside as a
NamedTuple; AdamW written in another order (decay first, step size folded with the bias
corrections). (found by the red team of issue 31's judge)
"""
import jax
import jax.numpy as jnp
from jax import lax
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

LN_EPS = 1e-5


def init_params(key, d_in, d_hidden, d_out):
    k1, k2 = jax.random.split(key)
    return {"dense1": {"kernel": jax.random.normal(k1, (d_in, d_hidden)) / jnp.sqrt(d_in),
                       "bias": jnp.zeros((d_hidden,))},
            "norm": {"scale": jnp.ones((d_hidden,))},
            "dense2": {"kernel": jax.random.normal(k2, (d_hidden, d_out)) / jnp.sqrt(d_hidden),
                       "bias": jnp.zeros((d_out,))}}


def mlp(params, x):
    h = x @ params["dense1"]["kernel"] + params["dense1"]["bias"]
    mean = jnp.mean(h, axis=-1, keepdims=True)
    var = jnp.mean((h - mean) ** 2, axis=-1, keepdims=True)
    h = (h - mean) * lax.rsqrt(var + LN_EPS) * params["norm"]["scale"]
    return jnp.tanh(h) @ params["dense2"]["kernel"] + params["dense2"]["bias"]


def loss(params, x, y):
    return jnp.mean((mlp(params, x) - y) ** 2)


def make_mesh(n=8):
    return jax.make_mesh((n,), ("data",), devices=jax.devices()[:n])


def decay_mask(params):
    return jax.tree.map(lambda p: p.ndim >= 2, params)


def adamw_step(params, grads, state, lr, b1, b2, eps, wd, mask):
    count = state["count"] + 1
    mu = jax.tree.map(lambda m, g: b1 * m + (1 - b1) * g, state["mu"], grads)
    nu = jax.tree.map(lambda v, g: b2 * v + (1 - b2) * g * g, state["nu"], grads)
    c1, c2 = 1 - b1 ** count, 1 - b2 ** count  # bias corrections for step t = count

    def update(p, m, v, decay):
        new = p - lr * (m / c1) / (jnp.sqrt(v / c2) + eps)  # the Adam step
        return new - lr * wd * p if decay else new          # decoupled decay, from theta_{t-1}

    return jax.tree.map(update, params, mu, nu, mask), {"mu": mu, "nu": nu, "count": count}


def split_axis(shape, n):
    """The first axis of a leaf that n divides, or None: the leaf then stays replicated."""
    return next((i for i, d in enumerate(shape) if d % n == 0), None)


def zero1_spec(shape, n):
    axis = split_axis(shape, n)
    return P() if axis is None else P(*([None] * axis), "data")


def init_zero1_state(params, mesh):
    n = mesh.shape["data"]

    def zeros(p):
        return jax.device_put(jnp.zeros(p.shape, jnp.float32), NamedSharding(mesh, zero1_spec(p.shape, n)))

    return {"mu": jax.tree.map(zeros, params), "nu": jax.tree.map(zeros, params),
            "count": jax.device_put(jnp.zeros((), jnp.int32), NamedSharding(mesh, P()))}


import functools
from typing import NamedTuple


class Moments(NamedTuple):
    mu: dict
    nu: dict
    count: jax.Array


class Zero1Step:
    def __init__(self, mesh, lr, b1, b2, eps, wd):
        self.n = mesh.shape["data"]
        self.hp = (lr, b1, b2, eps, wd)

    def __hash__(self):
        return hash((self.n, self.hp))

    def __eq__(self, other):
        return isinstance(other, Zero1Step) and (self.n, self.hp) == (other.n, other.hp)

    def _update(self, blocks, grads, mom: Moments, mask):
        lr, b1, b2, eps, wd = self.hp
        t = mom.count + 1
        tf = t.astype(jnp.float32)
        c1 = 1.0 - jnp.power(b1, tf)
        c2 = 1.0 - jnp.power(b2, tf)
        mu = jax.tree.map(lambda g, m: (1 - b1) * g + b1 * m, grads, mom.mu)
        nu = jax.tree.map(lambda g, v: (1 - b2) * jnp.square(g) + b2 * v, grads, mom.nu)

        def one(p, m, v, d):
            decayed = p * (1.0 - lr * wd) if d else p
            return decayed - (lr / c1) * m / (jnp.sqrt(v) / jnp.sqrt(c2) + eps)

        return jax.tree.map(one, blocks, mu, nu, mask), Moments(mu, nu, t)

    @functools.partial(jax.jit, static_argnums=0)
    def __call__(self, params, state, x, y):
        specs = jax.tree.map(lambda p: zero1_spec(p.shape, self.n), params)
        value, grads = jax.value_and_grad(loss)(params, x, y)
        grads = jax.tree.map(jax.reshard, grads, specs)
        blocks = jax.tree.map(jax.reshard, params, specs)
        mom = Moments(state["mu"], state["nu"], state["count"])
        blocks, mom = self._update(blocks, grads, mom, decay_mask(params))
        params = jax.tree.map(lambda b: jax.reshard(b, P()), blocks)
        return params, {"mu": mom.mu, "nu": mom.nu, "count": mom.count}, value


def make_zero1_step(mesh, lr=1e-3, b1=0.9, b2=0.999, eps=1e-8, wd=1e-2):
    return Zero1Step(mesh, lr, b1, b2, eps, wd)
