"""Probes for Exercise 6: the learner's Transformer built, traced and compiled once per variant.

The first call (`start`, or any probe) starts all the work: each variant (None, "full", "dots")
is traced, and compiled in a thread as soon as it is traced (XLA compilation releases the GIL),
then the learner's temp_memory_bytes runs on the grader's own model (GraderStack) in a thread
of its own. `variant` hands back everything the checks need of one variant, read from that one
program: the parameters and the numbers of two models, what its checkpoints hold and which
policy each carries, and memory_analysis(). The checks (graders/exercises/ex6_nnx_block_remat/checks.py)
draw the configuration and the data, compute every expected value and decide every verdict.

The grader's own block, in JAX, is defined here, because both sides need it: the checks read its
signatures and the memory of its checkpointed gradient (its expected numbers come from the same
block in NumPy, graders/exercises/ex6_nnx_block_remat/plain_stack.py), and a policy (the learner's code) is asked about its
equations here.
"""

from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from graders.kit import costs, jaxpr, verdicts
from graders.kit import program as program_data
from graders.kit.verdicts import fail
from graders.exercises.ex6_nnx_block_remat.plain_stack import LN_EPS, MASKED
from graders.kit.probing import probe

cp = jax.checkpoint_policies
# Read when the probes are imported, before the learner's module is: the policies a variant's
# checkpoints are compared with are JAX's own objects.
NOTHING_SAVEABLE, DOTS_SAVEABLE = cp.nothing_saveable, cp.dots_saveable


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


VARIANTS = (None, "full", "dots")
# The attributes of the given Block that hold parameters, in a fixed order.
PARAMS = ("ln1.scale", "ln1.bias", "qkv.kernel", "proj.kernel",
          "ln2.scale", "ln2.bias", "fc1.kernel", "fc1.bias", "fc2.kernel", "fc2.bias")
# What a Transformer block is made of, by the primitives that only its forward pass binds.
MARKERS = {"dot_general": "matmuls", "rsqrt": "LayerNorm normalisations",
           "exp": "softmax exponentials", "tanh": "GELU tanh"}


def show(remat) -> str:
    return "None" if remat is None else repr(remat)


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
    s = jnp.where(np.tril(np.ones((t, t), bool)), s, MASKED)
    o = jnp.einsum("bhqk,bkhd->bqhd", jax.nn.softmax(s, axis=-1), v).reshape(b, t, d)
    return x + o @ p["proj.kernel"]


def mlp_half(p: dict, h):
    m = jax.nn.gelu(layer_norm(h, p["ln2.scale"], p["ln2.bias"]) @ p["fc1.kernel"] + p["fc1.bias"])
    return h + m @ p["fc2.kernel"] + p["fc2.bias"]


def block_fn(p: dict, x, heads: int):
    return mlp_half(p, attention_half(p, x, heads))


def mse(out, y):
    return jnp.mean((out - y) ** 2)


def markers(eqns) -> Counter:
    return Counter(e.primitive.name for e in eqns if e.primitive.name in MARKERS)


def param_shapes(cfg: Config) -> dict:
    d, f = cfg.d_model, cfg.d_ff
    return {"ln1.scale": (d,), "ln1.bias": (d,), "qkv.kernel": (d, 3 * d), "proj.kernel": (d, d),
            "ln2.scale": (d,), "ln2.bias": (d,), "fc1.kernel": (d, f), "fc1.bias": (f,),
            "fc2.kernel": (f, d), "fc2.bias": (d,)}


def abstract_block_args(cfg: Config):
    """One block's parameters and input as shapes only: tracing them runs nothing."""
    return ({k: jax.ShapeDtypeStruct(s, jnp.float32) for k, s in param_shapes(cfg).items()},
            jax.ShapeDtypeStruct((cfg.batch, cfg.length, cfg.d_model), jnp.float32))


_BLOCK_EQUATIONS: dict = {}


def block_equations(cfg: Config) -> list:
    """The equations of the grader's own block that hold no sub-program, traced once per config."""
    if cfg not in _BLOCK_EQUATIONS:
        p, x = abstract_block_args(cfg)
        _BLOCK_EQUATIONS[cfg] = [e for e in jaxpr.walk(jaxpr.trace(lambda p, x: block_fn(p, x, cfg.heads), p, x))
                                 if not any(True for _ in jaxpr.sub_jaxprs(e))]
    return _BLOCK_EQUATIONS[cfg]


def what_policy_saves(policy, cfg: Config) -> tuple[int, int, int, int]:
    """(matmul results kept, matmuls, other values kept, other values) when the policy is asked,
    as JAX asks it, about every equation of the grader's own block."""
    dots = dots_kept = others = others_kept = 0
    for e in block_equations(cfg):
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


# ----- a model of the grader's own, for temp_memory_bytes ---------------------------------------

HOW = {"full": None, "dots": DOTS_SAVEABLE}  # how a block of GraderStack is checkpointed, by name


class StackConfig(NamedTuple):
    """The sizes of GraderStack and of its data: x and y are (batch, length, d_model)."""
    batch: int
    length: int
    d_model: int
    d_hidden: int


class GraderBlock(nnx.Module):
    """x + tanh(x @ w_in + b_in) @ w_out: a residual MLP block, unlike the Transformer's on
    purpose. A function that measures the model it is given measures this one as well as any,
    and its gradient compiles in a fraction of the time of a Transformer block's (XLA's compile
    time goes with the number of distinct kernels, and this block has few): it is compiled
    after every edit, by the learner's temp_memory_bytes."""

    def __init__(self, c: StackConfig, rng: np.random.Generator):
        def param(*shape):
            # float32 in NumPy: jnp.asarray of a float64 array runs a conversion program per shape
            return nnx.Param(jnp.asarray((0.3 * rng.normal(size=shape)).astype(np.float32)))
        self.w_in, self.b_in, self.w_out = param(c.d_model, c.d_hidden), param(c.d_hidden), param(c.d_hidden, c.d_model)

    def __call__(self, x):
        return x + jnp.tanh(x @ self.w_in[...] + self.b_in[...]) @ self.w_out[...]


class GraderStack(nnx.Module):
    """A stack of the grader's blocks, each run plainly (None) or checkpointed as `layout` says
    ("full", "dots"): a model whose gradient's temporary memory temp_memory_bytes must measure,
    since no figure of the learner's Transformer predicts it. Like a Transformer it has `blocks`
    and a `remat` attribute, which it does not read."""

    def __init__(self, c: StackConfig, layout: tuple):
        rng = np.random.default_rng((len(layout), *c))
        self.blocks = nnx.List([GraderBlock(c, rng) for _ in layout])
        self.layout = tuple(layout)
        self.remat = "full"

    def __call__(self, x):
        for block, how in zip(self.blocks, self.layout):
            x = block(x) if how is None else nnx.remat(lambda b, x: b(x), policy=HOW[how])(block, x)
        return x


def stack_data(c: StackConfig):
    """x and y that GraderStack(c, ...) is given: only their shapes matter to its memory."""
    r = np.random.default_rng(tuple(c))
    shape = (c.batch, c.length, c.d_model)
    return tuple(jnp.asarray(r.normal(size=shape).astype(np.float32)) for _ in range(2))


def _stack_loss(c: StackConfig, layout: tuple):
    """GraderStack's nnx.Param state, and its mean squared error as a pure function of it."""
    graphdef, params, rest = nnx.split(GraderStack(c, layout), nnx.Param, ...)
    return params, lambda p, x, y: mse(nnx.merge(graphdef, p, rest)(x), y)


def grader_stack_memory(c: StackConfig, layout: tuple, x, y, with_loss: bool = False) -> dict:
    """memory_analysis() of the gradient of the mean squared error of GraderStack w.r.t. its
    nnx.Param state, by field: its temp_size_in_bytes is what temp_memory_bytes should return.
    with_loss: of jax.value_and_grad instead, the loss returned beside the gradient (a way of
    measuring the gradient that keeps a little less, and is right too)."""
    params, loss = _stack_loss(c, layout)
    return costs.memory_figures(costs.compile_fn((jax.value_and_grad if with_loss else jax.grad)(loss), params, x, y))


def grader_stack_forward_temp(c: StackConfig, layout: tuple, x, y) -> int:
    """temp_size_in_bytes of GraderStack's mean squared error alone, not differentiated: what a
    temp_memory_bytes that measures the forward pass returns."""
    params, loss = _stack_loss(c, layout)
    return costs.temp_bytes(loss, params, x, y)


# ----- reading the learner's model -------------------------------------------------------------

def build(sol, cfg: Config, remat, seed: int):
    return sol.Transformer(cfg.layers, cfg.d_model, cfg.heads, cfg.d_ff, remat=remat, rngs=nnx.Rngs(seed))


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
        out[path] = np.asarray(jnp.asarray(obj[...], jnp.float32))
    return out


def read_params(model, cfg: Config, remat) -> list:
    return [read_block(b, f"blocks[{i}] of Transformer(remat={show(remat)})")
            for i, b in enumerate(blocks_of(model, cfg, remat))]


class Traced(NamedTuple):
    models: tuple        # one per model seed of the checks: see trace()
    graphdef: object
    rest: object
    paths: list          # the key path of each nnx.Param, in the order its gradients are returned
    forward: object      # jaxpr of model(x)
    gradient: object     # jaxpr of (model(x), gradients w.r.t. the nnx.Param state)
    program: object      # jax.jit(...).trace of the gradient: lowered and compiled here only for a
                         # program that cannot be sent (the judge compiles the others itself)


def _fits(state, like) -> bool:
    """Whether `state` can be given to a program traced with `like`: the same tree, every leaf
    of the same shape and dtype."""
    def avals(tree):
        leaves, treedef = jax.tree.flatten(tree)
        return treedef, [(np.shape(a), np.result_type(a)) for a in leaves]
    return avals(state) == avals(like)


def trace(sol, cfg: Config, remat, seeds, x, y, plain: "Traced | None" = None) -> Traced:
    """The learner's variant traced once: its forward jaxpr (what each checkpoint holds), and one
    program returning the output and the gradient of the grader's mean squared error, whose jaxpr
    is read, and which is compiled once for both the numbers and memory_analysis().

    Its models: Transformer(remat=remat) built from nnx.Rngs(seeds[0]), then, for the other
    seeds, remat=None's models (`plain`) when their parameters fit this variant's program: the
    checks compare the variants' parameters on the first seed, and need the others only for a
    second set of numbers through this variant's program. Building an NNX model runs its
    initialisers op by op: this builds four models per grading instead of six."""
    first = build(sol, cfg, remat, seeds[0])
    blocks_of(first, cfg, remat)
    graphdef, state, rest = nnx.split(first, nnx.Param, ...)
    if plain is not None and all(_fits(nnx.split(m, nnx.Param, ...)[1], state) for m in plain.models[1:]):
        models = (first, *plain.models[1:])
    else:
        models = (first, *(build(sol, cfg, remat, s) for s in seeds[1:]))
        for m in models[1:]:
            blocks_of(m, cfg, remat)

    def out_and_grads(state, x, y):
        def loss(s):
            out = nnx.merge(graphdef, s, rest)(x)
            return mse(out, y), out
        (_, out), grads = jax.value_and_grad(loss, has_aux=True)(state)
        return out, grads

    # Traced through split/merge: NNX refuses to let a trace mutate a module closed over from outside.
    forward = jaxpr.trace(lambda s, x: nnx.merge(graphdef, s, rest)(x), state, x)
    program = jax.jit(out_and_grads).trace(state, x, y)
    paths = [p for p, _ in jax.tree_util.tree_flatten_with_path(state)[0]]
    return Traced(models, graphdef, rest, paths, forward, program.jaxpr, program)


class Work:
    """Everything started for one learner module, configuration and data: each variant traced
    (or the exception its tracing raised) and, in the judge's own process, compiling, and
    temp_memory_bytes running."""

    def __init__(self, sol, cfg: Config, seeds, stacks, x, y, local: bool = False):
        self.cfg, self.traced, self.compiled, self.blocks = cfg, {}, {}, None
        self.local = local  # in the judge's own process (no --sandbox): see IN_PROCESS
        self.sent: dict = {}  # remat -> the programs as data, encoded when first asked for
        self.trace = lambda r: trace(sol, cfg, r, seeds, x, y, self.plain())
        pool = ThreadPoolExecutor(max_workers=len(VARIANTS) + len(stacks))
        try:
            # Tracing holds the GIL and compiling does not. In the judge's process each variant is
            # traced here and compiles in a thread while the next is traced, and only then does
            # the learner's temp_memory_bytes start (in a thread, tracing and compiling the
            # gradient of the grader's model), so that its tracing overlaps these compilations
            # rather than holding them back. Under --sandbox the judge compiles: remat=None is
            # traced here, and each other variant when the judge first asks for it, so that the
            # judge rebuilds and compiles one variant while the next is traced here.
            for r in VARIANTS if local else (None,):
                self.traced[r] = self.attempt(r)
                if local and isinstance(self.traced[r], Traced):  # compiled once, here, for the judge
                    self.compiled[r] = pool.submit(self.traced[r].program.lower().compile)
            if not local and isinstance(self.traced[None], Exception):
                for r in VARIANTS[1:]:  # the checks start only for a model that traces in some variant
                    self.traced[r] = self.attempt(r)
            self.temp_memory = [pool.submit(lambda c=StackConfig(*c), layout=layout:
                                            sol.temp_memory_bytes(GraderStack(c, layout), *stack_data(c)))
                                for c, layout in stacks]
        finally:
            pool.shutdown(wait=False)

    def attempt(self, remat):
        try:
            return self.trace(remat)
        except Exception as exc:  # raised again by every probe that needs this variant
            return exc

    def plain(self) -> "Traced | None":
        found = self.traced.get(None)
        return found if isinstance(found, Traced) else None

    def variant(self, remat) -> Traced:
        if remat not in self.traced:
            self.traced[remat] = self.attempt(remat)
        found = self.traced[remat]
        if isinstance(found, Exception):
            raise found  # the learner's error again, in this check
        return found


_WORK: dict = {}


def work_of(sol, cfg, seeds, stacks, x, y, local: bool = False) -> Work:
    cfg, seeds = Config(*cfg), tuple(seeds)
    stacks = tuple((tuple(c), tuple(layout)) for c, layout in stacks)
    x, y = np.asarray(x, np.float32), np.asarray(y, np.float32)
    key = (id(sol), cfg, seeds, stacks, x.tobytes(), y.tobytes())
    if key not in _WORK:
        _WORK[key] = Work(sol, cfg, seeds, stacks, jnp.asarray(x), jnp.asarray(y), local)
    return _WORK[key]


# Without --sandbox the probes run in the judge's own process (graders/child/probe_channel.py's
# Local), where encoding a program, sending it through the wire and rebuilding it would only
# cost time: the judge puts a nonce of its own here before its first probe call, a probe that
# finds it here runs in the judge's process, and hands the judge its traced programs and their
# compilation in place of their encoding (IN_PROCESS[("variant", nonce, remat)]). The judge takes
# them only from its own process's dict: under --sandbox nothing the worker does reaches it, and
# the judge decodes what the worker sent. Either way the programs are first encoded
# (program.encode_with_policies), so that what cannot be sent is refused, and the learner's own
# policies numbered, alike.
IN_PROCESS: dict = {}


def in_process(nonce) -> bool:
    return isinstance(nonce, str) and bool(nonce) and IN_PROCESS.get("judge") == nonce


# ----- what the learner's programs hold -------------------------------------------------------

def _verdict(exc: Exception, sol) -> list:
    """[outcome, message] for an exception of the learner's code caught here, as run_probe
    would classify it, for a check to raise only if it needs what failed."""
    solutions_dir = Path(getattr(sol, "__file__", None) or ".").resolve().parent
    return list(verdicts.classify(exc, sol, solutions_dir, 0.0))


# The policies each checkpointed variant may carry, by policy_kind: what the checks accept.
EXPECTED_POLICIES = {"full": ("None", "nothing_saveable"), "dots": ("dots_saveable",)}


def block_of_leaf(path) -> int | None:
    """The index i of a parameter leaf under blocks[i] of a model's state (or [i] of a list of
    the grader's blocks' parameters), else None."""
    keys = [getattr(k, "key", getattr(k, "idx", getattr(k, "name", None))) for k in path]
    if len(keys) > 1 and keys[0] == "blocks" and isinstance(keys[1], int):
        return keys[1]
    return keys[0] if keys and isinstance(keys[0], int) else None


# What may lie between a checkpoint's backward pass and a parameter's gradient: moving, adding
# (a parameter used twice) and reshaping values. Anything else computes part of the gradient
# outside the checkpoint (a plain block's matmuls, even a bias's reduce_sum).
HANDING_OUT = jaxpr.SHAPE_ONLY | {"add_any", "add"}


def policy_kind(policy, cfg: Config | None = None) -> str:
    """Which of the policies the checks ask for this is: "None", "nothing_saveable",
    "dots_saveable", or "" for any other. JAX's own objects are known by sight; with `cfg`, any
    other policy is judged by what it keeps of the grader's own block (behaves_like), so that
    one written otherwise (a function keeping what dots_saveable keeps, save_from_both_policies
    of dots_saveable and nothing_saveable) is the policy it behaves as."""
    if policy is None:
        return "None"
    if policy is NOTHING_SAVEABLE:
        return "nothing_saveable"
    if policy is DOTS_SAVEABLE:
        return "dots_saveable"
    return "" if cfg is None else behaves_like(policy, cfg)


def block_residuals(policy, cfg: Config) -> list:
    """What one jax.checkpoint(policy) around the grader's own block keeps for the backward pass,
    measured by differentiating it (jaxpr.checkpoint_residuals: values computed from the block's
    input and parameters, constants left out), as sorted (description, bytes)."""
    p, x = abstract_block_args(cfg)
    checkpointed = jax.checkpoint(lambda p, x: block_fn(p, x, cfg.heads), policy=policy)
    eqn, = jaxpr.find(jaxpr.trace(checkpointed, p, x), "checkpoint")
    return sorted(jaxpr.checkpoint_residuals(eqn))


# (id of a learner's policy, config) -> (the policy, kept alive so its id stays its own; its kind)
_BEHAVES_LIKE: dict = {}


def behaves_like(policy, cfg: Config) -> str:
    """"nothing_saveable" for a policy that keeps none of the block's activations,
    "dots_saveable" for one that keeps exactly what dots_saveable keeps, else "". A policy that
    raises when asked is none of them (policy_summary reports its error)."""
    key = (id(policy), cfg)
    if key not in _BEHAVES_LIKE:
        try:
            kept = block_residuals(policy, cfg)
            kind = "nothing_saveable" if not kept else "dots_saveable" if kept == block_residuals(DOTS_SAVEABLE, cfg) else ""
        except Exception:  # the learner's policy raised; say so where it is described
            kind = ""
        _BEHAVES_LIKE[key] = (policy, kind)
    return _BEHAVES_LIKE[key][1]


def _reaching(outputs: list) -> list:
    """Every Value the outputs are computed from, parents before children."""
    order, seen, stack = [], set(), [(v, False) for v in outputs]
    while stack:
        v, done = stack.pop()
        if done:
            order.append(v)
        elif id(v) not in seen:
            seen.add(id(v))
            stack.append((v, True))
            stack.extend((p, False) for p in v.parents if id(p) not in seen)
    return order


class Gradient:
    """A gradient program read as dataflow (graders/kit/jaxpr.py): its program's last input is the
    target y, so what depends on y belongs to the backward pass, and what does not, and is made
    by the program (not one of its inputs: parameters, x), comes from the forward pass."""

    def __init__(self, closed):
        _, self.outputs = jaxpr.dataflow(closed.jaxpr, closed.consts)
        y = len(closed.jaxpr.invars) - 1
        self.values = _reaching(self.outputs)
        self.backward, self.given = set(), set()
        for v in self.values:
            if v.eqn is None:
                if v.index == y:
                    self.backward.add(id(v))
                elif v.index >= 0:
                    self.given.add(id(v))
            elif any(id(p) in self.backward for p in v.parents):
                self.backward.add(id(v))
            elif v.eqn.primitive.name in jaxpr.SHAPE_ONLY and all(id(p) in self.given for p in v.parents if p.const is None):
                self.given.add(id(v))

    def reached(self, checkpoint, blocks: set) -> dict:
        """id -> bytes of each value of the forward pass a checkpoint (a Value it outputs) is
        computed from, directly or through the backward pass's other work (so a value packed
        together with a cotangent, or passed through another checkpoint first, still counts):
        what the backward pass keeps for it, besides the parameters and x. The output of a
        checkpoint in `blocks` (the sites of the blocks' own checkpoints) is that block's work,
        not followed."""
        found, seen, stack = {}, set(), list(checkpoint.parents)
        while stack:
            v = stack.pop()
            if id(v) in seen or v.eqn is None or id(v) in self.given:
                continue
            seen.add(id(v))
            if id(v) not in self.backward:
                aval = v.eqn.outvars[v.index].aval
                found[id(v)] = int(np.prod(aval.shape)) * aval.dtype.itemsize
            elif v.site not in blocks:
                stack.extend(v.parents)
        return found


def own_kept(cfg: Config, policy) -> list[int]:
    """For each block of the grader's own gradient with one jax.checkpoint(policy) around each
    block: the bytes of the forward pass's values its checkpoint is computed from
    (Gradient.reached), read exactly as the learner's are."""
    def grad_fn(ps, x, y):
        checkpointed = jax.checkpoint(block_fn, policy=policy, static_argnums=2)

        def loss(ps):
            h = x
            for p in ps:
                h = checkpointed(p, h, cfg.heads)
            return mse(h, y)
        return jax.grad(loss)(ps)

    block, act = abstract_block_args(cfg)
    shapes = [block] * cfg.layers
    closed = jax.make_jaxpr(grad_fn)(shapes, act, act)
    leaves = [block_of_leaf(p) for p, _ in jax.tree_util.tree_flatten_with_path(shapes)[0]]
    found = gradient_sources(closed, leaves, cfg.layers, jaxpr.live_equations(closed))
    return [f["kept"][0] if len(f["kept"]) == 1 else -1 for f in found]


def gradient_sources(closed, leaves: list, layers: int, live: set) -> list[dict]:
    """For each block: which working checkpoints of the gradient program compute its parameters'
    gradients ("checkpoints": one number per execution of a checkpoint, so a jitted remat called
    for every block counts once per block), the policy each carries ("policies": the object)
    and how many bytes each receives from the forward pass ("kept", Gradient.reached), and whether
    any part of those gradients is computed outside every checkpoint ("outside"). Followed back
    from each gradient through the equations that only move, add or reshape values
    (HANDING_OUT); at a checkpoint, through its body the same way, so that a value it only
    passes on (nnx.remat hands the module's state in and out, and so its gradient too) is
    followed to where it was made. A block checkpointed in the gradient has its parameters'
    gradients made inside its own checkpoint's backward pass; a block run plainly has them made
    outside every checkpoint, whatever the forward pass alone looks like. `leaves`: the block of
    each parameter (or None), in the order of the gradients, which the program returns last."""
    g = Gradient(closed)
    grads = g.outputs[len(g.outputs) - len(leaves):]
    numbers: dict = {}  # site -> its number, in the order the blocks' gradients reach them
    bodies: dict = {}

    def body_outputs(eqn) -> list:
        if id(eqn) not in bodies:
            body = eqn.params["jaxpr"]
            bodies[id(eqn)] = jaxpr.dataflow(getattr(body, "jaxpr", body), getattr(body, "consts", ()))[1]
        return bodies[id(eqn)]

    def made_inside(checkpoint, passed_on: list) -> bool:
        """Whether this output of a checkpoint is made by work inside it; the checkpoint's
        inputs it only passes on are added to `passed_on`, to be followed outside."""
        made, seen, stack = False, set(), [body_outputs(checkpoint.eqn)[checkpoint.index]]
        while stack:
            v = stack.pop()
            if id(v) in seen or (v.eqn is None and v.index < 0):
                continue
            seen.add(id(v))
            if v.eqn is None:
                passed_on.append(checkpoint.parents[v.index])
            elif v.eqn.primitive.name in HANDING_OUT:
                stack.extend(v.parents)
            else:
                made = True
        return made

    found = [{"checkpoints": {}, "outside": False} for _ in range(layers)]
    for i, value in zip(leaves, grads):
        if i is None or not 0 <= i < layers:
            continue
        seen, stack = set(), [value]
        while stack:
            v = stack.pop()
            if id(v) in seen or v.eqn is None:
                continue
            seen.add(id(v))
            if jaxpr.is_a(v.eqn, "checkpoint"):
                passed_on: list = []
                if made_inside(v, passed_on) and id(v.eqn) in live:
                    found[i]["checkpoints"].setdefault(numbers.setdefault(v.site, len(numbers)), v)
                stack.extend(passed_on)
            elif v.eqn.primitive.name in HANDING_OUT:
                stack.extend(v.parents)
            else:
                found[i]["outside"] = True
    owners = {v.site for f in found for v in f["checkpoints"].values()}
    reached = [{k: g.reached(v, owners) for k, v in f["checkpoints"].items()} for f in found]
    # A value several blocks' checkpoints reach counts for the last of those blocks alone: with the
    # residual additions outside the checkpoints, the loss's cotangent reaches every block past the
    # others' checkpoints, and with it what the loss keeps (the model's output), which the grader's
    # own stack charges to its last block.
    charged = {}
    for i, by_checkpoint in enumerate(reached):
        for values in by_checkpoint.values():
            charged.update(dict.fromkeys(values, i))
    return [{"checkpoints": sorted(f["checkpoints"]),
             "policies": [f["checkpoints"][k].eqn.params.get("policy") for k in sorted(f["checkpoints"])],
             "kept": [sum(size for v, size in reached[i][k].items() if charged[v] == i) for k in sorted(f["checkpoints"])],
             "outside": f["outside"]} for i, f in enumerate(found)]


def carries_values_out(eqn) -> bool:
    """Whether an equation can carry values out of the program and back (jax.pure_callback,
    io_callback, jax.experimental.buffer_callback, an FFI call, a custom call): a gradient could
    keep its activations on the host there, where temp_size_in_bytes does not count them.
    jax.debug.callback (jax.debug.print) returns nothing, so it cannot bring them back."""
    name = eqn.primitive.name
    return ((name.endswith("callback") and name != "debug_callback") or "ffi" in name or "custom_call" in name
            or callable(eqn.params.get("callback")) and name != "debug_callback")


def side_channels(closed) -> int:
    """Equations (and constants) by which values leave the program's dataflow: callbacks
    (carries_values_out), and mutable arrays (jax.new_ref), whose reads no dataflow edge links to the writes, so that
    activations written in the forward pass could be read back in the backward pass unseen."""
    inner = getattr(closed, "jaxpr", closed)

    def is_ref(v) -> bool:
        return type(getattr(v, "aval", None)).__name__ == "AbstractRef"

    found = sum(map(is_ref, inner.constvars)) + sum(map(is_ref, inner.invars))
    for e in jaxpr.walk(inner):
        found += carries_values_out(e) or any(map(is_ref, [*e.invars, *e.outvars]))
    return found


def structure(gradient, forward, leaves: list, cfg: Config) -> dict:
    """What the learner's checkpoints do, read from both programs, in the judge (the programs the
    worker sent, rebuilt: graders/kit/program.py). `gradient` returns (model(x), the gradients
    of the nnx.Param state's leaves), `forward` is model(x); `leaves`: each leaf's block.

    From the gradient program (the one compiled and measured): working: its checkpoints whose
    work reaches a gradient (a stop_gradient'ed or zeroed one does not); policies: each one's
    policy (None, a JAX policy, or program.CustomPolicy: the checks judge it); blocks: for each block, which of them hand out its parameters' gradients
    and whether block work outside them computes any (gradient_sources); gradient_outside:
    MARKERS counts of the work outside every checkpoint that reaches a gradient (a model
    checkpointed per block runs exactly each block's forward pass there).
    From the forward program model(x), where what a checkpoint holds is the forward pass of what
    it wraps: live: min(working, checkpoints reaching the output); dead: checkpoints whose result
    never reaches the output; holds: each live checkpoint's MARKERS counts; outside: MARKERS
    counts of live work outside every checkpoint."""
    # The program returns (model(x), gradients): only work that reaches a gradient counts.
    used = [False] + [True] * (len(gradient.jaxpr.outvars) - 1)
    live_grad = jaxpr.live_equations(gradient, used)
    working = [e for e in jaxpr.find(gradient, "checkpoint") if id(e) in live_grad]
    looped = sum(1 for e, outer in jaxpr.walk_nested(gradient.jaxpr)
                 if jaxpr.is_a(e, "checkpoint") and id(e) in live_grad
                 and any(o.primitive.name in ("scan", "while") for o in outer))
    gradient_outside = Counter()
    for e, outer in jaxpr.walk_nested(gradient.jaxpr):
        if (id(e) in live_grad and not any(jaxpr.is_a(o, "checkpoint") for o in outer)
                and not any(True for _ in jaxpr.sub_jaxprs(e))):
            gradient_outside.update(markers([e]))
    live_fwd = jaxpr.live_equations(forward)
    holds, dead, outside = [], 0, Counter()
    for e, outer in jaxpr.walk_nested(forward):
        if any(jaxpr.is_a(o, "checkpoint") for o in outer):
            continue
        if jaxpr.is_a(e, "checkpoint"):
            if id(e) in live_fwd:
                holds.append(markers(jaxpr.inside(e)))
            else:
                dead += 1
        elif id(e) in live_fwd and not any(True for _ in jaxpr.sub_jaxprs(e)):
            outside.update(markers([e]))
    return {"live": min(len(working), len(holds)), "working": len(working),
            "policies": [e.params.get("policy") for e in working],
            "blocks": gradient_sources(gradient, leaves, cfg.layers, live_grad),
            "gradient_outside": dict(gradient_outside),
            "prevent_cse_off": sum(e.params.get("prevent_cse") is False for e in working),
            "looped": looped,
            "side_channels": side_channels(gradient) + side_channels(forward),
            "dead": dead, "holds": [dict(h) for h in holds], "outside": dict(outside)}


# ----- the probes ------------------------------------------------------------------------------

@probe
def start(sol, cfg, seeds, stacks, x, y, nonce=None):
    """Start the work (see Work) and return, for each of VARIANTS in order, whether it traced:
    the checks start the grader's own programs only for a model that has something to check.
    nonce: the judge's, found in IN_PROCESS only in the judge's own process."""
    work = work_of(sol, cfg, seeds, stacks, x, y, in_process(nonce))
    # a variant not traced yet (under --sandbox, once remat=None has traced) is traced when asked for
    return [not isinstance(work.traced.get(r), Exception) for r in VARIANTS]


def leaf_name(path) -> list | None:
    """[i, "qkv.kernel"] for a leaf of the nnx.Param state under blocks[i] that the checks read
    (PARAMS), else None."""
    i = block_of_leaf(path)
    keys = [getattr(k, "key", getattr(k, "name", None)) for k in path[2:]]
    name = ".".join(k for k in keys if isinstance(k, str) and k != "value")
    return [i, name] if i is not None and name in PARAMS else None


def describe_custom(policy, cfg: Config, sol) -> dict:
    """What a policy of the learner's own keeps of the grader's block, for messages only (the
    judge decides what it keeps from the gradient's dataflow): {"text", "error"}."""
    try:
        return {"text": describe_policy(policy, cfg), "error": None}
    except Exception as exc:  # the learner's policy raised when asked about the grader's block
        return {"text": None, "error": _verdict(exc, sol)}


def sent_programs(work: "Work", sol, remat) -> dict:
    """The variant's two programs as data (graders/kit/program.py), its policies of the learner's
    own described, and, for a program that cannot be sent (a callback, a sharding), its compiled
    program started here: its numbers are then all the judge gets (value checks only)."""
    if remat not in work.sent:
        t = work.variant(remat)
        filename = getattr(sol, "__file__", "") or ""
        gradient, custom = program_data.encode_with_policies(t.gradient, filename)
        forward, _ = program_data.encode_with_policies(t.forward, filename, forward=True)
        compiled = None
        if "unreadable" in gradient or "unreadable" in forward:
            compiled = work.compiled[remat].result() if work.local else t.program.lower().compile()
        work.sent[remat] = {"gradient": gradient, "forward": forward, "compiled": compiled, "custom": custom,
                            "policies": [describe_custom(p, work.cfg, sol) for p in custom]}
    return work.sent[remat]


@probe
def variant(sol, cfg, remat, seeds, stacks, x, y, runs):
    """What the judge needs of Transformer(remat=remat): params: for each model seed, each block's
    parameters (or params_error, the message of a block that lacks one); leaves: which of them
    each leaf of the nnx.Param state is ([block, name], or None for a parameter the checks do not
    read, whose values are in `state`); gradient: the program returning model(x) and the
    gradients of the grader's mean squared error w.r.t. those leaves, given (leaves, x, y);
    forward: model(x)'s program, given (leaves, x); policies: the learner's own checkpoint
    policies, by their number in the gradient program, described (for messages). Nothing is
    compiled or run here: the judge rebuilds, compiles and runs the programs. Only for a program
    that cannot be sent are outs and grads (for each model seed and its (x, y) in `runs`) and
    devices computed here. The first call starts the work for every variant and
    temp_memory_bytes (x, y: the data they are traced with)."""
    work = work_of(sol, cfg, seeds, stacks, x, y)
    cfg = work.cfg
    t = work.variant(remat)
    reply = {"params": None, "params_error": None, "leaves": [], "state": [], "gradient": None, "forward": None,
             "policies": [], "outs": [], "grads": [], "devices": 1}
    try:
        reply["params"] = [read_params(m, cfg, remat) for m in t.models]
    except verdicts.CheckFailed as exc:
        reply["params_error"] = str(exc)
        return reply
    sent = sent_programs(work, sol, remat)
    reply.update(gradient=sent["gradient"], forward=sent["forward"], policies=sent["policies"])
    reply["leaves"] = [leaf_name(p) for p in t.paths]
    for model in t.models:
        leaves = jax.tree.leaves(nnx.split(model, nnx.Param, ...)[1])
        reply["state"].append([None if name is not None else np.asarray(a) for name, a in zip(reply["leaves"], leaves)])
    program = sent["compiled"]
    if program is None and work.local:
        IN_PROCESS[("variant", IN_PROCESS["judge"], remat)] = {
            "gradient": t.gradient, "forward": t.forward, "custom": sent["custom"], "compiled": work.compiled[remat],
            "treedef": jax.tree.structure(nnx.split(t.models[0], nnx.Param, ...)[1])}
        reply.update(gradient={"in_process": 1}, forward={"in_process": 1})
    if program is None:
        return reply
    shardings = jax.tree.leaves((program.input_shardings, program.output_shardings))
    # memory_analysis() is per device: a program spread over several says less than it keeps (messages only)
    reply["devices"] = max((len(s.device_set) for s in shardings), default=1)
    for model, (rx, ry) in zip(t.models, runs):
        out, grads = program(nnx.split(model, nnx.Param, ...)[1], jnp.asarray(rx), jnp.asarray(ry))
        reply["outs"].append(out)
        reply["grads"].append(read_params(nnx.merge(t.graphdef, grads, t.rest), cfg, remat))
    return reply


@probe
def temp_memory_bytes(sol, cfg, seeds, stacks, x, y):
    """What the learner's temp_memory_bytes(model, x, y) returned for GraderStack(c, layout) and
    stack_data(c), for each (c, layout) of `stacks` in order: the value as plain data when it
    can be sent, with its type and repr, or the error it raised."""
    work = work_of(sol, cfg, seeds, stacks, x, y)
    out = []
    for future in work.temp_memory:
        try:
            value = future.result()
            out.append({"value": plain(value), "type": type(value).__name__, "repr": repr(value)[:2000]})
        except Exception as exc:
            out.append({"error": _verdict(exc, sol)})
    return out


def plain(value):
    """value if it can be sent as it is, else as a numeric array, else None."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    try:
        array = np.asarray(value)
    except Exception:
        return None
    if array.dtype.kind not in "biufc":
        return None
    return value if isinstance(value, np.generic) else array


@probe
def block_output(sol, cfg, seeds, stacks, x, y, index, block_x):
    """blocks[index](block_x) of the first model of Transformer(remat=None), the learner's Block
    compiled once."""
    work = work_of(sol, cfg, seeds, stacks, x, y)
    blocks = blocks_of(work.variant(None).models[0], work.cfg, None)
    if work.blocks is None:
        graphdef = nnx.split(blocks[0])[0]
        work.blocks = jax.jit(lambda state, x: nnx.merge(graphdef, state)(x))
    return work.blocks(nnx.split(blocks[index])[1], jnp.asarray(block_x))
