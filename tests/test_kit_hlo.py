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


def test_collective_groups_read_every_form_xla_writes_and_the_trips_around_them():
    # Listed, iota (with a transpose) and mesh forms name the same groups; a collective in a loop's
    # body runs once per trip XLA knows of.
    text = """HloModule m

%body (p: (s32[], f32[4])) -> (s32[], f32[4]) {
  %p = (s32[], f32[4]{0}) parameter(0)
  %ar = f32[4]{0} all-reduce(%g), channel_id=2, replica_groups={{0,1},{2,3},{4,5},{6,7}}, to_apply=%add
  ROOT %t = (s32[], f32[4]{0}) tuple(%i, %ar)
}

ENTRY %main (x: f32[20,40]) -> f32[20,40] {
  %a = f32[20,40]{1,0} all-reduce(%x), channel_id=1, replica_groups=[4,2]<=[8], to_apply=%add
  %b = (f32[40,24]{1,0}, f32[]) all-reduce(%d, %w), channel_id=3, replica_groups=[2,4]<=[4,2]T(1,0), to_apply=%add
  %c = f32[8]{0} all-gather(%y), channel_id=4, replica_groups=mesh['data'=4,'model'=2] {'data'}, dimensions={0}
  %e = f32[2]{0} all-reduce(%z), channel_id=5, replica_groups=mesh['data'=4,'model'=2] {'data','model'}, to_apply=%add
  %w = (s32[], f32[4]{0}) while(%init), condition=%cond, body=%body, backend_config={"known_trip_count":{"n":"3"}}
  ROOT %r = f32[20,40]{1,0} copy(%a)
}
"""
    pairs, columns, everyone = ((0, 1), (2, 3), (4, 5), (6, 7)), ((0, 2, 4, 6), (1, 3, 5, 7)), ((*range(8),),)
    assert hlo.collective_groups(text, 8) == [
        ("all-reduce", (4,), pairs, 3),
        ("all-reduce", (20, 40), pairs, 1),
        ("all-reduce", (40, 24), columns, 1), ("all-reduce", (), columns, 1),
        ("all-gather", (8,), columns, 1),
        ("all-reduce", (2,), everyone, 1),
    ]


def test_collective_groups_of_a_compiled_program_name_the_mesh_axis_summed():
    import numpy as np
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    m = jax.make_mesh((4, 2), ("data", "model"), axis_types=(jax.sharding.AxisType.Explicit,) * 2)
    x = jax.device_put(np.ones((8, 4), np.float32), NamedSharding(m, P("data", "model")))
    by_model = jax.jit(lambda v: jnp.sum(v, axis=1)).lower(x).compile().as_text()
    groups = {g for op, _, g, _ in hlo.collective_groups(by_model, 8) if op == "all-reduce"}
    assert groups == {((0, 1), (2, 3), (4, 5), (6, 7))}  # devices of one row of the mesh


def test_a_loop_of_traced_trips_runs_as_many_as_it_needs_to_fill_what_it_carries():
    # XLA knows no trip count for a bound read from an array: the loop that writes 8 of 32 columns
    # a trip runs 4 times (loop_trips), for the FLOPs counted and for the collectives' times alike.
    def chunked(a, b, n):
        def body(c):
            i, out = c
            return i + 1, lax.dynamic_update_slice_in_dim(out, a @ lax.dynamic_slice_in_dim(b, i * 8, 8, 1), i * 8, 1)
        return lax.while_loop(lambda c: c[0] < n, body, (0, jnp.zeros((16, 32))))[1]

    a, b = jnp.ones((16, 32)), jnp.ones((32, 32))
    exe = costs.compile_fn(chunked, a, b, jnp.int32(4))
    text = exe.as_text()
    assert "known_trip_count" not in text
    whole = 4 * 2 * 16 * 32 * 8
    assert abs(costs.flops(exe) + hlo.uncounted_loop_flops(text) - whole) <= 0.1 * whole


def test_a_buffer_of_one_number_a_trip_does_not_size_a_loop():
    # A loop of traced trips that writes one number a trip into a buffer of more slots than it fills
    # (a loss per row, 4 rows written): loop_trips reads only slices of two values or more, and the
    # loop's matmul is counted once, not once per slot.
    def losses(a, b, n):
        def body(c):
            i, acc, out = c
            return i + 1, acc + a @ b, out.at[i].set(jnp.sum(a))
        return lax.while_loop(lambda c: c[0] < n, body, (0, jnp.zeros((16, 16)), jnp.zeros(12)))[1:]

    exe = costs.compile_fn(losses, jnp.ones((16, 32)), jnp.ones((32, 16)), jnp.int32(4))
    assert hlo.uncounted_loop_flops(exe.as_text()) == 0.0
    assert hlo.trips_unknown(exe.as_text())
