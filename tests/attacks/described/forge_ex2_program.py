"""Exercise 2: forged programs. At import the module makes traced_programs send the programs of
another function than grouped_loss: the grouped checkpoint the exercise asks for, around a layer
that computes something else (x + sin(x @ W)), so every mark of the technique is there and its
memory is the technique's. The judge reads, compiles and runs them: it holds the structure and
the memory, not the numbers."""


def _decoy(params, x, k=None):
    import jax
    import jax.numpy as jnp
    from jax import lax

    def layer(x, w):
        return x + jnp.sin(x @ w), None

    w = params["w"]
    if k is None:
        return jnp.mean(lax.scan(layer, x, w)[0] ** 2)
    groups = w.reshape(w.shape[0] // k, k, *w.shape[1:])

    @jax.checkpoint
    def group(x, g):
        return lax.scan(layer, x, g)[0]

    return jnp.mean(lax.scan(lambda x, g: (group(x, g), None), x, groups)[0] ** 2)


def _traced_programs(sol, specs):
    import jax
    import jax.numpy as jnp
    from functools import partial
    from graders.kit import program
    out = []
    for L, B, D, k in specs:
        shapes = ({"w": jax.ShapeDtypeStruct((L, D, D), jnp.float32)}, jax.ShapeDtypeStruct((B, D), jnp.float32))
        out.append(program.encode(jax.make_jaxpr(partial(sol._decoy, k=k))(*shapes), ""))
    return out


_install("traced_programs", _traced_programs)
