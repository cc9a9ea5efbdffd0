"""Exercise 1: a forged program. At import the module makes traced_program send the program of
another function than accum_token_weighted: one with the technique's every mark (a live scan of
length n_micro fed the batch one micro-batch per step, nothing outside it, a running sum carried)
that computes something else than the gradient (a sum of the micro-batches' numbers). The judge
reads it and runs it: it holds the structure, not the numbers."""


def _decoy(w, x, y, m, n_micro):
    import jax
    import jax.numpy as jnp

    def split(a):
        return a.reshape(n_micro, a.shape[0] // n_micro, *a.shape[1:])

    def body(carry, micro):
        xs, ys, ms = micro
        return carry + jnp.sum(xs * (ys * ms)[..., None], axis=(0, 1)), None

    total, _ = jax.lax.scan(body, jnp.zeros_like(w), (split(x), split(y), split(m)))
    return total * w


def _traced_program(sol, world, n_micro):
    import jax
    import jax.numpy as jnp
    from functools import partial
    from graders.kit import program
    closed = jax.make_jaxpr(partial(sol._decoy, n_micro=n_micro))(*(jnp.asarray(a, jnp.float32) for a in world))
    return program.encode(closed, "", forward=True)


_install("traced_program", _traced_program)
