"""The grading processes compile without LLVM's optimisations (graders.runner.launch.COMPILER_SETTINGS),
to shorten the edit loop. That is sound only if nothing a grader reads of a compiled program
changes: the compiled HLO (its collectives), memory_analysis() and cost_analysis()."""

import jax
import jax.numpy as jnp
import pytest
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

from graders.runner import launch


def programs():
    """One program of each kind the graders read: sharded with collectives, rematerialised, scanned."""
    mesh = jax.make_mesh((2, 4), ("data", "model"), axis_types=(AxisType.Auto,) * 2)

    def mlp(x, w1, w2):
        return (jax.nn.relu(x @ w1) @ w2).sum()

    sharded = [jax.ShapeDtypeStruct(shape, jnp.float32, sharding=NamedSharding(mesh, spec))
               for shape, spec in (((8, 12), P("data", None)), ((12, 20), P(None, "model")), ((20, 12), P("model", None)))]
    yield "Megatron MLP gradient", jax.jit(jax.grad(mlp, argnums=(1, 2))).lower(*sharded)

    def stack(w, x):
        for i in range(w.shape[0]):
            x = jax.checkpoint(lambda x, w: jnp.tanh(x @ w), policy=jax.checkpoint_policies.dots_saveable)(x, w[i])
        return (x ** 2).sum()
    yield "checkpointed stack gradient", jax.jit(jax.grad(stack)).lower(jnp.zeros((6, 16, 16)), jnp.zeros((5, 16)))

    def accumulate(w, xs):
        def body(total, x):
            return total + jax.grad(lambda w: jnp.sum(jnp.tanh(x @ w)))(w), None
        return jax.lax.scan(body, jnp.zeros_like(w), xs)[0]
    yield "scanned accumulation", jax.jit(accumulate).lower(jnp.zeros((7, 3)), jnp.zeros((4, 5, 7)))


def figures(compiled) -> tuple:
    memory = compiled.memory_analysis()
    return (compiled.as_text(), memory.temp_size_in_bytes, memory.argument_size_in_bytes,
            memory.output_size_in_bytes, compiled.cost_analysis()["flops"])


def test_grading_is_without_llvm_optimisations():
    assert launch.child_env(60, True, 0)["JAX_DISABLE_MOST_OPTIMIZATIONS"] == "true"
    assert launch.child_env(60, False, 0, base={"JAX_DISABLE_MOST_OPTIMIZATIONS": "false"})[
        "JAX_DISABLE_MOST_OPTIMIZATIONS"] == "true"


@pytest.mark.parametrize("name", [name for name, _ in programs()])
def test_without_llvm_optimisations_the_hlo_memory_and_flops_are_the_same(name):
    found = {}
    try:
        for off in (False, True):
            jax.config.update("jax_disable_most_optimizations", off)
            lowered = dict(programs())[name]
            found[off] = figures(lowered.compile())
    finally:
        jax.config.update("jax_disable_most_optimizations", False)
    assert found[True][0] == found[False][0], "the compiled HLO differs"
    assert found[True][1:] == found[False][1:]
