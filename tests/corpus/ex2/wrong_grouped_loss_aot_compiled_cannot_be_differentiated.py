"""WRONG: grouped_loss is a jax.stages.Compiled call (compiled ahead of time per argument types and k).
Called eagerly it returns the right loss, but JAX refuses to differentiate or jit it ("Cannot apply
JAX transformations to a function lowered and compiled for a particular signature"):
jax.grad(grouped_loss) and the module's own temp_memory_bytes (a jit of its grad) raise TypeError in
any real use, so best_group_size does too.

Scored 20/20 with and without --sandbox, seeds 20261130, 7 and 0: while a probe runs, every Compiled
made meanwhile and called with tracers is bound as the jit it was compiled from
(program.compiled_calls_traced), which JAX itself never does. Should score 0/20 (what it scored at
67c386f, before every probe traced a Compiled as its jit).

Now 0/20 at seed 20261130 without --sandbox (a Compiled is traced as its jit only where it is called at the top level of the step a training loop calls, not inside the learner's own jit, grad, scan or shard_map, where a real run refuses it too: program.compiled_calls_traced, probes.step_maker).

loses: gradient_matches_float64_gradient: lowered and compiled
"""

from functools import partial

import jax
import jax.numpy as jnp
from jax import lax


def layer(x, w):
    # Without a checkpoint, the backward pass keeps x and 1 - tanh(x @ w)**2 of every layer, each the size of x.
    return x + jnp.tanh(x @ w), None


def _grouped_loss(params, x, k=None):
    w = params["w"]
    if k is None:
        x, _ = lax.scan(layer, x, w)
        return jnp.mean(x ** 2)
    n_layers = w.shape[0]
    if n_layers % k:
        raise ValueError(f"k={k} does not divide the number of layers {n_layers}")
    groups = w.reshape(n_layers // k, k, *w.shape[1:])

    @jax.checkpoint  # keeps only the group's input; the group's k layers rerun in the backward pass
    def group(x, group_w):
        x, _ = lax.scan(layer, x, group_w)
        return x

    x, _ = lax.scan(lambda x, group_w: (group(x, group_w), None), x, groups)
    return jnp.mean(x ** 2)




def _spec(a):
    return jax.ShapeDtypeStruct(jnp.shape(a), jnp.result_type(a))


def _aot(fn, static_argnames=()):
    """fn jitted, then compiled ahead of time once per argument types (from abstract shapes) and
    static values; every call runs the compiled executable, called with the same keywords."""
    jitted = jax.jit(fn, static_argnames=static_argnames)
    cache = {}

    def call(*args, **kwargs):
        static = {k: kwargs.pop(k) for k in static_argnames if k in kwargs}
        specs = jax.tree.map(_spec, (args, kwargs))
        key = (str(jax.tree.structure(specs)), tuple((s.shape, s.dtype) for s in jax.tree.leaves(specs)),
               tuple(sorted(static.items(), key=lambda kv: kv[0])), str(jax.sharding.get_abstract_mesh()))
        if key not in cache:
            s_args, s_kwargs = specs
            cache[key] = jitted.trace(*s_args, **s_kwargs, **static).lower().compile()
        return cache[key](*args, **kwargs)

    return call


grouped_loss = _aot(_grouped_loss, static_argnames=("k",))


def temp_memory_bytes(params, x, k=None):
    compiled = jax.jit(jax.grad(partial(grouped_loss, k=k))).lower(params, x).compile()
    return int(compiled.memory_analysis().temp_size_in_bytes)


def best_group_size(params, x):
    n_layers = params["w"].shape[0]
    divisors = [k for k in range(1, n_layers + 1) if n_layers % k == 0]
    return min(divisors, key=lambda k: temp_memory_bytes(params, x, k))
