"""Probes for Exercise 2: the learner's grouped_loss traced and sent to the judge as a program
(graders/kit/program.py), their temp_memory_bytes and best_group_size called.

The judge rebuilds each program and reads it with `layout` and `summary` here (where its
checkpoints are, how often they run, around how many layers, with which remat policy), compiles
it (`measure`: its temporary memory) and runs it on its own inputs (its loss and gradient): no
figure of grouped_loss's comes from the learner's process. The inputs arrive from the checks
(drawn there from the grading seed); nothing here knows what any figure should be.
"""

import math
from concurrent.futures import ThreadPoolExecutor
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
from jax.extend.core import jaxpr_as_fun

from graders.kit import jaxpr, costs, program as program_data, wire
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


def summary(closed, L, B, D) -> dict:
    """layout(closed), and, when one of its checkpoints has a policy that saves values, the
    bytes the backward pass of the program keeps from its forward pass. Run in the judge."""
    out = layout(closed)
    out["residual_bytes"] = None
    if not all(saves_nothing(c) for c in out["checkpoints"]):
        out["residual_bytes"] = residual_bytes(loss_of(closed), L, B, D)
    return out


def loss_of(closed):
    """The program (a rebuilt grouped_loss) as a function of (params, x)."""
    run = jaxpr_as_fun(closed)
    return lambda p, x: run(*jax.tree.leaves((p, x)))[0]


# ---- probes ----

@probe
def traced_programs(sol, specs):
    """grouped_loss(k)'s program traced at shapes (L, B, D) for each (L, B, D, k) of specs (nothing
    compiled, nothing run), as data for the judge. What the learner's code raised for the first
    spec that raised ends the probe."""
    out = []
    for L, B, D, k in specs:
        closed = jax.make_jaxpr(partial(sol.grouped_loss, k=k))(*shapes(L, B, D))
        out.append(program_data.encode_or_reason(closed, getattr(sol, "__file__", "")))
    return out


# ---- in the judge: measuring a rebuilt program ----

def measure(closed, w, x, k, wider=None) -> dict:
    """The program (grouped_loss(k) rebuilt) and jit(value_and_grad) of it compiled once: its
    layout, temp_size_in_bytes, the loss and the gradient on (w, x); with `wider` (the same
    function's program at more rows) also "temp_wider". Run in the judge (in threads: XLA
    releases the GIL while it compiles)."""
    params, xf = inputs(w, x)
    loss = loss_of(closed)
    compiled = costs.compile_fn(jax.value_and_grad(loss), params, xf)
    temp = int(compiled.memory_analysis().temp_size_in_bytes)
    value, grads = compiled(params, xf)
    out = {"k": k, "outputs": 1, "layout": summary(closed, w.shape[0], *x.shape), "temp": temp,
           "value": np.asarray(value), "grads": jax.tree.map(np.asarray, grads)}
    if wider is not None:
        L, D = w.shape[0], x.shape[1]
        out["temp_wider"] = costs.temp_bytes(jax.value_and_grad(loss_of(wider)),
                                             *shapes(L, wider.invars[-1].aval.shape[0], D))
    return out


def measure_all(programs, w, x, ks, wider=None) -> list[dict]:
    """measure for each k of ks (programs and wider: k -> rebuilt program), in threads; in the
    order of ks, up to the first whose program does not return one value."""
    jobs = []
    for k in ks:
        if len(programs[k].outvars) != 1:
            jobs.append({"k": k, "outputs": len(programs[k].outvars)})
            break
        jobs.append(k)
    with ThreadPoolExecutor(max_workers=max(1, len(jobs))) as pool:
        futures = [pool.submit(measure, programs[j], w, x, j, (wider or {}).get(j)) if not isinstance(j, dict)
                   else None for j in jobs]
        return [j if f is None else f.result() for j, f in zip(jobs, futures)]


def gradient_temp(closed, L, B, D) -> int:
    """temp_size_in_bytes of jit(grad) of a rebuilt grouped_loss, with respect to params."""
    return costs.temp_bytes(jax.grad(loss_of(closed)), *shapes(L, B, D))


@probe
def temp_memory_bytes(sol, w, x, k):
    return answer(sol.temp_memory_bytes(*inputs(w, x), k))


@probe
def best_group_size(sol, pairs):
    """best_group_size for each (w, x), the searches side by side (compiling releases the GIL)."""
    with ThreadPoolExecutor(max_workers=len(pairs)) as pool:
        answers = list(pool.map(lambda a: sol.best_group_size(*inputs(*a)), pairs))
    return [answer(a) for a in answers]
