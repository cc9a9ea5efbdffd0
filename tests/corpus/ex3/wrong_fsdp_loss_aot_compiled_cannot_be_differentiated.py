"""WRONG: make_fsdp_loss(mesh) returns a jax.stages.Compiled call of the reference's shard_map
(compiled ahead of time per argument types and mesh). Called eagerly it returns the right loss, but
jax.value_and_grad of it raises TypeError ("Cannot apply JAX transformations to a function lowered
and compiled for a particular signature"): no training can take its gradient.

Scored 12/12 with and without --sandbox, seeds 20261130, 7 and 0: while a probe runs, every Compiled
made meanwhile and called with tracers is bound as the jit it was compiled from
(program.compiled_calls_traced), which JAX itself never does. Should score 0/12 (what it scored at
67c386f).

Now 0/12 at seed 20261130 without --sandbox (a Compiled is traced as its jit only where it is called at the top level of the step a training loop calls, not inside the learner's own jit, grad, scan or shard_map, where a real run refuses it too: program.compiled_calls_traced, probes.step_maker).

loses: gradients_match_single_device: lowered and compiled
"""

import jax
import jax.numpy as jnp
from jax import lax
from jax.sharding import PartitionSpec as P

AXIS = "fsdp"
ROWS = P(AXIS, None)  # dim 0 split across the devices of the "fsdp" axis


def local_loss(p_blk, x_blk, y_blk):
    """One device's view: a slice of each weight's rows and a slice of the batch."""
    w1 = lax.all_gather(p_blk["w1"], AXIS, tiled=True)  # (D/N, H) -> (D, H)
    w2 = lax.all_gather(p_blk["w2"], AXIS, tiled=True)  # (H/N, D) -> (H, D)
    local = jnp.mean((jax.nn.relu(x_blk @ w1) @ w2 - y_blk) ** 2)
    # Every device holds B/N examples, so the mean of the local means is the global mean.
    return lax.pmean(local, AXIS)


def _spec(a):
    """The abstract value of an argument, with its sharding (its type on explicit mesh axes)."""
    sharding = a.sharding if isinstance(a, jax.Array) and not isinstance(a, jax.core.Tracer) else jax.typeof(a).sharding
    return jax.ShapeDtypeStruct(jnp.shape(a), jnp.result_type(a), sharding=sharding)


def _aot(fn, static_argnames=()):
    """fn jitted, then compiled ahead of time once per argument types (from abstract shapes) and
    static values; every call runs the compiled executable, called with the same keywords."""
    jitted = jax.jit(fn, static_argnames=static_argnames)
    cache = {}

    def call(*args, **kwargs):
        static = {k: kwargs.pop(k) for k in static_argnames if k in kwargs}
        specs = jax.tree.map(_spec, (args, kwargs))
        key = (str(jax.tree.structure(specs)), tuple((s.shape, s.dtype, str(s.sharding)) for s in jax.tree.leaves(specs)),
               tuple(sorted(static.items(), key=lambda kv: kv[0])), str(jax.sharding.get_abstract_mesh()))
        if key not in cache:
            s_args, s_kwargs = specs
            cache[key] = jitted.trace(*s_args, **s_kwargs, **static).lower().compile()
        return cache[key](*args, **kwargs)

    return call



def make_fsdp_loss(mesh):
    specs = ({"w1": ROWS, "w2": ROWS}, ROWS, ROWS)
    return _aot(jax.shard_map(local_loss, mesh=mesh, in_specs=specs, out_specs=P()))


fsdp_loss = make_fsdp_loss(None)
