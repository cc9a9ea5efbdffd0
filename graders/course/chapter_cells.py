"""The yardstick `make bench` compares whole-package grading with: the chapter's own
self-check cells for Exercises 1-4, run in one process on the reference solutions.

Written for this package (the same work the chapter's cells do: the same sizes, the same
comparisons, one process, no isolation), not copied from the chapter. Run by graders/course/bench.py
as `python -m graders.course.chapter_cells`, in the graders' child environment, warm cache.
"""

import sys
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import PartitionSpec as P

from graders import catalog
from graders.kit import costs, hlo, verdicts


def _max_diff(a, b) -> float:
    return max(float(jnp.max(jnp.abs(x - y))) for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)))


def ex1(sol) -> None:
    r = np.random.default_rng(99)
    B, T, D = 24, 10, 5
    x = jnp.asarray(r.normal(size=(B, T, D)), jnp.float32)
    y = jnp.asarray(r.normal(size=(B, T)), jnp.float32)
    lengths = np.where(np.arange(B) % 3 == 0, 1, T)
    m = jnp.asarray(np.arange(T)[None, :] < lengths[:, None], jnp.float32)
    w = jnp.asarray(r.normal(size=(D,)), jnp.float32)
    s, n = sol.tok_loss_sum_count(w, x, y, m)
    assert float(n) == float(lengths.sum())
    s1, _ = sol.tok_loss_sum_count(w, x[:10], y[:10], m[:10])
    s2, _ = sol.tok_loss_sum_count(w, x[10:], y[10:], m[10:])
    assert np.isclose(float(s1 + s2), float(s), rtol=1e-5)
    full = jax.grad(lambda w: sol.tok_loss_sum_count(w, x, y, m)[0] / sol.tok_loss_sum_count(w, x, y, m)[1])(w)
    for n_micro in (2, 4, 8):
        assert _max_diff(sol.accum_token_weighted(w, x, y, m, n_micro=n_micro), full) < 1e-5
    assert "scan" in str(jax.make_jaxpr(partial(sol.accum_token_weighted, n_micro=4))(w, x, y, m))


def ex2(sol) -> None:
    r = np.random.default_rng(21)
    D = 128
    p = {"w": jnp.asarray(r.normal(size=(64, D, D)) / np.sqrt(D), jnp.float32)}
    x = jnp.asarray(r.normal(size=(128, D)), jnp.float32)
    xs = np.asarray(x, np.float64)
    for layer in range(64):
        xs = xs + np.tanh(xs @ np.asarray(p["w"][layer], np.float64))
    assert np.isclose(float(sol.grouped_loss(p, x)), np.mean(xs ** 2), rtol=1e-4)
    g0 = jax.jit(jax.grad(sol.grouped_loss))(p, x)
    mem = {}
    for k in (1, 8, 64):
        f = partial(sol.grouped_loss, k=k)
        assert "remat" in str(jax.make_jaxpr(f)(p, x))
        assert _max_diff(jax.jit(jax.grad(f))(p, x), g0) < 1e-4
        mem[k] = costs.temp_bytes(jax.grad(f), p, x)
    assert mem[8] < mem[1] and mem[8] < mem[64]


def ex3(sol) -> None:
    r = np.random.default_rng(77)
    D, H, B = 32, 64, 32
    p = {"w1": jnp.asarray(r.normal(size=(D, H)) * 0.2, jnp.float32),
         "w2": jnp.asarray(r.normal(size=(H, D)) * 0.2, jnp.float32)}
    x = jnp.asarray(r.normal(size=(B, D)), jnp.float32)
    y = jnp.asarray(r.normal(size=(B, D)), jnp.float32)
    ref = lambda p, x, y: jnp.mean((jax.nn.relu(x @ p["w1"]) @ p["w2"] - y) ** 2)  # noqa: E731
    loss_ref, grad_ref = jax.value_and_grad(ref)(p, x, y)
    mesh = jax.make_mesh((8,), ("fsdp",))
    with jax.set_mesh(mesh):
        ps = {k: jax.device_put(v, P("fsdp", None)) for k, v in p.items()}
        xs, ys = jax.device_put(x, P("fsdp", None)), jax.device_put(y, P("fsdp", None))
        loss = jax.jit(sol.fsdp_loss)(ps, xs, ys)
        grad = jax.jit(jax.grad(sol.fsdp_loss))(ps, xs, ys)
        text = jax.jit(jax.grad(sol.fsdp_loss)).lower(ps, xs, ys).compile().as_text()
    assert np.isclose(float(loss), float(loss_ref), rtol=1e-5)
    assert _max_diff(grad, grad_ref) < 1e-5
    counts = hlo.collective_counts(text)
    assert counts["all-gather"] >= 2 and counts["reduce-scatter"] >= 2


def ex4(sol) -> None:
    assert float(sol.sgd_bf16(1.0, 1e-3, 1.0, 100)) == 1.0
    assert np.isclose(float(sol.sgd_fp32_master(1.0, 1e-3, 1.0, 100)), 0.9, atol=1e-5)


def command(python: str, *args: str) -> list[str]:
    """How this module is started as a process (the one place that says it)."""
    return [python, "-m", "graders.course.chapter_cells", *args]


def main() -> int:
    reference = catalog.ROOT / "reference"
    for ex_id, run in (("ex1", ex1), ("ex2", ex2), ("ex3", ex3), ("ex4", ex4)):
        run(verdicts.load_module(catalog.module_name(ex_id), reference))
    print("self-checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
