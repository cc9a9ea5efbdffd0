"""Exercise 6's wrong solutions, beyond the check each declares (tests/test_wrong_solutions.py):
what else they lose, and what they keep."""

import pytest

from grading import technique_free_params

EX = "ex6"
NUMBERS = {"outputs_match_a_plain_stack", "gradients_match_a_plain_stack"}
PER_BLOCK_TECHNIQUE = {"each_block_is_checkpointed_separately", "each_checkpoint_holds_a_whole_block", "full_saves_nothing",
                       "dots_uses_dots_saveable", "full_remat_matches_per_block_remat"}


def test_policy_mistakes_keep_the_numeric_points(corpus):
    # Checkpointing changes no number: a wrong policy or a wrong place may only cost technique and memory points.
    for case in ("policy_by_primitive_name", "dots_without_policy", "swapped_policies", "whole_stack_remat",
                 "everything_saveable_dots", "attention_half_remat", "mlp_half_remat"):
        lost = corpus(EX)[case].lost(EX, among=NUMBERS)
        assert not lost, (case, sorted(lost))


@pytest.mark.parametrize("case", technique_free_params(EX))
def test_technique_free_solutions_keep_the_numeric_points(corpus, case):
    # At most half of the points (tests/test_wrong_solutions.py), all of them for the numbers.
    assert not NUMBERS & set(corpus(EX)[case].lost(EX)), f"{case} should get every number right"


def test_half_wrapped_blocks_lose_every_technique_point(corpus):
    # One nnx.remat per block, around half of it: the other half keeps its activations, so none of
    # the checkpoints is a working per-block checkpoint, and nothing else of the technique is right.
    for case in ("attention_half_remat", "mlp_half_remat"):
        lost = set(corpus(EX)[case].lost(EX, among=PER_BLOCK_TECHNIQUE))
        assert PER_BLOCK_TECHNIQUE <= lost, (case, lost)


def test_ways_around_the_dataflow_are_counted_and_debug_prints_are_not():
    # What the probe's side_channels counts (values that leave the program and may come back):
    # mutable arrays, made in the program or closed over, and callbacks that return values; a
    # jax.debug.print returns nothing and is a learner's right.
    import jax
    import jax.numpy as jnp

    from graders.exercises.ex6_nnx_block_remat.probes import side_channels

    def made_inside(x):
        ref = jax.new_ref(jnp.zeros_like(x))
        ref[...] = x
        return ref[...] * 2

    with jax.ensure_compile_time_eval():
        closed_over = jax.new_ref(jnp.zeros(3))

    def through_closed_over(x):
        closed_over[...] = x
        return closed_over[...] + 1

    def host(x):
        return jax.pure_callback(lambda a: a, jax.ShapeDtypeStruct(x.shape, x.dtype), x)

    def printed(x):
        jax.debug.print("x {}", x)
        return x * 2

    x = jnp.ones(3)
    for fn in (made_inside, through_closed_over, host):
        assert side_channels(jax.make_jaxpr(fn)(x)) > 0, fn.__name__
    assert side_channels(jax.make_jaxpr(printed)(x)) == 0


def test_the_models_given_to_temp_memory_bytes_are_drawn_from_too_many_shapes_to_tabulate():
    # A table of figures computed beforehand earned the check while the grader's models took the
    # Transformer's configuration (tests/corpus/ex6/memory_looked_up.py): the model's sizes are
    # drawn, every axis a distinct size, from more shapes than a table could hold, and its three
    # blocks run None, "full" and "dots" in a drawn order.
    import itertools

    from graders.exercises.ex6_nnx_block_remat.checks import STACK_SIZES, stack_specs

    shapes = sum(len(set(sizes)) == len(sizes) for sizes in itertools.product([3], *STACK_SIZES.values()))
    assert shapes > 1_000_000, shapes
    drawn, orders = set(), set()
    for seed in range(200):
        specs = stack_specs(seed)
        assert len(specs) == 1, specs
        (c, layout), = specs
        assert sorted(layout, key=str) == sorted((None, "full", "dots"), key=str), layout
        sizes = (len(layout), *c)
        assert len(set(sizes)) == len(sizes), c
        drawn.add((c, layout))
        orders.add(layout)
    assert len(orders) == 6, orders
    assert len(drawn) > 195, len(drawn)  # 200 draws, almost all different


@pytest.mark.parametrize("index", [0, 23])
def test_the_numpy_expected_values_are_jax_grad_of_the_grader_block_in_float64(index):
    # The checks' expected outputs and gradients are written out by hand in NumPy
    # (graders/exercises/ex6_nnx_block_remat/plain_stack.py); here they meet jax.grad of the same block written in JAX
    # (block_fn, whose markers the structure checks read), both in float64, on configurations
    # the grader draws: a wrong term in the hand-written backward pass is off by far more.
    import jax
    import numpy as np

    from graders.exercises.ex6_nnx_block_remat import plain_stack
    from graders.exercises.ex6_nnx_block_remat.probes import block_fn, mse, param_shapes
    from graders.exercises.ex6_nnx_block_remat.checks import CONFIGS

    cfg = CONFIGS[index % len(CONFIGS)]._replace(layers=2)  # two: a block's gradient reaches the one before
    rng = np.random.default_rng(index)
    ps = [{k: 0.5 * rng.normal(size=s) for k, s in param_shapes(cfg).items()} for _ in range(cfg.layers)]
    x, y = (rng.normal(size=(cfg.batch, cfg.length, cfg.d_model)) for _ in range(2))

    def stack(ps, x):
        for p in ps:
            x = block_fn(p, x, cfg.heads)
        return x

    @jax.jit
    def expected(ps, x, y):
        return stack(ps, x), jax.grad(lambda ps: mse(stack(ps, x), y))(ps), block_fn(ps[0], x, cfg.heads)

    with jax.enable_x64(True):
        out, grads, first = jax.tree.map(np.asarray, expected(ps, x, y))
    assert out.dtype == np.float64
    mine_out, mine_grads = plain_stack.out_and_grads(ps, x, y, cfg.heads)
    np.testing.assert_allclose(mine_out, out, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(plain_stack.block_output(ps[0], x, cfg.heads), first, rtol=1e-12, atol=1e-12)
    for i, (mine, theirs) in enumerate(zip(mine_grads, grads)):
        assert set(mine) == set(theirs), (i, sorted(mine), sorted(theirs))
        for path in theirs:
            scale = np.max(np.abs(theirs[path]))
            assert np.max(np.abs(mine[path] - theirs[path])) <= 1e-10 * scale, (i, path)


@pytest.mark.course  # compiles three gradients for each configuration: about a minute
def test_every_configuration_shows_the_saving():
    # What graders/exercises/ex6_nnx_block_remat/checks.py's _configs() says of the depths it draws: on every
    # configuration, the grader's own per-block checkpointed gradient with no policy ("full")
    # needs less than half of the plain gradient's temporary memory, and dots_saveable lies
    # strictly between, so the memory checks' lesson shows whichever configuration is drawn.
    from concurrent.futures import ThreadPoolExecutor

    import jax

    from graders.kit.costs import temp_bytes
    from graders.exercises.ex6_nnx_block_remat.probes import abstract_block_args, mse
    from graders.exercises.ex6_nnx_block_remat.checks import CONFIGS, own_memory, stack_fn

    def figures(cfg):
        block, act = abstract_block_args(cfg)
        plain = temp_bytes(lambda ps, x, y: jax.grad(lambda ps: mse(stack_fn(ps, x, cfg.heads), y))(ps),
                           [block] * cfg.layers, act, act)
        return plain, own_memory(cfg)

    assert {c.layers for c in CONFIGS} == {3, 4}, CONFIGS
    with ThreadPoolExecutor(max_workers=2) as pool:  # XLA compiles without the GIL
        measured = dict(zip(CONFIGS, pool.map(figures, CONFIGS)))
    for cfg, (plain, own) in measured.items():
        assert own["full"] < own["dots"] < plain, (cfg, own, plain)
        assert own["full"] < plain / 2, (cfg, own, plain)


@pytest.mark.course  # compiles two programs for each of 120 draws: about a minute
def test_the_forward_pass_alone_needs_clearly_less_than_the_gradient_of_every_drawn_model():
    # What STACK_SIZES says: on the grader's own models, as drawn, the loss alone needs at most
    # 0.75 of the gradient's temporary memory, so that a temp_memory_bytes measuring the forward
    # pass (tests/corpus/ex6/forward_only_memory.py) is off by far more than MEMORY_AGREEMENT
    # whatever the draw; and the gradient needs some temporary memory to measure at all.
    from concurrent.futures import ThreadPoolExecutor

    from graders.exercises.ex6_nnx_block_remat.checks import MEMORY_AGREEMENT, own_stack_forward_temp, own_stack_memory, stack_specs

    def ratio(seed):
        (c, layout), = stack_specs(seed)
        gradient = own_stack_memory(c, layout)["temp_size_in_bytes"]
        return gradient, own_stack_forward_temp(c, layout) / gradient

    with ThreadPoolExecutor(max_workers=2) as pool:  # XLA compiles without the GIL
        measured = dict(zip(range(120), pool.map(ratio, range(120))))
    assert 0.75 < 1 - 2 * MEMORY_AGREEMENT
    for seed, (gradient, forward) in measured.items():
        assert gradient > 0 and forward < 0.75, (seed, stack_specs(seed), gradient, forward)


def test_a_sum_of_memory_fields_is_named_however_close_it_comes():
    # The gradients' output can be under 1% of the temporary memory, so a temp_memory_bytes that
    # adds it is within any tolerance: the check names such a sum exactly, whichever fields it adds.
    from grading import grader_module

    field_sums = grader_module(EX).field_sums
    stat = {"temp_size_in_bytes": 1_000_000, "argument_size_in_bytes": 9_000, "output_size_in_bytes": 7_000,
            "generated_code_size_in_bytes": 0, "peak_memory_in_bytes": 400_000}
    sums = field_sums(stat)
    assert sums[1_007_000] == ("temp_size_in_bytes", "output_size_in_bytes")
    assert sums[1_016_000] == ("temp_size_in_bytes", "argument_size_in_bytes", "output_size_in_bytes")
    assert sums[400_000] == ("peak_memory_in_bytes",)
    assert 1_000_000 not in sums  # the right figure is no sum
    assert not any("generated_code_size_in_bytes" in fields for fields in sums.values())  # zero adds nothing


@pytest.mark.course  # compiles four gradients for each of 12 draws: about a minute
def test_right_ways_of_measuring_agree_with_the_grader_within_memory_agreement():
    # What MEMORY_AGREEMENT says: on the grader's own models as drawn, the ways of measuring the
    # gradient that are right give one of the grader's two figures (jax.grad, jax.value_and_grad),
    # exactly or within the agreement.
    import jax
    import jax.numpy as jnp
    from flax import nnx

    from grading import grader_module

    probes, checks = grader_module(EX, probes=True), grader_module(EX)
    GraderStack, stack_data = probes.GraderStack, probes.stack_data
    MEMORY_AGREEMENT, own_stack_memory, stack_specs = checks.MEMORY_AGREEMENT, checks.own_stack_memory, checks.stack_specs

    def mse_loss(model, x, y):
        return jnp.mean((model(x) - y) ** 2)

    def closed_over(graphdef, params, rest, x, y):
        return jax.jit(lambda p: jax.grad(lambda p: mse_loss(nnx.merge(graphdef, p, rest), x, y))(p)).lower(params)

    def value_and_grad(graphdef, params, rest, x, y):
        f = lambda p, x, y: jax.value_and_grad(lambda p: mse_loss(nnx.merge(graphdef, p, rest), x, y))(p)  # noqa: E731
        return jax.jit(f).lower(params, x, y)

    def loss_as_aux(graphdef, params, rest, x, y):
        def f(p, x, y):
            def loss(p):
                value = mse_loss(nnx.merge(graphdef, p, rest), x, y)
                return value, value
            return jax.grad(loss, has_aux=True)(p)
        return jax.jit(f).lower(params, x, y)

    def by_vjp(graphdef, params, rest, x, y):
        def f(p, x, y):
            value, back = jax.vjp(lambda p: mse_loss(nnx.merge(graphdef, p, rest), x, y), p)
            return back(jnp.ones_like(value))[0]
        return jax.jit(f).lower(params, x, y)

    for seed in range(12):
        (c, layout), = stack_specs(seed)
        right = [own_stack_memory(c, layout)["temp_size_in_bytes"],
                 own_stack_memory(c, layout, with_loss=True)["temp_size_in_bytes"]]
        x, y = stack_data(c)
        for way in (closed_over, value_and_grad, loss_as_aux, by_vjp):
            graphdef, params, rest = nnx.split(GraderStack(c, layout), nnx.Param, ...)
            got = int(way(graphdef, params, rest, x, y).compile().memory_analysis().temp_size_in_bytes)
            assert min(abs(got - r) / r for r in right) <= MEMORY_AGREEMENT, (seed, way.__name__, got, right)
