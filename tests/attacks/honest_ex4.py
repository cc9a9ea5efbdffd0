"""Exercise 4, honest but wrong: every function returns zero of the right dtype, and the module
values are zeros too. Graded on its own it earns the dtype checks only."""

import jax.numpy as jnp


def sgd_bf16(w0, lr, grad, steps):
    return jnp.zeros((), jnp.bfloat16)


def sgd_fp32_master(w0, lr, grad, steps):
    return jnp.zeros((), jnp.float32)


def bf16_rounding_threshold(w):
    return 0.0


w_bf16 = sgd_bf16(1.0, 1e-3, 1.0, 100)
w_master = sgd_fp32_master(1.0, 1e-3, 1.0, 100)
