"""The quiz key is proven on the installed JAX, Flax and Optax, not copied from the notes:
if an upgrade changes a fact, one of these tests fails instead of the quiz teaching it."""

import functools
import importlib.util
import re

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx
from jax.ad_checkpoint import print_saved_residuals
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

from grading import ROOT
from graders.kit import jaxpr, costs
from graders.kit.hlo import collective_counts
from graders.exercises.quiz.checks import EXPLANATIONS, QUESTIONS, digest, load_key


def _reference_key() -> dict:
    spec = importlib.util.spec_from_file_location("reference_quiz", ROOT / "reference" / "quiz.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.ANSWERS


KEY = _reference_key()


def options(question: int) -> dict[str, str]:
    """The option texts of a question, as the learner reads them in exercises/quiz.py."""
    text = (ROOT / "exercises" / "quiz.py").read_text()
    block = re.search(rf"^Q{question}\.(.*?)(?=^Q\d+\.|^\"\"\")", text, re.S | re.M).group(1)
    found = re.findall(r"\b([A-D])\. (.*?)(?=\s+\b[A-D]\. |\n\s*\n|\n\s+[A-D]\. |$)", block, re.S)
    return {letter: " ".join(body.split()) for letter, body in found}


def test_grader_hashes_match_reference_key():
    key = load_key()
    assert set(KEY) == set(key["hashes"]) == set(QUESTIONS) == set(EXPLANATIONS)
    for question, letter in KEY.items():
        assert digest(key["salt"], question, letter) == key["hashes"][question], question


def test_hashes_hide_nothing_from_a_learner_who_tries():
    # What the grader's docstring says: at most 4 guesses per question recover the whole key.
    key, tries, found = load_key(), 0, {}
    for question in QUESTIONS:
        for letter in "ABCD":
            tries += 1
            if digest(key["salt"], question, letter) == key["hashes"][question]:
                found[question] = letter
                break
    assert found == KEY and tries <= 4 * len(QUESTIONS)


def test_every_question_has_four_options():
    for question in QUESTIONS:
        assert sorted(options(question)) == ["A", "B", "C", "D"], (question, options(question))


def test_explanations_never_name_a_letter():
    for question, text in EXPLANATIONS.items():
        assert not re.search(r"\b[A-D]\b[.)]|['\"][A-D]['\"]|\boption\b|\banswer [A-D]\b", text), question


def test_q1_adam_fp32_needs_16_bytes_per_parameter():
    params = {"w": jnp.zeros((30, 7), jnp.float32), "b": jnp.zeros((7,), jnp.float32)}
    state = optax.adam(1e-3).init(params)
    nbytes = lambda tree: sum(x.nbytes for x in jax.tree.leaves(tree) if x.ndim > 0)  # noqa: E731
    n = sum(x.size for x in jax.tree.leaves(params))
    per_param = (nbytes(params) + nbytes(params) + nbytes(state)) / n  # params + grads + (mu, nu)
    assert per_param == 16
    assert options(1)[KEY[1]] == f"{1e9 * per_param / 1e9:.0f} GB"


def _stack_loss(w1, w2, x, mode):
    """6 residual MLP layers (hidden 160 > width 48, so a layer's insides outweigh its input);
    mode: None, 'whole' (one checkpoint around everything) or 'layer' (one per layer)."""
    def layer(x, a, b):
        return x + jnp.tanh(x @ a) @ b
    if mode == "layer":
        layer = jax.checkpoint(layer)

    def body(x):
        for i in range(w1.shape[0]):
            x = layer(x, w1[i], w2[i])
        return jnp.sum(x ** 2)
    return (jax.checkpoint(body) if mode == "whole" else body)(x)


def test_q2_one_checkpoint_around_the_whole_model_keeps_the_peak():
    # measured here: none 835,584 B, whole 835,584 B, per layer 540,672 B
    w1, w2, x = jnp.ones((6, 48, 160)) * 0.01, jnp.ones((6, 160, 48)) * 0.01, jnp.ones((96, 48))
    temp = {mode: costs.temp_bytes(jax.grad(lambda a, b, x, m=mode: _stack_loss(a, b, x, m)), w1, w2, x)
            for mode in (None, "whole", "layer")}
    assert temp["whole"] >= 0.95 * temp[None], temp
    assert temp["layer"] < 0.8 * temp[None], temp
    assert "whole model" in options(2)[KEY[2]]


def _residuals(fn, *args, capsys) -> list[str]:
    print_saved_residuals(fn, *args)
    return [line for line in capsys.readouterr().out.splitlines() if line.strip()]


def _block(w, x):
    return jnp.sum(jnp.sin(jnp.tanh(x @ w) @ w))


def test_q3_dots_saveable_keeps_only_matmul_outputs(capsys):
    w, x = jnp.ones((4, 4)), jnp.ones((3, 4))
    saved = _residuals(jax.checkpoint(_block, policy=jax.checkpoint_policies.dots_saveable), w, x, capsys=capsys)
    outputs = [line for line in saved if "output of" in line]
    assert outputs and all("output of dot_general" in line for line in outputs), saved
    assert "dot_general" in options(3)[KEY[3]]


def test_q4_nnx_optimizer_without_wrt_raises_type_error():
    model = nnx.Linear(3, 2, rngs=nnx.Rngs(0))
    with pytest.raises(TypeError, match="wrt"):  # as the explanation says: wrt is required
        nnx.Optimizer(model, optax.adam(1e-3))
    optimizer = nnx.Optimizer(model, optax.adam(1e-3), wrt=nnx.Param)  # A does not raise
    grads = nnx.grad(lambda m: jnp.sum(m(jnp.ones((1, 3)))))(model)
    optimizer.update(model, grads)  # C does not raise
    nnx.state(model, nnx.BatchStat)  # D does not raise
    assert options(4)[KEY[4]] == "nnx.Optimizer(model, optax.adam(1e-3))"


def test_q5_gradient_of_fp32_parameters_is_fp32_under_bf16_compute():
    w = jnp.ones((3, 2), jnp.float32)
    x = jnp.ones((4, 3), jnp.bfloat16)
    grad = jax.grad(lambda w: jnp.sum(x @ w.astype(jnp.bfloat16)).astype(jnp.float32))(w)
    assert grad.dtype == jnp.float32
    assert options(5)[KEY[5]] == "float32"


def test_q6_megatron_mlp_needs_one_all_reduce():
    mesh = jax.make_mesh((2, 4), ("data", "model"), axis_types=(AxisType.Auto, AxisType.Auto))
    spec = lambda *s: NamedSharding(mesh, P(*s))  # noqa: E731
    mlp = jax.jit(lambda x, w1, w2: jax.nn.relu(x @ w1) @ w2,
                  in_shardings=(spec("data", None), spec(None, "model"), spec("model", None)),
                  out_shardings=spec("data", None))
    hlo = mlp.lower(jnp.ones((8, 16)), jnp.ones((16, 32)), jnp.ones((32, 16))).compile().as_text()
    counts = collective_counts(hlo)
    assert counts["all-reduce"] == 1 and sum(counts.values()) == 1, counts
    assert options(6)[KEY[6]].startswith("one all-reduce, after the second matmul")


def test_q7_key_is_the_pipeline_statement():
    # A definition: FSDP runs every layer on every device; splitting layers is pipeline parallelism.
    assert options(7)[KEY[7]] == "each device computes only some of the model's layers"


def test_q8_multisteps_returns_zeros_then_one_adam_step_on_the_mean():
    params = {"w": jnp.array([1.0, -2.0, 0.5])}
    grads = [{"w": jnp.array(g)} for g in ([0.1, 0.2, -0.3], [0.5, -0.1, 0.0], [-0.2, 0.4, 0.1], [0.3, 0.3, 0.3])]
    multi = optax.MultiSteps(optax.adam(1e-3), every_k_schedule=4)
    state = multi.init(params)
    updates = []
    states = []
    for g in grads:
        u, state = multi.update(g, state, params)
        updates.append(u["w"])
        states.append(state)
    assert all(np.all(np.asarray(u) == 0) for u in updates[:3])
    assert len(states) == 4 and all(  # the explanation: the state changes on every call
        any(not np.array_equal(a, b) for a, b in zip(jax.tree.leaves(s0), jax.tree.leaves(s1)))
        for s0, s1 in zip([multi.init(params)] + states[:-1], states))
    adam = optax.adam(1e-3)
    mean = {"w": sum(g["w"] for g in grads) / 4}
    expected, _ = adam.update(mean, adam.init(params), params)
    np.testing.assert_allclose(updates[3], expected["w"], rtol=1e-6)
    assert options(8)[KEY[8]].startswith("the first 3 calls return all-zero updates")


def test_q9_checkpoint_called_with_block_and_input_raises_type_error():
    w, x = jnp.ones((4, 4)), jnp.ones((3, 4))
    with pytest.raises(TypeError, match="takes 1 positional argument"):
        jax.checkpoint(lambda b, x: b(x), lambda x: x @ w, x)
    assert jnp.allclose(jax.checkpoint(lambda w, x: x @ w)(w, x), x @ w)  # wrap first, then call
    assert options(9)[KEY[9]].startswith("TypeError")


def test_q10_save_only_these_names_with_a_primitive_name_saves_nothing(capsys):
    w, x = jnp.ones((4, 4)), jnp.ones((3, 4))
    by_name = _residuals(jax.checkpoint(
        _block, policy=jax.checkpoint_policies.save_only_these_names("dot_general")), w, x, capsys=capsys)
    nothing = _residuals(jax.checkpoint(_block, policy=jax.checkpoint_policies.nothing_saveable), w, x, capsys=capsys)
    dots = _residuals(jax.checkpoint(_block, policy=jax.checkpoint_policies.dots_saveable), w, x, capsys=capsys)
    strip = lambda lines: [line.split(" from ")[0] for line in lines]  # noqa: E731
    assert strip(by_name) == strip(nothing) and len(dots) > len(nothing)
    assert "nothing_saveable" in options(10)[KEY[10]]


def test_q11_remat_with_only_a_policy_raises_type_error_and_partial_works():
    policy = jax.checkpoint_policies.dots_saveable
    with pytest.raises(TypeError, match="missing 1 required positional argument: 'fun'"):
        jax.remat(policy=policy)
    w, x = jnp.ones((4, 4)), jnp.ones((3, 4))
    decorated = functools.partial(jax.remat, policy=policy)(_block)  # the fix the explanation gives
    called = jax.remat(_block, policy=policy)
    assert jnp.allclose(jax.grad(decorated)(w, x), jax.grad(_block)(w, x))
    assert jnp.allclose(jax.grad(called)(w, x), jax.grad(_block)(w, x))
    checkpoints = jaxpr.find(jaxpr.trace(jax.grad(decorated), w, x), "checkpoint")
    assert checkpoints and all(e.params["policy"] is policy for e in checkpoints)
    assert options(11)[KEY[11]].startswith("TypeError as soon as the decorator line runs")


def _exponent(x: float) -> str:
    """1.2e-38 as the explanation writes it (no leading zero in the exponent)."""
    return f"{x:.1e}".replace("e-0", "e-")


def test_q12_bf16_keeps_fp32_exponent_range_and_fp16_underflows():
    f32, f16, bf16 = jnp.finfo(jnp.float32), jnp.finfo(jnp.float16), jnp.finfo(jnp.bfloat16)
    assert bf16.nexp == f32.nexp == 8 and f16.nexp == 5
    assert float(bf16.tiny) == float(f32.tiny)
    for figure in (float(bf16.tiny), float(f16.tiny)):  # the smallest normal numbers the explanation names
        assert f"about {_exponent(figure)}" in EXPLANATIONS[12], _exponent(figure)
    # Not precision: bf16 has fewer mantissa bits than fp16 (option "more mantissa bits" is false).
    assert bf16.nmant < f16.nmant
    assert f"bfloat16 has {bf16.nmant} mantissa bits, float16 has {f16.nmant}" in EXPLANATIONS[12]
    assert float(jnp.array(1e-8, jnp.float16)) == 0.0
    assert float(jnp.array(1e-8, jnp.bfloat16)) == pytest.approx(1e-8, rel=1e-2)

    def grad(dtype, scale=1.0):
        """d/dx of scale * sum(x * a * b) with a = b = 1e-4: a gradient of 1e-8 per element."""
        a = b = jnp.full((5,), 1e-4, dtype)
        return jax.grad(lambda x: jnp.sum(x * a * b) * jnp.asarray(scale, dtype))(jnp.ones((5,), dtype))

    assert np.all(np.asarray(grad(jnp.float16), np.float32) == 0)  # fp16: the gradient is lost
    # Loss scaling saves it (2**14: 2**16 would already overflow fp16's max of 65504); the tolerance
    # allows a few fp16 roundings (eps ~1e-3) of the inputs and products.
    scaled = np.asarray(grad(jnp.float16, 2.0 ** 14), np.float32) / 2.0 ** 14
    np.testing.assert_allclose(scaled, 1e-8, rtol=5e-3)
    kept = grad(jnp.bfloat16)  # bf16: kept without scaling, and the gradient itself stays bf16
    assert kept.dtype == jnp.bfloat16
    # bf16 keeps 8 significant bits (eps ~8e-3): a few roundings stay within 2e-2.
    np.testing.assert_allclose(np.asarray(kept, np.float32), 1e-8, rtol=2e-2)
    # Not accumulation: summed in fp32, the product is there, but stored as fp16 it is 0; bf16 keeps it.
    a16, b16 = jnp.full((1, 2), 1e-4, jnp.float16), jnp.full((2, 1), 1e-4, jnp.float16)
    wide = jnp.dot(a16, b16, preferred_element_type=jnp.float32)
    assert float(wide[0, 0]) == pytest.approx(2e-8, rel=1e-2)
    assert float(wide.astype(jnp.float16)[0, 0]) == 0.0 and float(jnp.dot(a16, b16)[0, 0]) == 0.0
    assert float(jnp.dot(a16.astype(jnp.bfloat16), b16.astype(jnp.bfloat16))[0, 0]) == pytest.approx(2e-8, rel=2e-2)
    assert options(12)[KEY[12]].startswith("bf16 has fp32's 8 exponent bits")


def test_q13_sharded_contracting_dim_on_explicit_axes_raises_until_out_sharding_is_given():
    mesh = jax.make_mesh((2, 4), ("data", "model"))  # as the question writes it
    assert mesh.axis_types == (AxisType.Explicit, AxisType.Explicit)  # 0.12's default
    rng = np.random.default_rng(0)
    x_np, w1_np, w2_np = rng.normal(size=(6, 10)), rng.normal(size=(10, 12)), rng.normal(size=(12, 14))
    expected = np.maximum(x_np @ w1_np, 0) @ w2_np
    with jax.set_mesh(mesh):
        x = jax.device_put(jnp.asarray(x_np, jnp.float32), P("data", None))
        w1 = jax.device_put(jnp.asarray(w1_np, jnp.float32), P(None, "model"))
        w2 = jax.device_put(jnp.asarray(w2_np, jnp.float32), P("model", None))
        plain = jax.jit(lambda x, w1, w2: jax.nn.relu(x @ w1) @ w2)
        with pytest.raises(Exception) as raised:  # ShardingTypeError is not exported by jax
            plain.trace(x, w1, w2)  # raised while tracing: nothing is compiled or run
        assert type(raised.value).__name__ == "ShardingTypeError"
        words = "Contracting dimensions are sharded and it is ambiguous how the output should be sharded"
        assert str(raised.value).startswith(words) and words in EXPLANATIONS[13]
        with pytest.raises(Exception, match="ambiguous"):  # called, as the question does
            plain(x, w1, w2)
        for spec, collectives in ((P("data", None), {"all-reduce": 1}),  # the explanation's fix
                                  (P(None, None), {"all-reduce": 1, "all-gather": 1})):  # replicated: one more
            fixed = jax.jit(lambda x, w1, w2, s=spec: jnp.matmul(jax.nn.relu(x @ w1), w2, out_sharding=s))
            y = fixed(x, w1, w2)
            assert jax.typeof(y).sharding.spec == spec
            np.testing.assert_allclose(np.asarray(y, np.float64), expected, rtol=1e-5, atol=1e-5)
            counts = collective_counts(fixed.lower(x, w1, w2).compile().as_text())
            assert {k: v for k, v in counts.items() if v} == collectives, (spec, counts)
    assert "out_sharding=P('data', None)" in EXPLANATIONS[13]
    assert options(13)[KEY[13]].startswith("it raises ShardingTypeError")


def test_q14_adamw_decay_is_decoupled_and_l2_goes_through_the_moments():
    lr, wd, b1, b2, eps = 1e-2, 0.1, 0.9, 0.999, 1e-8
    rng = np.random.default_rng(0)
    theta = {"w": jnp.asarray(rng.normal(size=(6, 4)), jnp.float32), "b": jnp.asarray(rng.normal(size=4), jnp.float32)}
    grad = {"w": jnp.asarray(rng.normal(size=(6, 4)), jnp.float32), "b": jnp.asarray(rng.normal(size=4), jnp.float32)}
    adamw = optax.adamw(lr, b1=b1, b2=b2, eps=eps, weight_decay=wd)
    adam = optax.adam(lr, b1=b1, b2=b2, eps=eps)
    decoupled, _ = adamw.update(grad, adamw.init(theta), theta)
    plain, _ = adam.update(grad, adam.init(theta), theta)
    # AdamW = the Adam step, then -lr * wd * theta, outside the moments (the explanation's words),
    # on every leaf, biases included: no mask, no choice of leaves (option C is false).
    for k in theta:
        np.testing.assert_allclose(decoupled[k], plain[k] - lr * wd * theta[k], rtol=1e-6, atol=1e-8)
    # Adam + L2 (wd * theta added to the gradient) is another update (option A is false).
    l2_grad = jax.tree.map(lambda g, t: g + wd * t, grad, theta)
    l2, _ = adam.update(l2_grad, adam.init(theta), theta)
    assert max(float(jnp.max(jnp.abs(l2[k] - decoupled[k]))) for k in theta) > 1e-4
    # With L2 the decay is divided by sqrt(v_hat): two equal weights, no gradient now, one with large
    # past gradients (a large v) and one with small ones; L2 decays the first less, AdamW both alike.
    w = jnp.full((2,), 1.0)
    past = optax.ScaleByAdamState(count=jnp.asarray(10, jnp.int32), mu=jnp.zeros(2), nu=jnp.array([100.0, 1e-4]))
    zero = jnp.zeros(2)
    l2_step, _ = adam.update(zero + wd * w, (past, optax.EmptyState()), w)
    aw_step, _ = adamw.update(zero, (past, optax.EmptyState(), optax.EmptyState()), w)
    assert abs(float(l2_step[0])) < abs(float(l2_step[1])) / 10  # large past gradients: decayed far less
    np.testing.assert_allclose(aw_step, -lr * wd * w, rtol=1e-6)  # AdamW: the same decay for both
    # Not a learning rate times (1 - wd) (option D): with no gradient that would not move the weights.
    assert float(jnp.max(jnp.abs(aw_step))) > 0
    # The decay is multiplied by the learning rate: at lr 0 nothing decays (the explanation's last words).
    frozen = optax.adamw(0.0, weight_decay=wd)
    still, _ = frozen.update(grad, frozen.init(theta), theta)
    assert all(float(jnp.max(jnp.abs(still[k]))) == 0.0 for k in theta)
    assert "divided by sqrt(v_hat)" in EXPLANATIONS[14] and "lr * wd * theta_{t-1}" in EXPLANATIONS[14]
    assert options(14)[KEY[14]].startswith("AdamW subtracts lr * wd * theta from the weights outside the moments")


def test_q15_resuming_exactly_needs_parameters_batch_stats_optimizer_with_step_and_rng():
    class Net(nnx.Module):
        def __init__(self, rngs):
            self.l1 = nnx.Linear(5, 8, rngs=rngs)
            self.bn = nnx.BatchNorm(8, momentum=0.9, rngs=rngs)
            self.drop = nnx.Dropout(0.5)
            self.l2 = nnx.Linear(8, 3, rngs=rngs)

        def __call__(self, x, rngs):
            return self.l2(self.drop(nnx.relu(self.bn(self.l1(x))), rngs=rngs))

    schedule = optax.warmup_cosine_decay_schedule(0.0, 1e-2, 10, 50, 1e-3)
    tx = optax.adamw(schedule, weight_decay=1e-2)

    def fresh():
        model = Net(nnx.Rngs(params=0))
        return model, nnx.Optimizer(model, tx, wrt=nnx.Param), nnx.Rngs(dropout=1)

    @nnx.jit
    def step(model, optimizer, rngs, x, y):
        loss, grads = nnx.value_and_grad(lambda m, r: jnp.mean((m(x, r) - y) ** 2))(model, rngs)
        optimizer.update(model, grads)
        return loss

    r = np.random.default_rng(0)
    data = [(jnp.asarray(r.normal(size=(16, 5)), jnp.float32), jnp.asarray(r.normal(size=(16, 3)), jnp.float32))
            for _ in range(6)]
    objects = fresh()
    for x, y in data[:3]:
        step(*objects, x, y)
    copy = lambda tree: jax.tree.map(jnp.copy, tree)  # noqa: E731
    model, optimizer, rngs = objects
    saved = {"params": copy(nnx.state(model, nnx.Param)), "batch_stats": copy(nnx.state(model, nnx.BatchStat)),
             "optimizer": copy(nnx.state(optimizer)), "rngs": copy(nnx.state(rngs))}
    straight = [float(step(*objects, x, y)) for x, y in data[3:]]

    def numbers(objects):  # every leaf of the state on the host, a PRNG key as its key data
        return [np.asarray(jax.random.key_data(a) if jax.dtypes.issubdtype(a.dtype, jax.dtypes.prng_key) else a)
                for a in jax.tree.leaves(nnx.state(objects))]

    straight_state = numbers(objects)

    def resumed(parts):
        model, optimizer, rngs = fresh()
        for part in parts:
            nnx.update({"params": model, "batch_stats": model, "optimizer": optimizer, "rngs": rngs}[part],
                       copy(saved[part]))
        losses = [float(step(model, optimizer, rngs, x, y)) for x, y in data[3:]]
        same = all(np.array_equal(a, b) for a, b in zip(numbers((model, optimizer, rngs)), straight_state))
        return losses == straight and same

    everything = ("params", "batch_stats", "optimizer", "rngs")
    assert resumed(everything)
    for missing in everything:  # leave any one out and the resumed run parts from the straight one
        assert not resumed(tuple(p for p in everything if p != missing)), missing
    assert not resumed(("params",))
    assert not resumed(("params", "optimizer"))
    # The explanation: a fresh optimizer restarts the warmup at a learning rate of 0, with zero moments.
    assert float(schedule(0)) == 0.0
    assert int(fresh()[1].step[...]) == 0
    assert options(15)[KEY[15]].startswith("the parameters, BatchNorm's running statistics, the optimizer state")
