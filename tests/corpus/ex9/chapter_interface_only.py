"""The chapter's own code for section 6.9, fitted to the stubs: its mask (decay where the leaf's
last key is "kernel"), its five AdamW formulas with the state's moments and count, and its ZeRO-1
annotation of a state (2-D leaves split along axis 0, the rest left as they are). The chapter
writes no ZeRO-1 training step.

loses: decay_mask_marks_weight_matrices: AttributeError
loses: init_zero1_state_splits_the_moments: does not evenly divide
loses: zero1_training_matches_single_device: not attempted
"""
import jax
import jax.numpy as jnp
import optax
from jax.sharding import PartitionSpec as P

from reference.ex9_zero1_adamw import init_params, loss, make_mesh, mlp  # noqa: F401  given by the stub


def decay_mask(params):
    return jax.tree.map_with_path(lambda path, _: path[-1].key == "kernel", params)


def adamw_step(params, grads, state, lr, b1, b2, eps, wd, mask):
    count = state["count"] + 1

    def one(th, g, m, v, decay):
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * g ** 2
        m_hat, v_hat = m / (1 - b1 ** count), v / (1 - b2 ** count)
        th_prime = th - lr * m_hat / (jnp.sqrt(v_hat) + eps)
        return (th_prime - lr * wd * th if decay else th_prime), m, v

    out = jax.tree.map(one, params, grads, state["mu"], state["nu"], mask)
    pick = lambda i: jax.tree.map(lambda _, t: t[i], params, out)  # noqa: E731
    return pick(0), {"mu": pick(1), "nu": pick(2), "count": count}


def init_zero1_state(params, mesh):
    with jax.set_mesh(mesh):
        adam = optax.adam(1e-3).init(jax.device_put(params, P()))[0]
        split = jax.tree.map(lambda a: jax.device_put(a, P("data", None)) if a.ndim == 2 else a, (adam.mu, adam.nu))
    return {"mu": split[0], "nu": split[1], "count": adam.count}


def make_zero1_step(mesh, lr=1e-3, b1=0.9, b2=0.999, eps=1e-8, wd=1e-2):
    raise NotImplementedError  # the chapter writes no ZeRO-1 step
