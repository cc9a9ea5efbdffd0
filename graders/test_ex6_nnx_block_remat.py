"""Grader for Exercise 6: per-block nnx.remat in an NNX Transformer.

Expected outputs and gradients come from the grader's own functional version of the block the
stub gives, applied to the parameters read out of the learner's model: a plain stack in float32
JAX, no checkpointing anywhere. So an edited Block, a skipped or repeated block, or a variant
that initialises differently all show as wrong numbers. Checkpointing itself changes no number:
the technique checks read the jaxprs (which checkpoints reach the loss, what each holds, their
`policy`), and the memory checks compare `temp_size_in_bytes` with the grader's own per-block
checkpointed gradient of the same parameters.

Speed: each variant of the learner's model is traced and compiled once (outputs, gradients and
memory all come from that one program), and the variants, the grader's own programs and the
learner's temp_memory_bytes compile concurrently (XLA compilation releases the GIL).
"""

import functools
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from graders import jaxpr, memory
from graders.learner import fail
from graders.numeric import as_int, assert_close, is_close

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


def _configs() -> tuple[Config, ...]:
    """Every configuration the grader may draw: tiny widths, since the saving of per-block remat
    comes from the number of layers; 5 to 7 layers, where "full" already saves most of the
    memory and "dots" clearly lies between; every axis (and the head size) a distinct size, so a
    transposed axis cannot pass."""
    out = []
    for layers in (5, 6, 7):
        for batch in (2, 3):
            for length in (7, 9, 11):
                for heads, head in ((2, 5), (3, 4), (2, 6)):
                    for d_ff in (10, 14):
                        sizes = (layers, batch, length, heads, head, heads * head, d_ff)
                        if len(set(sizes)) == len(sizes):
                            out.append(Config(layers, batch, length, heads * head, heads, d_ff))
    return tuple(out)


CONFIGS = _configs()
VARIANTS = (None, "full", "dots")
MODEL_SEEDS = (11, 12)  # nnx.Rngs seeds of the two models whose numbers are checked
# The attributes of the given Block that hold parameters, in a fixed order.
PARAMS = ("ln1.scale", "ln1.bias", "qkv.kernel", "proj.kernel",
          "ln2.scale", "ln2.bias", "fc1.kernel", "fc1.bias", "fc2.kernel", "fc2.bias")
LN_EPS = 1e-6  # nnx.LayerNorm's default epsilon
MEMORY_AGREEMENT = 0.10  # temp_memory_bytes may differ from the grader's figure by 10%
# The learner's checkpointed gradient goes through nnx.split/merge, the grader's own is a plain
# function of the same parameters; XLA plans both within a few percent of each other, while a
# checkpoint around only half of each block needs nearly twice the memory or more.
OWN_MARGIN = 0.15
# What a Transformer block is made of, by the primitives that only its forward pass binds.
MARKERS = {"dot_general": "matmuls", "rsqrt": "LayerNorm normalisations",
           "exp": "softmax exponentials", "tanh": "GELU tanh"}


def show(remat) -> str:
    return "None" if remat is None else repr(remat)


def config(seed: int) -> Config:
    """The configuration of this grading run, drawn from the grading seed (so no figure can be
    looked up); the report prints the seed and --seed reproduces it."""
    return CONFIGS[int(np.random.default_rng(seed).integers(len(CONFIGS)))]


# ----- the grader's own block, from parameters -------------------------------------------------

def layer_norm(x, scale, bias):
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) * jax.lax.rsqrt(var + LN_EPS) * scale + bias


def attention_half(p: dict, x, heads: int):
    b, t, d = x.shape
    hd = d // heads
    a = layer_norm(x, p["ln1.scale"], p["ln1.bias"])
    q, k, v = (z.reshape(b, t, heads, hd) for z in jnp.split(a @ p["qkv.kernel"], 3, axis=-1))
    s = jnp.einsum("bqhd,bkhd->bhqk", q, k) / np.sqrt(hd)
    s = jnp.where(np.tril(np.ones((t, t), bool)), s, -1e30)
    o = jnp.einsum("bhqk,bkhd->bqhd", jax.nn.softmax(s, axis=-1), v).reshape(b, t, d)
    return x + o @ p["proj.kernel"]


def mlp_half(p: dict, h):
    m = jax.nn.gelu(layer_norm(h, p["ln2.scale"], p["ln2.bias"]) @ p["fc1.kernel"] + p["fc1.bias"])
    return h + m @ p["fc2.kernel"] + p["fc2.bias"]


def block_fn(p: dict, x, heads: int):
    return mlp_half(p, attention_half(p, x, heads))


def stack_fn(ps: list, x, heads: int, policy=None, remat=False):
    block = jax.checkpoint(block_fn, policy=policy, static_argnums=2) if remat else block_fn
    for p in ps:
        x = block(p, x, heads)
    return x


def mse(out, y):
    return jnp.mean((out - y) ** 2)


@functools.partial(jax.jit, static_argnums=3)
def stack_out_and_grads(ps, x, y, heads):
    out = stack_fn(ps, x, heads)
    return out, jax.grad(lambda ps: mse(stack_fn(ps, x, heads), y))(ps)


def own_checkpointed_gradient(policy):
    """The grader's own per-block checkpointed gradient (one jax.checkpoint per block)."""
    def grad_fn(ps, x, y, heads):
        return jax.grad(lambda ps: mse(stack_fn(ps, x, heads, policy, remat=True), y))(ps)
    return jax.jit(grad_fn, static_argnums=3)


def markers(eqns) -> Counter:
    return Counter(e.primitive.name for e in eqns if e.primitive.name in MARKERS)


@functools.cache
def own_signatures(cfg: Config) -> dict:
    """name -> what the grader's own block (and each of its halves) binds, by MARKERS."""
    p, x = abstract_block_args(cfg)
    trace = lambda f: markers(jaxpr.walk(jaxpr.trace(f, p, x)))  # noqa: E731
    return {"one whole block": trace(lambda p, x: block_fn(p, x, cfg.heads)),
            "only the attention half, x + attn(ln1(x))": trace(lambda p, x: attention_half(p, x, cfg.heads)),
            "only the MLP half, h + fc2(gelu(fc1(ln2(h))))": trace(mlp_half)}


def abstract_block_args(cfg: Config):
    """One block's parameters and input as shapes only: tracing them runs nothing."""
    return ({k: jax.ShapeDtypeStruct(s, jnp.float32) for k, s in param_shapes(cfg).items()},
            jax.ShapeDtypeStruct((cfg.batch, cfg.length, cfg.d_model), jnp.float32))


def param_shapes(cfg: Config) -> dict:
    d, f = cfg.d_model, cfg.d_ff
    return {"ln1.scale": (d,), "ln1.bias": (d,), "qkv.kernel": (d, 3 * d), "proj.kernel": (d, d),
            "ln2.scale": (d,), "ln2.bias": (d,), "fc1.kernel": (d, f), "fc1.bias": (f,),
            "fc2.kernel": (f, d), "fc2.bias": (d,)}


def what_policy_saves(policy, cfg: Config) -> tuple[int, int, int, int]:
    """(matmul results kept, matmuls, other values kept, other values) when the policy is asked,
    as JAX asks it, about every equation of the grader's own block."""
    p, x = abstract_block_args(cfg)
    dots = dots_kept = others = others_kept = 0
    for e in jaxpr.walk(jaxpr.trace(lambda p, x: block_fn(p, x, cfg.heads), p, x)):
        if any(True for _ in jaxpr.sub_jaxprs(e)):
            continue
        answer = policy(e.primitive, *[v.aval for v in e.invars], **e.params)
        kept = answer if isinstance(answer, bool) else type(answer).__name__ in ("SaveableType", "Offloadable")
        if e.primitive.name == "dot_general":
            dots, dots_kept = dots + 1, dots_kept + bool(kept)
        else:
            others, others_kept = others + 1, others_kept + bool(kept)
    return dots_kept, dots, others_kept, others


def describe_policy(policy, cfg: Config) -> str:
    """The policy's name and what it really keeps of a block (asked, not assumed)."""
    if policy is None:
        return "no policy (it keeps only each block's input)"
    known = {}
    for attr, value in vars(cp).items():
        known.setdefault(id(value), attr)
    qualname = getattr(policy, "__qualname__", None) or repr(policy)
    name = known.get(id(policy)) or (qualname.split(".<locals>")[0] + "(...)" if ".<locals>" in qualname
                                     else f"a policy of your own, {qualname}")
    if qualname.startswith("save_only_these_names"):
        cells = [c.cell_contents for c in (getattr(policy, "__closure__", None) or ())]
        names = next((sorted(c) for c in cells if isinstance(c, (set, frozenset))), None)
        name = f"save_only_these_names({', '.join(map(repr, names))})" if names else name
    dk, d, ok, o = what_policy_saves(policy, cfg)
    if dk == 0 and ok == 0:
        kept = "it keeps none of a block's values, so everything is recomputed"
    elif dk == d and ok == o:
        kept = "it keeps every value of a block, so nothing is recomputed and no memory is saved"
    else:
        kept = f"it keeps {dk} of a block's {d} matmul results and {ok} of its {o} other values"
    return f"{name} ({kept})"


# ----- reading the learner's model -------------------------------------------------------------

def build(sol, cfg: Config, remat, seed: int):
    return sol.Transformer(cfg.layers, cfg.d_model, cfg.heads, cfg.d_ff, remat=remat, rngs=nnx.Rngs(seed))


def data(cfg: Config, grading_seed: int, k: int):
    r = np.random.default_rng((grading_seed, k))
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


class Traced(NamedTuple):
    models: tuple        # built from nnx.Rngs(s) for s in MODEL_SEEDS
    graphdef: object
    rest: object
    forward: object      # jaxpr of model(x)
    gradient: object     # jaxpr of (model(x), gradients w.r.t. the nnx.Param state)
    lowered: object


@functools.cache
def traced(sol, cfg: Config, remat) -> Traced:
    """The learner's variant traced once: its forward jaxpr (what each checkpoint holds), and one
    program returning the output and the gradient of the grader's mean squared error, whose jaxpr
    is read, and which is compiled once for both the numbers and memory_analysis()."""
    models = tuple(build(sol, cfg, remat, s) for s in MODEL_SEEDS)
    for m in models:
        blocks_of(m, cfg, remat)
    x, y = data(cfg, 0, 0)
    graphdef, state, rest = nnx.split(models[0], nnx.Param, ...)

    def out_and_grads(state, x, y):
        def loss(s):
            out = nnx.merge(graphdef, s, rest)(x)
            return mse(out, y), out
        (_, out), grads = jax.value_and_grad(loss, has_aux=True)(state)
        return out, grads

    # Traced through split/merge: NNX refuses to let a trace mutate a module closed over from outside.
    forward = jaxpr.trace(lambda s, x: nnx.merge(graphdef, s, rest)(x), state, x)
    program = jax.jit(out_and_grads).trace(state, x, y)
    return Traced(models, graphdef, rest, forward, program.jaxpr, program.lower())


# The learner's programs miss the compilation cache after every edit. LLVM's optimisation level
# changes neither a number beyond rounding nor XLA's buffer plan (temp_size_in_bytes is decided
# before code generation), and level 0 compiles these programs about a third faster.
LEARNER_COMPILE = {"xla_backend_optimization_level": 0}


@functools.cache
def _compiled_all(sol, cfg: Config) -> dict:
    """Compile every variant that traces, the grader's own programs, and start the learner's
    temp_memory_bytes, all at once: XLA compiles in threads that release the GIL."""
    jobs = {}
    for r in VARIANTS:
        try:
            jobs[("learner", r)] = functools.partial(traced(sol, cfg, r).lowered.compile, LEARNER_COMPILE)
        except Exception:  # reported by the checks that need this variant
            pass
    block, act = abstract_block_args(cfg)
    shapes = [block] * cfg.layers
    for r, policy in (("full", None), ("dots", cp.dots_saveable)):
        jobs[("own", r)] = own_checkpointed_gradient(policy).lower(shapes, act, act, cfg.heads).compile
    jobs[("expected", None)] = stack_out_and_grads.lower(shapes, act, act, cfg.heads).compile
    pool = ThreadPoolExecutor(max_workers=len(jobs) + 1)
    futures = {key: pool.submit(job) for key, job in jobs.items()}
    futures[("temp_memory_bytes", None)] = pool.submit(_learner_temp_memory, sol, cfg)
    pool.shutdown(wait=False)
    return futures


def _learner_temp_memory(sol, cfg: Config) -> dict:
    x, y = data(cfg, 0, 0)
    return {r: sol.temp_memory_bytes(build(sol, cfg, r, seed=0), x, y) for r in (None, "dots", "full")}


def compiled(sol, cfg: Config, kind: str, remat):
    futures = _compiled_all(sol, cfg)
    if (kind, remat) not in futures:
        traced(sol, cfg, remat)  # raises the learner's error again, in this check
    return futures[(kind, remat)].result()


@functools.cache
def numbers(sol, cfg: Config, grading_seed: int, remat) -> list:
    """For each model seed: (seed, params, model(x), gradients, expected output, expected gradients)."""
    t = traced(sol, cfg, remat)
    program = compiled(sol, cfg, "learner", remat)
    expected_program = compiled(sol, cfg, "expected", None)
    rows = []
    for k, (seed, model) in enumerate(zip(MODEL_SEEDS, t.models)):
        x, y = data(cfg, grading_seed, k + 1)
        params = read_params(model, cfg, remat)
        out, grads = program(nnx.split(model, nnx.Param, ...)[1], x, y)
        grads = read_params(nnx.merge(t.graphdef, grads, t.rest), cfg, remat)
        expected_out, expected_grads = expected_program(params, x, y)
        rows.append((seed, params, out, grads, expected_out, expected_grads))
    return rows


# ----- what the learner's programs hold -------------------------------------------------------

class Structure(NamedTuple):
    live: int            # working checkpoints: reaching the output in the forward pass, and a
                         # gradient in the gradient (a stop_gradient'ed or zeroed one does neither)
    policies: list       # the policy of each checkpoint that reaches a gradient
    dead: int            # checkpoints in the forward pass whose result never reaches the output
    holds: list          # for each live checkpoint of the forward pass: its MARKERS counts
    outside: Counter     # MARKERS counts of live forward work outside every checkpoint


@functools.cache
def structure(sol, cfg: Config, remat) -> Structure:
    t = traced(sol, cfg, remat)
    # The program returns (model(x), gradients): only work that reaches a gradient counts.
    used = [False] + [True] * (len(t.gradient.jaxpr.outvars) - 1)
    live_grad = jaxpr.live_equations(t.gradient, used)
    working = [e for e in jaxpr.find(t.gradient, "checkpoint") if id(e) in live_grad]
    live_fwd = jaxpr.live_equations(t.forward)
    holds, dead, outside = [], 0, Counter()
    for e, outer in jaxpr.walk_nested(t.forward):
        if any(jaxpr.is_a(o, "checkpoint") for o in outer):
            continue
        if jaxpr.is_a(e, "checkpoint"):
            if id(e) in live_fwd:
                holds.append(markers(jaxpr.inside(e)))
            else:
                dead += 1
        elif id(e) in live_fwd and not any(True for _ in jaxpr.sub_jaxprs(e)):
            outside.update(markers([e]))
    return Structure(min(len(working), len(holds)), [e.params.get("policy") for e in working], dead, holds, outside)


def counts_text(c: Counter) -> str:
    return ", ".join(f"{c[k]} {MARKERS[k]}" for k in MARKERS)


def what_it_holds(c: Counter, cfg: Config) -> str:
    sigs = own_signatures(cfg)
    for name, sig in sigs.items():
        if c == sig:
            return name
    if not c:
        return "no matmul or normalisation at all (a checkpoint around a no-op)"
    block = sigs["one whole block"]
    k = c["dot_general"] / block["dot_general"]
    if c == Counter({m: round(k) * n for m, n in block.items()}) and k > 1:
        return f"{round(k)} whole blocks"
    return f"{counts_text(c)} (one block binds {counts_text(block)})"


def count_problem(sol, cfg: Config, remat) -> str:
    """'' when the gradient holds one working checkpoint per block, else why not."""
    s = structure(sol, cfg, remat)
    n = cfg.layers
    if s.live == n:
        return ""
    if s.live == 0 and (s.dead or s.holds):
        return ("its checkpoints do no work: their result never reaches the loss or its gradient (it is "
                "discarded, multiplied by zero, or behind stop_gradient), and the blocks run plainly beside "
                "them. Hint: use the checkpointed call's result as the block's output.")
    if s.live == 0:
        return (f"no block is checkpointed, so every block's activations are kept for the backward pass. "
                f"Hint: with remat={show(remat)}, call each block through nnx.remat.")
    block_dots = own_signatures(cfg)["one whole block"]["dot_general"]
    if s.holds and max(h["dot_general"] for h in s.holds) >= (n - 0.5) * block_dots:
        return ("one nnx.remat wraps the whole stack: the backward pass recomputes the whole forward pass "
                "at once, so the activations of all blocks are live together again and the peak does not "
                "drop. Hint: checkpoint each block separately -- call every block through nnx.remat.")
    if any(not held for held in s.holds):
        return ("some checkpoints hold no matmul or normalisation at all (a checkpoint around a no-op), and "
                "the blocks run outside them. Hint: checkpoint a function that runs the whole block.")
    if s.live < n:
        return (f"only {s.live} of the {n} blocks are checkpointed: the others keep all their activations "
                "for the backward pass. Hint: call every block through nnx.remat.")
    return (f"{s.live} checkpoints for {n} blocks: some block is checkpointed more than once (a remat "
            "inside a remat, or a block called twice?). Hint: wrap each block's call exactly once.")


def content_problem(sol, cfg: Config, remat) -> str:
    """'' when each checkpoint holds exactly one whole block and no block work runs outside."""
    s = structure(sol, cfg, remat)
    sigs = own_signatures(cfg)
    for i, held in enumerate(s.holds):
        if held != sigs["one whole block"]:
            what = what_it_holds(held, cfg)
            hint = ("Hint: checkpoint a function that runs the whole block, both residual halves: "
                    "nnx.remat(lambda block, x: block(x)).")
            if what.startswith("only the"):
                return (f"checkpoint {i} of remat={show(remat)} holds {what}; the rest of the block runs outside "
                        f"it and keeps its activations for the backward pass. {hint}")
            return f"checkpoint {i} of remat={show(remat)} holds {what}, not one whole block. {hint}"
    if sum(s.outside.values()):
        return (f"with remat={show(remat)}, {counts_text(s.outside)} run outside every checkpoint, so their "
                "activations are kept for the backward pass. Hint: the whole of every block must run inside "
                "its own nnx.remat.")
    if not s.holds:
        return f"remat={show(remat)} has no checkpoint whose result reaches the output."
    return ""


def policies(sol, cfg: Config, remat) -> list:
    return structure(sol, cfg, remat).policies


def policy_problem(sol, cfg: Config, remat) -> str:
    """'' when every working checkpoint of this variant carries the right policy, else what it carries."""
    for policy in policies(sol, cfg, remat):
        if remat == "full" and policy is not None and policy is not cp.nothing_saveable:
            return (f"remat='full' carries the policy {describe_policy(policy, cfg)}; full rematerialisation "
                    "keeps only each block's input. Hint: nnx.remat without a policy (or "
                    "policy=jax.checkpoint_policies.nothing_saveable).")
        if remat == "dots" and policy is not cp.dots_saveable:
            return (f"remat='dots' carries the policy {describe_policy(policy, cfg)}; dots_saveable keeps "
                    "every matmul result and nothing else. Hint: policy=jax.checkpoint_policies.dots_saveable.")
    return ""


# ----- memory, measured by the grader ----------------------------------------------------------

def measured(sol, cfg: Config, remat) -> dict:
    """memory_analysis() of the learner's program for this variant (the one compiled for the numbers)."""
    stats = compiled(sol, cfg, "learner", remat).memory_analysis()
    return {field: int(getattr(stats, field)) for field in
            ("temp_size_in_bytes", "argument_size_in_bytes", "output_size_in_bytes",
             "generated_code_size_in_bytes", "peak_memory_in_bytes") if hasattr(stats, field)}


def temp(sol, cfg: Config, remat) -> int:
    return measured(sol, cfg, remat)["temp_size_in_bytes"]


def own_temp(sol, cfg: Config, remat) -> int:
    return int(compiled(sol, cfg, "own", remat).memory_analysis().temp_size_in_bytes)


def kib(n: float) -> str:
    return f"{n / 1024:.1f} KiB"


def figures(values: dict) -> str:
    """remat=None: ... KiB | remat='dots': ... KiB (..% less) | remat='full': ..."""
    def change(r):
        saved = 1 - values[r] / values[None] if values[None] else 0.0
        return "" if r is None else f" ({saved:.0%} less)" if saved >= 0 else f" ({-saved:.0%} more)"
    return " | ".join(f"remat={show(r)}: {kib(values[r])}{change(r)}" for r in (None, "dots", "full"))


def memory_diagnosis(sol, cfg: Config) -> str:
    """The first reason, read from the jaxprs, why the memory figures are off."""
    found = structure(sol, cfg, None).live
    if found:
        return (f"remat=None is checkpointed too ({found} checkpoints), so there is no plain baseline. "
                "Hint: call the blocks plainly when remat is None.")
    for r in ("full", "dots"):
        problem = count_problem(sol, cfg, r)
        if problem:
            return f"In remat={show(r)}, {problem}"
        problem = content_problem(sol, cfg, r)
        if problem:
            return problem[0].upper() + problem[1:]
    for r in ("full", "dots"):
        problem = policy_problem(sol, cfg, r)
        if problem:
            return problem
    return ("Hint: call every block through its own nnx.remat; look at the remat2 equations in "
            "jax.make_jaxpr of the gradient.")


def require_one_whole_block_per_checkpoint(sol, cfg: Config, remat) -> None:
    """A policy earns points only on checkpoints that do the work: one per block, each holding
    the whole block (so a policy on a decoy checkpoint around a no-op earns nothing)."""
    problem = count_problem(sol, cfg, remat)
    if problem:
        fail(f"the policy of remat={show(remat)} is read from working checkpoints, one per block, and "
             f"there are not {cfg.layers} of them: {problem}")
    problem = content_problem(sol, cfg, remat)
    if problem:
        fail(f"the policy of remat={show(remat)} is read from checkpoints that each hold one whole block: {problem}")


# ----- the checks --------------------------------------------------------------------------------

@pytest.mark.points(1)
def test_blocks_compute_the_given_block(sol, seed):
    """Each block of Transformer(remat=None) computes the Block given in the stub."""
    cfg = config(seed)
    rows = numbers(sol, cfg, seed, None)
    # A stack of distinct random blocks whose output and every gradient match the grader's on two
    # models is made of the given block; only otherwise is a single block compiled, to say which.
    if all(is_close(out, e_out) and all(is_close(g[p], e[p]) for g, e in zip(grads, e_grads) for p in PARAMS)
           for _, _, out, grads, e_out, e_grads in rows):
        return
    model = traced(sol, cfg, None).models[0]
    x, _ = data(cfg, seed, 1)
    blocks = blocks_of(model, cfg, None)
    graphdef = nnx.split(blocks[0])[0]
    learner_block = jax.jit(lambda state, x: nnx.merge(graphdef, state)(x))
    grader_block = jax.jit(block_fn, static_argnums=2)
    for i, block in enumerate(blocks):
        expected = grader_block(read_block(block, f"blocks[{i}]"), x, cfg.heads)
        assert_close(learner_block(nnx.split(block)[1], x), expected, f"blocks[{i}](x) of Transformer(remat=None)",
                     "Hint: Block is given and shared with the grader; keep it as in the stub.")


@pytest.mark.points(1)
def test_variants_share_parameters(sol, seed):
    """Built from the same nnx.Rngs, None, "full" and "dots" hold the same parameters (another seed, others)."""
    cfg = config(seed)
    first, second = MODEL_SEEDS
    params = {r: read_params(traced(sol, cfg, r).models[0], cfg, r) for r in VARIANTS}
    other = read_params(traced(sol, cfg, None).models[1], cfg, None)
    if all(np.array_equal(a[p], b[p]) for a, b in zip(other, params[None]) for p in PARAMS):
        fail(f"Transformer(remat=None) holds the same parameters whether built from nnx.Rngs({first}) or "
             f"nnx.Rngs({second}): the rngs argument is not used. Hint: pass rngs=rngs to every Block.")
    for r in ("full", "dots"):
        for i, (mine, base) in enumerate(zip(params[r], params[None])):
            for path in PARAMS:
                if mine[path].shape != base[path].shape or not np.array_equal(mine[path], base[path]):
                    fail(f"built from nnx.Rngs({first}), remat={show(r)} and remat=None hold different "
                         f"parameters (first difference: blocks[{i}].{path}). Hint: create the blocks the "
                         "same way whatever `remat` is; remat only changes how each block is called.")


@pytest.mark.points(2)
def test_outputs_match_a_plain_stack(sol, seed):
    """model(x) equals the grader's plain stack of the model's blocks, for every variant."""
    cfg = config(seed)
    for r in VARIANTS:
        for model_seed, _, out, _, expected_out, _ in numbers(sol, cfg, seed, r):
            assert_close(out, expected_out, f"Transformer(remat={show(r)})(x) built from nnx.Rngs({model_seed})",
                         "Hint: apply every block of self.blocks once, in order, to the running x; "
                         "checkpointing must not change the output.")


@pytest.mark.points(2)
def test_gradients_match_a_plain_stack(sol, seed):
    """Gradients w.r.t. every nnx.Param equal the plain stack's, for every variant."""
    cfg = config(seed)
    for r in VARIANTS:
        for model_seed, _, _, grads, _, expected_grads in numbers(sol, cfg, seed, r):
            for i, (g, e) in enumerate(zip(grads, expected_grads)):
                for path in PARAMS:
                    assert_close(g[path], e[path],
                                 f"gradient of blocks[{i}].{path} for remat={show(r)} (nnx.Rngs({model_seed}))",
                                 "Hint: checkpointing must not change any gradient; call each block "
                                 "once, in order, and keep Block as given.")


@pytest.mark.points(1)
def test_none_is_not_checkpointed(sol, seed):
    """The gradient of remat=None holds no checkpoint that does work."""
    cfg = config(seed)
    found = structure(sol, cfg, None).live
    if found:
        fail(f"the gradient of Transformer({cfg.layers}, ..., remat=None) holds {found} remat2 equation(s): "
             "remat=None should call the blocks plainly (it is the baseline the memory is compared with). "
             "Hint: use nnx.remat only when remat is 'full' or 'dots'.")


@pytest.mark.points(3)
def test_each_block_is_checkpointed_separately(sol, seed):
    """The gradients of "full" and "dots" hold exactly num_layers working checkpoints, one per block."""
    cfg = config(seed)
    for r in ("full", "dots"):
        problem = count_problem(sol, cfg, r)
        if problem:
            fail(f"the gradient of Transformer({cfg.layers}, ..., remat={show(r)}) holds "
                 f"{structure(sol, cfg, r).live} working remat2 equation(s), expected {cfg.layers} "
                 f"(one per block): {problem}")


@pytest.mark.points(2)
def test_each_checkpoint_holds_a_whole_block(sol, seed):
    """In "full" and "dots", every checkpoint holds all of one block's matmuls and normalisations, and none run outside."""
    cfg = config(seed)
    for r in ("full", "dots"):
        problem = content_problem(sol, cfg, r)
        if problem:
            fail(problem)


@pytest.mark.points(1)
def test_full_saves_nothing(sol, seed):
    """The working checkpoints of "full" carry no policy (or nothing_saveable)."""
    cfg = config(seed)
    require_one_whole_block_per_checkpoint(sol, cfg, "full")
    problem = policy_problem(sol, cfg, "full")
    if problem:
        fail(problem)


@pytest.mark.points(2)
def test_dots_uses_dots_saveable(sol, seed):
    """The working checkpoints of "dots" carry the policy jax.checkpoint_policies.dots_saveable."""
    cfg = config(seed)
    require_one_whole_block_per_checkpoint(sol, cfg, "dots")
    for policy in policies(sol, cfg, "dots"):
        if policy is cp.dots_saveable:
            continue
        text = describe_policy(policy, cfg)
        if text.startswith("save_only_these_names"):
            fail(f"remat='dots' is checkpointed with {text}: the names this policy keeps are tags set with "
                 "checkpoint_name(value, name) (from jax.ad_checkpoint import checkpoint_name), not primitive "
                 "names. Nothing in the block is tagged that way, so 'dots' silently behaves like 'full' (a bug "
                 "in an NNX rematerialization tutorial). Hint: the policy that keeps every matmul result is "
                 "jax.checkpoint_policies.dots_saveable.")
        if policy is None or policy is cp.nothing_saveable:
            fail(f"remat='dots' is checkpointed with {text}: that is full rematerialisation, the same "
                 "as 'full'. Hint: pass policy=jax.checkpoint_policies.dots_saveable to nnx.remat.")
        fail(f"remat='dots' is checkpointed with the policy {text}; expected dots_saveable, which keeps every "
             "matmul result and recomputes the rest. Hint: policy=jax.checkpoint_policies.dots_saveable.")


@pytest.mark.points(2)
def test_full_remat_matches_per_block_remat(sol, seed, note):
    """"full" needs no more temporary memory than the grader's own per-block checkpointed gradient."""
    cfg = config(seed)
    values = {r: temp(sol, cfg, r) for r in (None, "dots", "full")}
    own = {r: own_temp(sol, cfg, r) for r in ("full", "dots")}
    note(f"temp memory of the gradient, measured by the grader ({cfg.text()}): {figures(values)}; "
         f"the grader's own per-block checkpointing: 'dots' {kib(own['dots'])}, 'full' {kib(own['full'])}")
    if values["full"] > (1 + OWN_MARGIN) * own["full"]:
        fail(f"remat='full' needs {kib(values['full'])} of temporary memory ({figures(values)}); the grader's own "
             f"gradient with one jax.checkpoint around each whole block needs {kib(own['full'])} for the same "
             f"parameters. {memory_diagnosis(sol, cfg)}")


@pytest.mark.points(1)
def test_dots_memory_lies_between(sol, seed):
    """"dots" needs less temporary memory than None, more than "full", and no more than the grader's own."""
    cfg = config(seed)
    values = {r: temp(sol, cfg, r) for r in (None, "dots", "full")}
    own = own_temp(sol, cfg, "dots")
    if not values["full"] < values["dots"] < values[None]:
        fail(f"expected full < dots < None; the grader measures {figures(values)}. {memory_diagnosis(sol, cfg)}")
    if values["dots"] > (1 + OWN_MARGIN) * own:
        fail(f"remat='dots' needs {kib(values['dots'])} of temporary memory; the grader's own per-block "
             f"gradient with dots_saveable needs {kib(own)}. {memory_diagnosis(sol, cfg)}")


@pytest.mark.points(2)
def test_temp_memory_bytes_agrees_with_grader(sol, seed, note):
    """temp_memory_bytes(model, x, y) gives the grader's figure for None, "dots" and "full"."""
    cfg = config(seed)
    returned = compiled(sol, cfg, "temp_memory_bytes", None)
    got = {r: as_int(returned[r], f"temp_memory_bytes for remat={show(r)}",
                     "Hint: return int(compiled.memory_analysis().temp_size_in_bytes), a number of bytes.")
           for r in (None, "dots", "full")}
    note(f"your temp_memory_bytes: {figures(got) if got[None] else got}")
    for r in (None, "dots", "full"):
        stats = measured(sol, cfg, r)
        expected = stats["temp_size_in_bytes"]
        if abs(got[r] - expected) <= MEMORY_AGREEMENT * expected:
            continue
        where = (f"temp_memory_bytes for remat={show(r)} returned {got[r]:,} bytes; the grader measures "
                 f"{expected:,} bytes of temporary memory for the gradient of mse_loss")
        for field, value in stats.items():
            if field != "temp_size_in_bytes" and value == got[r]:
                fail(f"{where}. {got[r]:,} is the program's {field}. Hint: read temp_size_in_bytes.")
        t = traced(sol, cfg, r)
        x, y = data(cfg, 0, 0)
        params = nnx.split(t.models[0], nnx.Param, ...)[1]
        forward = memory.temp_bytes(lambda p, x, y: mse(nnx.merge(t.graphdef, p, t.rest)(x), y), params, x, y)
        if abs(got[r] - forward) <= MEMORY_AGREEMENT * forward:
            fail(f"{where}. {got[r]:,} bytes is what the forward pass alone needs: checkpointing only pays "
                 "off in the gradient. Hint: compile jax.grad of the loss w.r.t. the nnx.Param state.")
        fail(f"{where}. Hint: nnx.split(model, nnx.Param, ...), a pure function returning jax.grad of "
             "mse_loss(nnx.merge(...), x, y), then jax.jit(f).lower(...).compile().memory_analysis().")
