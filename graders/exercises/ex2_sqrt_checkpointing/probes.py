"""Probes for Exercise 2: the learner's grouped_loss traced and compiled, their temp_memory_bytes
and best_group_size called, and what came back summarised as plain data.

A traced program is sent as its layout (where its checkpoints are, how often they run, around
how many layers, with which remat policy); a compiled one as its temporary memory, its loss and
its gradient. The inputs arrive from the checks (drawn there from the grading seed); nothing
here knows what any figure should be.
"""

import math
from concurrent.futures import ThreadPoolExecutor
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
from jax.extend.core import jaxpr_as_fun

from graders.kit import jaxpr, costs, wire
from graders.kit.probing import probe


def inputs(w, x):
    """The judge's float32 arrays as the JAX arrays grouped_loss is given."""
    return {"w": jnp.asarray(w, jnp.float32)}, jnp.asarray(x, jnp.float32)


def shapes(L, B, D):
    return {"w": jax.ShapeDtypeStruct((L, D, D), jnp.float32)}, jax.ShapeDtypeStruct((B, D), jnp.float32)


def residual_bytes(fn, L, B, D) -> int:
    """Bytes of everything the backward pass of fn keeps from the forward pass (tracing only).
    The checks compute the same figure for their own program with this function."""
    saved = jax.eval_shape(lambda p, x: jax.vjp(fn, p, x)[1], *shapes(L, B, D))
    return sum(math.prod(a.shape) * a.dtype.itemsize for a in jax.tree.leaves(saved))


def answer(value):
    """A learner function's return value as it is, or, when it is not plain data, its type and
    repr (what a check says it got instead of an int)."""
    try:
        wire.encode(value)
        return {"value": value}
    except (wire.WireError, TypeError, ValueError, RecursionError):
        return {"type": type(value).__name__, "repr": repr(value)[:300]}


# ---- reading the traced program ----

def runs(outer) -> int:
    """How many times an equation runs: the product of the lengths of the scans around it."""
    return math.prod(e.params["length"] for e in outer if jaxpr.is_a(e, "scan"))


def policy_name(policy) -> str:
    for name in dir(jax.checkpoint_policies):
        if getattr(jax.checkpoint_policies, name) is policy and not name.startswith("checkpoint_"):
            return name
    return getattr(policy, "__qualname__", None) or type(policy).__name__


def is_jax_policy(policy) -> bool:
    return any(getattr(jax.checkpoint_policies, name) is policy for name in dir(jax.checkpoint_policies))


def saves_nothing(checkpoint: dict) -> bool:
    """Whether a checkpoint of a layout keeps nothing for the backward pass: the default policy
    (None) or jax.checkpoint_policies.nothing_saveable. The checks decide with this function too."""
    policy = checkpoint["policy"]
    return policy is None or (checkpoint["policy_is_jax"] and policy == "nothing_saveable")


def layout(program) -> dict:
    """The checkpoints, in the order the program holds them: times run, layers per run, nested in
    another checkpoint?, copies of the layer inside it, scans around the layer inside it, and its
    remat policy (None, or its name and whether it is one of jax.checkpoint_policies); how many
    layer applications (tanh) run in total and outside every checkpoint; copies of the layer."""
    eqns = list(jaxpr.walk_nested(program))
    layers = [outer for e, outer in eqns if e.primitive.name == "tanh"]
    checkpoints = []
    for eqn, outer in eqns:
        if jaxpr.is_a(eqn, "checkpoint"):
            inner = [o[next(i for i, a in enumerate(o) if a is eqn) + 1:] for o in layers if any(a is eqn for a in o)]
            policy = eqn.params.get("policy")
            checkpoints.append({
                "times": runs(outer), "per_run": sum(runs(o) for o in inner),
                "nested": any(jaxpr.is_a(e, "checkpoint") for e in outer),
                "copies": len(inner), "inner_scans": [[e.params["length"] for e in o if jaxpr.is_a(e, "scan")] for o in inner],
                "policy": None if policy is None else policy_name(policy),
                "policy_is_jax": policy is None or is_jax_policy(policy),
            })
    total = sum(runs(o) for o in layers)
    outside = sum(runs(o) for o in layers if not any(jaxpr.is_a(e, "checkpoint") for e in o))
    return {"checkpoints": checkpoints, "total": total, "outside": outside, "copies": len(layers)}


def summary(sol, program, k, L, B, D) -> dict:
    """layout(program), and, when one of its checkpoints has a policy that saves values, the
    bytes the backward pass of grouped_loss(k) keeps from its forward pass."""
    out = layout(program)
    out["residual_bytes"] = None
    if not all(saves_nothing(c) for c in out["checkpoints"]):
        out["residual_bytes"] = residual_bytes(partial(sol.grouped_loss, k=k), L, B, D)
    return out


# ---- probes ----

@probe
def trace_layout(sol, w, x, k):
    """grouped_loss(k) traced at these inputs (nothing compiled): its layout."""
    params, xf = inputs(w, x)
    program = jaxpr.trace(partial(sol.grouped_loss, k=k), params, xf)
    return summary(sol, program, k, w.shape[0], *x.shape)


def compiled_program(sol, w, x, k) -> dict:
    """grouped_loss(k) traced once, and jit(value_and_grad) of that very jaxpr compiled once: the
    number of values it returns, its layout, temp_size_in_bytes, the loss and the gradient.

    The program measured is built from the jaxpr whose structure is read, so the two cannot
    differ (measured: same temp_size_in_bytes and loss as value_and_grad of the function itself)."""
    params, xf = inputs(w, x)
    closed = jax.make_jaxpr(partial(sol.grouped_loss, k=k))(params, xf)
    if len(closed.out_avals) != 1:
        return {"k": k, "outputs": len(closed.out_avals)}
    run = jaxpr_as_fun(closed)
    loss = lambda p, x: run(*jax.tree.leaves((p, x)))[0]  # noqa: E731
    compiled = costs.compile_fn(jax.value_and_grad(loss), params, xf)
    temp = int(compiled.memory_analysis().temp_size_in_bytes)
    value, grads = compiled(params, xf)
    return {"k": k, "outputs": 1, "layout": summary(sol, closed.jaxpr, k, w.shape[0], *x.shape), "temp": temp,
            "value": np.asarray(value), "grads": jax.tree.map(np.asarray, grads)}


def wider_temp(sol, k, L, B, D) -> int:
    """temp_size_in_bytes of jit(value_and_grad) of grouped_loss(k) at a batch of B rows
    (compiled on shapes, never run)."""
    return costs.temp_bytes(jax.value_and_grad(partial(sol.grouped_loss, k=k)), *shapes(L, B, D))


@probe
def memory_programs(sol, w, x, ks, wider_rows=None):
    """compiled_program for each k of ks, the compilations in threads (XLA releases the GIL while
    it compiles), and with wider_rows also "temp_wider": the temporary memory of the same
    gradient at a batch of that many rows. In the order of ks, up to the first that does not
    return one value; what the learner's code raised for the first k (in that order) that raised
    ends the probe."""
    L, (B, D) = w.shape[0], x.shape
    with ThreadPoolExecutor(max_workers=2 * len(ks)) as pool:
        futures = [pool.submit(compiled_program, sol, w, x, k) for k in ks]
        wider = [pool.submit(wider_temp, sol, k, L, wider_rows, D) if wider_rows else None for k in ks]
        out = []
        for future, more in zip(futures, wider):
            out.append(future.result())
            if out[-1]["outputs"] != 1:
                break
            if more is not None:
                out[-1]["temp_wider"] = more.result()
    return out


@probe
def gradient_temps(sol, L, B, D, ks):
    """temp_size_in_bytes of jit(grad) of grouped_loss(k), with respect to params, for each k of
    ks at these shapes (compiled in threads, never run): the learner's own memory curve, as
    their temp_memory_bytes should measure it."""
    def one(k):
        return costs.temp_bytes(jax.grad(partial(sol.grouped_loss, k=k)), *shapes(L, B, D))
    with ThreadPoolExecutor(max_workers=len(ks)) as pool:
        return list(pool.map(one, ks))


@probe
def temp_memory_bytes(sol, w, x, k):
    return answer(sol.temp_memory_bytes(*inputs(w, x), k))


@probe
def best_group_size(sol, pairs):
    """best_group_size for each (w, x), the searches side by side (compiling releases the GIL)."""
    with ThreadPoolExecutor(max_workers=len(pairs)) as pool:
        answers = list(pool.map(lambda a: sol.best_group_size(*inputs(*a)), pairs))
    return [answer(a) for a in answers]
