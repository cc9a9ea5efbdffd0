"""Only the chapter's interface: the two module values for its one case, no functions.

What the README's "Differences from the chapter" says a chapter-style solution scores here.
loses: bf16_matches_step_by_step_rounding: sgd_bf16
"""
import jax.numpy as jnp

w = jnp.asarray(1.0, jnp.bfloat16)
master = jnp.asarray(1.0, jnp.float32)
for _ in range(100):
    w = (w - 1e-3 * 1.0).astype(jnp.bfloat16)
    master = master - jnp.float32(1e-3)
w_bf16, w_master = w, master
