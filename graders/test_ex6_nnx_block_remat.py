"""Grader for Exercise 6: per-block nnx.remat in an NNX Transformer.

Expected outputs and gradients come from the grader's own functional version of the block the
stub gives, applied to the parameters read out of the learner's model: a plain stack in float32
JAX, no checkpointing anywhere. So an edited Block, a skipped or repeated block, or a variant
that initialises differently all show as wrong numbers. Checkpointing itself changes no number:
the technique checks read the gradient's jaxpr (`remat2` equations and their `policy`), and the
memory checks compile the gradient and read `temp_size_in_bytes`, both on the grader's own
split/merge gradient of the learner's model.
"""

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from graders import jaxpr, memory
from graders.learner import fail
from graders.numeric import as_int, assert_close, rng

cp = jax.checkpoint_policies


class Config(NamedTuple):
    layers: int
    batch: int
    length: int
    d_model: int
    heads: int
    d_ff: int

    def text(self) -> str:
        return (f"{self.layers} layers, B={self.batch}, T={self.length}, d_model={self.d_model}, "
                f"heads={self.heads}, d_ff={self.d_ff}")


# Numbers: 3 layers is enough to catch a skipped, repeated or reordered block; every axis has
# its own size (B, T, d_model, heads, d_ff, head size 5) so a transposed axis cannot pass.
NUM = Config(layers=3, batch=2, length=7, d_model=20, heads=4, d_ff=36)
# Memory and jaxprs: 8 layers, every other axis tiny. The saving of per-block remat comes from
# the number of layers, not from the width. Measured on this configuration (XLA CPU, JAX 0.12.0.1):
#   None 110,304 B | "dots" 63,008 B (43% less) | "full" 16,592 B (85% less, as in the chapter)
#   one nnx.remat around the whole stack 111,056 B (1% more) | every other block only 56,144 B (49%)
# With 6 layers "full" saves 80%, with 4 layers 71%; compiling one gradient costs about 1.5 s on
# 4 layers and 2 s on 8, so fewer layers would buy little time and blur the chapter's point.
MEM = Config(layers=8, batch=2, length=9, d_model=12, heads=3, d_ff=10)

VARIANTS = (None, "full", "dots")
# The attributes of the given Block that hold parameters, in a fixed order.
PARAMS = ("ln1.scale", "ln1.bias", "qkv.kernel", "proj.kernel",
          "ln2.scale", "ln2.bias", "fc1.kernel", "fc1.bias", "fc2.kernel", "fc2.bias")
LN_EPS = 1e-6  # nnx.LayerNorm's default epsilon
MEMORY_AGREEMENT = 0.10  # temp_memory_bytes may differ from the grader's figure by 10%


def show(remat) -> str:
    return "None" if remat is None else repr(remat)


# ----- the grader's own block, from parameters -------------------------------------------------

def layer_norm(x, scale, bias):
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / jnp.sqrt(var + LN_EPS) * scale + bias


def block_fn(p: dict, x, heads: int):
    b, t, d = x.shape
    hd = d // heads
    a = layer_norm(x, p["ln1.scale"], p["ln1.bias"])
    q, k, v = (z.reshape(b, t, heads, hd) for z in jnp.split(a @ p["qkv.kernel"], 3, axis=-1))
    s = jnp.einsum("bqhd,bkhd->bhqk", q, k) / np.sqrt(hd)
    s = jnp.where(np.tril(np.ones((t, t), bool)), s, -1e30)
    o = jnp.einsum("bhqk,bkhd->bqhd", jax.nn.softmax(s, axis=-1), v).reshape(b, t, d)
    h = x + o @ p["proj.kernel"]
    m = jax.nn.gelu(layer_norm(h, p["ln2.scale"], p["ln2.bias"]) @ p["fc1.kernel"] + p["fc1.bias"])
    return h + m @ p["fc2.kernel"] + p["fc2.bias"]


def stack_fn(ps: list, x, heads: int):
    for p in ps:
        x = block_fn(p, x, heads)
    return x


def mse(out, y):
    return jnp.mean((out - y) ** 2)


@functools.partial(jax.jit, static_argnums=3)
def stack_out_and_grads(ps, x, y, heads):
    out = stack_fn(ps, x, heads)
    return out, jax.grad(lambda ps: mse(stack_fn(ps, x, heads), y))(ps)


# ----- reading the learner's model -------------------------------------------------------------

def build(sol, cfg: Config, remat, seed: int):
    return sol.Transformer(cfg.layers, cfg.d_model, cfg.heads, cfg.d_ff, remat=remat, rngs=nnx.Rngs(seed))


def data(cfg: Config, seed: int):
    r = rng(seed)
    shape = (cfg.batch, cfg.length, cfg.d_model)
    return (jnp.asarray(r.normal(size=shape), jnp.float32), jnp.asarray(r.normal(size=shape), jnp.float32))


def blocks_of(model, cfg: Config, remat) -> list:
    where = f"Transformer({cfg.layers}, ..., remat={show(remat)})"
    blocks = getattr(model, "blocks", None)
    if blocks is None:
        fail(f"{where} has no attribute `blocks`. Hint: keep the blocks in self.blocks, an nnx.List "
             "of Block in the order they are applied.")
    try:
        blocks = list(blocks)
    except TypeError:
        fail(f"{where}.blocks is a {type(blocks).__name__}, not a sequence of blocks. Hint: use nnx.List([...]).")
    if len(blocks) != cfg.layers:
        fail(f"{where}.blocks holds {len(blocks)} blocks, expected num_layers = {cfg.layers}.")
    return blocks


def read_block(block, label: str) -> dict:
    """The block's parameters by attribute path, as float32 arrays."""
    out = {}
    for path in PARAMS:
        obj = block
        for attr in path.split("."):
            obj = getattr(obj, attr, None)
            if obj is None:
                fail(f"{label} has no `{path}`: the grader reads the parameters of the Block given in "
                     "the stub (ln1, ln2, qkv, proj, fc1, fc2). Hint: keep Block as given.")
        out[path] = jnp.asarray(obj[...], jnp.float32)
    return out


def read_params(model, cfg: Config, remat) -> list:
    return [read_block(b, f"blocks[{i}] of Transformer(remat={show(remat)})")
            for i, b in enumerate(blocks_of(model, cfg, remat))]


def split_grad(model):
    """A pure gradient of the grader's mean squared error w.r.t. the model's nnx.Param state,
    and a function turning a gradient state back into a module (to read it like the model)."""
    graphdef, params, rest = nnx.split(model, nnx.Param, ...)

    def grad_fn(params, x, y):
        return jax.grad(lambda p: mse(nnx.merge(graphdef, p, rest)(x), y))(params)

    return grad_fn, params, lambda grads: nnx.merge(graphdef, grads, rest)


@functools.cache
def learner_numbers(sol, remat) -> list:
    """For two seeds: (seed, params, x, model(x), gradients, expected output, expected gradients).

    The learner's output and gradients come from one jitted split/merge program per variant,
    compiled once (both seeds build the same graph); the expected ones from stack_out_and_grads."""
    rows, program = [], None
    for seed in (11, 12):
        x, y = data(NUM, seed)
        model = build(sol, NUM, remat, seed)
        params = read_params(model, NUM, remat)
        if program is None:
            graphdef, state, rest = nnx.split(model, nnx.Param, ...)

            def out_and_grads(state, x, y):
                def loss(s):
                    out = nnx.merge(graphdef, s, rest)(x)
                    return mse(out, y), out
                (_, out), grads = jax.value_and_grad(loss, has_aux=True)(state)
                return out, grads

            program = jax.jit(out_and_grads)
        else:
            state = nnx.split(model, nnx.Param, ...)[1]
        out, grads = program(state, x, y)
        grads = read_params(nnx.merge(graphdef, grads, rest), NUM, remat)
        expected_out, expected_grads = stack_out_and_grads(params, x, y, NUM.heads)
        rows.append((seed, params, x, out, grads, expected_out, expected_grads))
    return rows


# ----- what the learner's gradient program holds ----------------------------------------------

@functools.cache
def traced_gradient(sol, cfg: Config, remat):
    """jit(grad) of the grader's mean squared error of the learner's model, traced once: its
    jaxpr is read for remat2 equations, and the same trace is lowered for memory_analysis()."""
    model = build(sol, cfg, remat, seed=0)
    blocks_of(model, cfg, remat)
    grad_fn, params, _ = split_grad(model)
    return jax.jit(grad_fn).trace(params, *data(cfg, 0))


def remats_in_gradient(sol, cfg: Config, remat) -> list:
    return jaxpr.find(traced_gradient(sol, cfg, remat).jaxpr, "checkpoint")


def blocks_per_remat(sol, cfg: Config, remat) -> list[float]:
    """For each remat2 in the *forward* program, how many blocks' worth of matmuls it holds."""
    model = build(sol, cfg, remat, seed=0)
    x, _ = data(cfg, 0)
    # Traced through split/merge: NNX refuses to let a trace mutate a module closed over from outside.
    block = nnx.split(blocks_of(model, cfg, remat)[0])
    per_block = jaxpr.count(jaxpr.trace(lambda s, x: nnx.merge(block[0], s)(x), block[1], x), "dot")
    graphdef, state = nnx.split(model)
    forward = jaxpr.trace(lambda s, x: nnx.merge(graphdef, s)(x), state, x)
    return [jaxpr.count_inside(e, "dot") / max(per_block, 1) for e in jaxpr.find(forward, "checkpoint")]


def remat_diagnosis(sol, cfg: Config, remat) -> str:
    """Why the gradient of this variant does not hold one remat2 per block, in words."""
    found = len(remats_in_gradient(sol, cfg, remat))
    per = blocks_per_remat(sol, cfg, remat)
    n = cfg.layers
    if found == 0:
        return (f"no block is checkpointed, so every block's activations are "
                f"kept for the backward pass. Hint: with remat={show(remat)}, call each block through nnx.remat.")
    if per and max(per) >= n - 0.5:
        return ("one nnx.remat wraps the whole stack: the backward pass recomputes the whole forward pass "
                "at once, so the activations of all blocks are live together again and the peak does not "
                "drop. Hint: checkpoint each block separately -- call every block through nnx.remat.")
    if per and max(per) > 1.5:
        return (f"a single remat holds about {max(per):.0f} blocks: those blocks' activations are live "
                "together again in the backward pass. Hint: checkpoint each block separately.")
    if found < n:
        return (f"only {found} of the {n} blocks are checkpointed: the others keep all their activations "
                "for the backward pass. Hint: call every block through nnx.remat.")
    return (f"{found} remat2 equations for {n} blocks: some block is checkpointed more than once (a remat "
            "inside a remat?). Hint: wrap each block's call exactly once.")


def describe_policy(policy) -> str:
    if policy is None:
        return "no policy (save nothing)"
    name = getattr(policy, "__qualname__", None) or repr(policy)
    if name.startswith("save_only_these_names"):
        cells = [c.cell_contents for c in (getattr(policy, "__closure__", None) or ())]
        names = next((sorted(c) for c in cells if isinstance(c, (set, frozenset))), None)
        return f"save_only_these_names({', '.join(map(repr, names))})" if names else name
    return name


def policies(sol, cfg: Config, remat) -> list:
    return [e.params.get("policy") for e in remats_in_gradient(sol, cfg, remat)]


# ----- memory, measured by the grader on the learner's models ----------------------------------

@functools.cache
def measured(sol, remat) -> dict:
    """memory_analysis() of the grader's gradient of the learner's MEM model (compiled once)."""
    stats = traced_gradient(sol, MEM, remat).lower().compile().memory_analysis()
    return {field: int(getattr(stats, field)) for field in
            ("temp_size_in_bytes", "argument_size_in_bytes", "output_size_in_bytes",
             "generated_code_size_in_bytes", "peak_memory_in_bytes") if hasattr(stats, field)}


def temp(sol, remat) -> int:
    return measured(sol, remat)["temp_size_in_bytes"]


def kib(n: float) -> str:
    return f"{n / 1024:.1f} KiB"


def figures(values: dict) -> str:
    """remat=None: 107.7 KiB | remat='dots': 61.5 KiB (43% less) | remat='full': ..."""
    def change(r):
        saved = 1 - values[r] / values[None] if values[None] else 0.0
        return "" if r is None else f" ({saved:.0%} less)" if saved >= 0 else f" ({-saved:.0%} more)"
    return " | ".join(f"remat={show(r)}: {kib(values[r])}{change(r)}" for r in (None, "dots", "full"))


def structure_problem(sol, remat) -> str:
    """'' when the gradient of this variant holds one remat2 per block, else why not."""
    found = len(remats_in_gradient(sol, MEM, remat))
    if remat is None:
        return (f"remat=None is checkpointed too ({found} remat2 equations), so there is no plain baseline. "
                "Hint: call the blocks plainly when remat is None." if found else "")
    if found != MEM.layers or max(blocks_per_remat(sol, MEM, remat), default=0) > 1.5:
        return f"In the gradient of remat={show(remat)}, {remat_diagnosis(sol, MEM, remat)}"
    return ""


def policy_problem(sol, remat) -> str:
    """'' when every remat2 of this variant carries the right policy, else what it carries."""
    for policy in policies(sol, MEM, remat):
        if remat == "full" and policy is not None and policy is not cp.nothing_saveable:
            return (f"remat='full' carries the policy {describe_policy(policy)}, which keeps values that "
                    "full rematerialisation would recompute. Hint: nnx.remat without a policy.")
        if remat == "dots" and policy is not cp.dots_saveable:
            return (f"remat='dots' carries {describe_policy(policy)}, which keeps no matmul result. "
                    "Hint: policy=jax.checkpoint_policies.dots_saveable.")
    return ""


def memory_diagnosis(sol) -> str:
    """The first reason, read from the gradients' jaxprs, why the memory figures are off."""
    for problem in (structure_problem(sol, None), structure_problem(sol, "full"), structure_problem(sol, "dots"),
                    policy_problem(sol, "full"), policy_problem(sol, "dots")):
        if problem:
            return problem
    return ("Hint: call every block through its own nnx.remat; look at the remat2 equations in "
            "jax.make_jaxpr of the gradient.")


# ----- the checks --------------------------------------------------------------------------------

@pytest.mark.points(1)
def test_blocks_compute_the_given_block(sol):
    """Each block of Transformer(remat=None) computes the Block given in the stub."""
    model = build(sol, NUM, None, seed=5)
    x, _ = data(NUM, 5)
    blocks = blocks_of(model, NUM, None)
    graphdef = nnx.split(blocks[0])[0]
    # Jitted, so each side compiles once instead of op by op.
    learner_block = jax.jit(lambda state, x: nnx.merge(graphdef, state)(x))
    grader_block = jax.jit(block_fn, static_argnums=2)
    for i, block in enumerate(blocks):
        expected = grader_block(read_block(block, f"blocks[{i}]"), x, NUM.heads)
        assert_close(learner_block(nnx.split(block)[1], x), expected, f"blocks[{i}](x) of Transformer(remat=None)",
                     "Hint: Block is given and shared with the grader; keep it as in the stub.")


@pytest.mark.points(1)
def test_variants_share_parameters(sol):
    """Built from the same nnx.Rngs, None, "full" and "dots" hold the same parameters (another seed, others)."""
    seed = 3
    params = {r: read_params(build(sol, NUM, r, seed), NUM, r) for r in VARIANTS}
    other = read_params(build(sol, NUM, None, seed + 1), NUM, None)
    if all(np.array_equal(a[p], b[p]) for a, b in zip(other, params[None]) for p in PARAMS):
        fail(f"Transformer(remat=None) holds the same parameters whether built from nnx.Rngs({seed}) or "
             f"nnx.Rngs({seed + 1}): the rngs argument is not used. Hint: pass rngs=rngs to every Block.")
    for r in ("full", "dots"):
        for i, (mine, base) in enumerate(zip(params[r], params[None])):
            for path in PARAMS:
                if mine[path].shape != base[path].shape or not np.array_equal(mine[path], base[path]):
                    fail(f"built from nnx.Rngs({seed}), remat={show(r)} and remat=None hold different "
                         f"parameters (first difference: blocks[{i}].{path}). Hint: create the blocks the "
                         "same way whatever `remat` is; remat only changes how each block is called.")


@pytest.mark.points(2)
def test_outputs_match_a_plain_stack(sol):
    """model(x) equals the grader's plain stack of the model's blocks, for every variant."""
    for r in VARIANTS:
        for seed, params, x, out, _, expected_out, _ in learner_numbers(sol, r):
            assert_close(out, expected_out, f"Transformer(remat={show(r)})(x) built from nnx.Rngs({seed})",
                         "Hint: apply every block of self.blocks once, in order, to the running x; "
                         "checkpointing must not change the output.")


@pytest.mark.points(2)
def test_gradients_match_a_plain_stack(sol):
    """Gradients w.r.t. every nnx.Param equal the plain stack's, for every variant."""
    for r in VARIANTS:
        for seed, params, x, _, grads, _, expected_grads in learner_numbers(sol, r):
            for i, (g, e) in enumerate(zip(grads, expected_grads)):
                for path in PARAMS:
                    assert_close(g[path], e[path],
                                 f"gradient of blocks[{i}].{path} for remat={show(r)} (nnx.Rngs({seed}))",
                                 "Hint: checkpointing must not change any gradient; call each block "
                                 "once, in order, and keep Block as given.")


@pytest.mark.points(1)
def test_none_is_not_checkpointed(sol):
    """The gradient of remat=None holds no remat2 equation."""
    found = len(remats_in_gradient(sol, MEM, None))
    if found:
        fail(f"the gradient of Transformer({MEM.layers}, ..., remat=None) holds {found} remat2 equation(s): "
             "remat=None should call the blocks plainly (it is the baseline the memory is compared with). "
             "Hint: use nnx.remat only when remat is 'full' or 'dots'.")


@pytest.mark.points(3)
def test_each_block_is_checkpointed_separately(sol):
    """The gradients of "full" and "dots" hold exactly num_layers remat2 equations, one per block."""
    for r in ("full", "dots"):
        found = len(remats_in_gradient(sol, MEM, r))
        if found != MEM.layers or max(blocks_per_remat(sol, MEM, r), default=0) > 1.5:
            fail(f"the gradient of Transformer({MEM.layers}, ..., remat={show(r)}) holds {found} remat2 "
                 f"equation(s), expected {MEM.layers} (one per block): {remat_diagnosis(sol, MEM, r)}")


@pytest.mark.points(1)
def test_full_saves_nothing(sol):
    """The remat2 equations of "full" carry no policy (or nothing_saveable)."""
    found = policies(sol, MEM, "full")
    if not found:
        fail("the gradient of remat='full' holds no remat2 equation, so nothing is recomputed. "
             "Hint: call each block through nnx.remat.")
    for policy in found:
        if policy is not None and policy is not cp.nothing_saveable:
            fail(f"remat='full' is checkpointed with the policy {describe_policy(policy)}; full "
                 "rematerialisation saves only each block's input and recomputes the rest. "
                 "Hint: nnx.remat without a policy (or policy=jax.checkpoint_policies.nothing_saveable).")


@pytest.mark.points(2)
def test_dots_uses_dots_saveable(sol):
    """The remat2 equations of "dots" carry the policy jax.checkpoint_policies.dots_saveable."""
    found = policies(sol, MEM, "dots")
    if not found:
        fail("the gradient of remat='dots' holds no remat2 equation, so there is no policy to apply. "
             "Hint: call each block through nnx.remat with a policy.")
    for policy in found:
        if policy is cp.dots_saveable:
            continue
        text = describe_policy(policy)
        if text.startswith("save_only_these_names"):
            fail(f"remat='dots' is checkpointed with {text}: the names this policy keeps are tags set "
                 "with jax.ad_checkpoint.checkpoint_name(value, name), not primitive names. Nothing in the "
                 "block is tagged 'dot_general', so nothing is saved and 'dots' silently behaves like "
                 "'full' (seed 004's bug). Hint: the policy that keeps every matmul result is "
                 "jax.checkpoint_policies.dots_saveable.")
        if policy is None or policy is cp.nothing_saveable:
            fail(f"remat='dots' is checkpointed with {text}: that is full rematerialisation, the same "
                 "as 'full'. Hint: pass policy=jax.checkpoint_policies.dots_saveable to nnx.remat.")
        fail(f"remat='dots' is checkpointed with the policy {text}, expected dots_saveable (keep every "
             "matmul result, recompute the rest). Hint: policy=jax.checkpoint_policies.dots_saveable.")


@pytest.mark.points(2)
def test_full_remat_halves_temp_memory(sol, note):
    """On 8 layers, "full" needs at most half the temporary memory of None (the grader measures)."""
    values = {r: temp(sol, r) for r in (None, "dots", "full")}
    note(f"temp memory of the gradient, measured by the grader ({MEM.text()}): {figures(values)}")
    if values["full"] > 0.5 * values[None]:
        saved = 1 - values["full"] / values[None]
        fail(f"remat='full' needs {kib(values['full'])} of temporary memory, remat=None {kib(values[None])}: "
             f"{saved:.0%} saved, expected at least 50% on {MEM.layers} layers. {memory_diagnosis(sol)}")


@pytest.mark.points(1)
def test_dots_memory_lies_between(sol):
    """On 8 layers, "dots" needs less temporary memory than None and more than "full"."""
    values = {r: temp(sol, r) for r in (None, "dots", "full")}
    if not values["full"] < values["dots"] < values[None]:
        fail(f"expected full < dots < None; the grader measures {figures(values)}. {memory_diagnosis(sol)}")


@pytest.mark.points(2)
def test_temp_memory_bytes_agrees_with_grader(sol, note):
    """temp_memory_bytes(model, x, y) gives the grader's figure for None, "dots" and "full"."""
    x, y = data(MEM, 0)
    got = {}
    for r in (None, "dots", "full"):
        got[r] = as_int(sol.temp_memory_bytes(build(sol, MEM, r, seed=0), x, y),
                        f"temp_memory_bytes for remat={show(r)}",
                        "Hint: return int(compiled.memory_analysis().temp_size_in_bytes), a number of bytes.")
    note(f"your temp_memory_bytes: {figures(got) if got[None] else got}")
    for r in (None, "dots", "full"):
        stats = measured(sol, r)
        expected = stats["temp_size_in_bytes"]
        if abs(got[r] - expected) <= MEMORY_AGREEMENT * expected:
            continue
        where = (f"temp_memory_bytes for remat={show(r)} returned {got[r]:,} bytes; the grader measures "
                 f"{expected:,} bytes of temporary memory for the gradient of mse_loss")
        for field, value in stats.items():
            if field != "temp_size_in_bytes" and value == got[r]:
                fail(f"{where}. {got[r]:,} is the program's {field}. Hint: read temp_size_in_bytes.")
        model = build(sol, MEM, r, seed=0)
        graphdef, params, rest = nnx.split(model, nnx.Param, ...)
        forward = memory.temp_bytes(lambda p, x, y: mse(nnx.merge(graphdef, p, rest)(x), y), params, x, y)
        if abs(got[r] - forward) <= MEMORY_AGREEMENT * forward:
            fail(f"{where}. {got[r]:,} bytes is what the forward pass alone needs: checkpointing only pays "
                 "off in the gradient. Hint: compile jax.grad of the loss w.r.t. the nnx.Param state.")
        fail(f"{where}. Hint: nnx.split(model, nnx.Param, ...), a pure function returning jax.grad of "
             "mse_loss(nnx.merge(...), x, y), then jax.jit(f).lower(...).compile().memory_analysis().")
