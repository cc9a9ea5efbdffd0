"""graders/kit/hlo.py's parse of compiled HLO text into computations (shared by ex9's dataflow
and ex7's FLOP count) and the matmul FLOPs XLA's cost analysis leaves out of a loop's trips."""

import jax
import jax.numpy as jnp
from jax import lax

from graders.kit import costs, hlo


def _chunked(a, b):
    # 4 chunks of b's columns: the first outside the loop, 3 in a fori_loop of known trip count.
    chunk = lambda i: a @ lax.dynamic_slice_in_dim(b, i * 8, 8, axis=1)  # noqa: E731
    return lax.fori_loop(1, 4, lambda i, acc: acc + chunk(i), chunk(0))


def test_uncounted_loop_flops_adds_the_trips_cost_analysis_counts_once():
    a, b = jnp.ones((16, 32)), jnp.ones((32, 32))
    exe = costs.compile_fn(_chunked, a, b)
    text = exe.as_text()
    assert "ENTRY" in hlo.hlo_computations(text)
    whole = 4 * 2 * 16 * 32 * 8  # every chunk's matmul
    counted = costs.flops(exe)
    assert counted < 0.75 * whole  # the loop's body is counted once, not 3 times
    assert abs(counted + hlo.uncounted_loop_flops(text) - whole) <= 0.1 * whole


def test_uncounted_loop_flops_is_zero_without_loops():
    exe = costs.compile_fn(lambda a, b: a @ b, jnp.ones((16, 32)), jnp.ones((32, 8)))
    assert hlo.uncounted_loop_flops(exe.as_text()) == 0.0


def test_collectives_counted_from_the_parse_are_those_the_text_holds():
    # ex9 counts a compiled step's collectives from the parse its dataflow reads: the same counts as
    # reading the text (a sum over a mesh axis and a gather of a split array).
    import numpy as np
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    m = jax.make_mesh((8,), ("d",), axis_types=(jax.sharding.AxisType.Explicit,))
    x = jax.device_put(np.arange(64.0, dtype=np.float32).reshape(8, 8), NamedSharding(m, P("d", None)))
    exe = jax.jit(lambda v: (v.sum(), jax.sharding.reshard(v * 2, NamedSharding(m, P())))).lower(x).compile()
    text = exe.as_text()
    counts = hlo.collective_counts(text)
    assert any(counts.values()), counts
    assert hlo.parsed_collective_counts(hlo.hlo_computations(text)) == counts
