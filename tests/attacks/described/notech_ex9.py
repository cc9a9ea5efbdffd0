"""Exercise 9 without the technique: every number right, no ZeRO-1. AdamW by hand with the right
decay mask, but the moments are replicated as optax.adam().init makes them for replicated
parameters, and every device updates every leaf whole under jit (plain data parallelism). Graded
honestly it earns the mask, adamw_step and the training's numbers only."""
import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P


def _loss(params, x, y):
    h = x @ params["dense1"]["kernel"] + params["dense1"]["bias"]
    mean = jnp.mean(h, axis=-1, keepdims=True)
    var = jnp.mean((h - mean) ** 2, axis=-1, keepdims=True)
    h = (h - mean) * jax.lax.rsqrt(var + 1e-5) * params["norm"]["scale"]
    return jnp.mean((jnp.tanh(h) @ params["dense2"]["kernel"] + params["dense2"]["bias"] - y) ** 2)


def decay_mask(params):
    return jax.tree.map(lambda p: p.ndim >= 2, params)


def adamw_step(params, grads, state, lr, b1, b2, eps, wd, mask):
    count = state["count"] + 1
    mu = jax.tree.map(lambda m, g: b1 * m + (1 - b1) * g, state["mu"], grads)
    nu = jax.tree.map(lambda v, g: b2 * v + (1 - b2) * g * g, state["nu"], grads)
    c1, c2 = 1 - b1 ** count, 1 - b2 ** count

    def update(p, m, v, decay):
        new = p - lr * (m / c1) / (jnp.sqrt(v / c2) + eps)
        return new - lr * wd * p if decay else new

    return jax.tree.map(update, params, mu, nu, mask), {"mu": mu, "nu": nu, "count": count}


def init_zero1_state(params, mesh):
    def zeros(p):
        return jax.device_put(jnp.zeros(p.shape, jnp.float32), NamedSharding(mesh, P()))

    return {"mu": jax.tree.map(zeros, params), "nu": jax.tree.map(zeros, params),
            "count": jax.device_put(jnp.zeros((), jnp.int32), NamedSharding(mesh, P()))}


def make_zero1_step(mesh, lr=1e-3, b1=0.9, b2=0.999, eps=1e-8, wd=1e-2):
    @jax.jit
    def step(params, state, x, y):
        state = jax.tree.map(lambda a: jax.reshard(a, P()), state)
        value, grads = jax.value_and_grad(_loss)(params, x, y)
        params, state = adamw_step(params, grads, state, lr, b1, b2, eps, wd, decay_mask(params))
        return params, state, value

    return step
