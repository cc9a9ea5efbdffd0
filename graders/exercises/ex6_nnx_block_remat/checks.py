"""Grader for Exercise 6: per-block nnx.remat in an NNX Transformer.

The checks never call the learner's code: graders/exercises/ex6_nnx_block_remat/probes.py does, and hands
back plain data (parameters, outputs, gradients, what each checkpoint holds, the policies' names,
memory figures). Expected outputs and gradients come from the grader's own version of the block
the stub gives, applied to the parameters read out of the learner's model: a plain stack in NumPy
float64 with its gradients written out by hand (graders/exercises/ex6_nnx_block_remat/plain_stack.py), no checkpointing and no
JAX anywhere. So an edited Block, a skipped or repeated block, or a variant that initialises
differently all show as wrong numbers. Checkpointing itself changes
no number: the technique checks read the jaxprs (which checkpoints reach the loss, what each
holds, their `policy`), and the memory checks compare `temp_size_in_bytes` with the grader's own
per-block checkpointed gradient of the same parameters.

Speed: each variant of the learner's model is traced and compiled once (outputs, gradients and
memory all come from that one program, in one probe call per variant); the first call starts
every variant and the learner's temp_memory_bytes. The grader's own figures (its per-block
checkpointed gradients' memory and what each checkpoint keeps, its block's signatures, and the
memory of the model temp_memory_bytes is given) are worked out from the start in a process of
their own (graders/kit/figure_store.py), on the other CPU, while the learner's code traces here; those that
depend on the configuration alone are read back in later runs (graders/kit/figure_store.py). The checks ask
for them only once the learner's model has traced in some variant, so a stub stores none.
"""

import functools
import secrets
from functools import partial
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from typing import NamedTuple

import jax
import numpy as np
import pytest

from graders.kit import costs, figure_store, jaxpr
from graders.kit import program as program_data
from graders.exercises.ex6_nnx_block_remat import plain_stack
from graders.kit.expected import expected, recorded_ahead
from graders.kit.verdicts import Verdict, fail
from graders.kit.numeric import as_int, assert_close, is_close
from graders.exercises.ex6_nnx_block_remat.probes import (
    EXPECTED_POLICIES, MARKERS, PARAMS, VARIANTS, Config, StackConfig, abstract_block_args, attention_half, block_fn,
    grader_stack_forward_temp, grader_stack_memory, markers, mlp_half, mse, own_kept, policy_kind, show)
from graders.exercises.ex6_nnx_block_remat import probes as program_reading
from graders.exercises.ex6_nnx_block_remat.probes import describe_policy as describe_own_policy

cp = jax.checkpoint_policies


def _configs() -> tuple[Config, ...]:
    """Every configuration the grader may draw: tiny widths, since the saving of per-block remat
    comes from the number of layers; 3 or 4 layers, where "full" already saves more than half of
    the memory and "dots" clearly lies between (tests/test_ex6_grader.py measures both on every
    configuration); every axis (and the head size) a distinct size, so a transposed axis cannot
    pass. Every layer lengthens the tracing of each variant, the reading of its programs and the
    building of its models after every edit: drawn from 4 to 6 layers, the edit loop took longer
    (README, Performance)."""
    out = []
    for layers in (3, 4):
        for batch in (2, 3, 5):
            for length in (7, 11):
                for heads, head in ((2, 5), (2, 6), (4, 5)):
                    for d_ff in (14, 18):
                        sizes = (layers, batch, length, heads, head, heads * head, d_ff)
                        if len(set(sizes)) == len(sizes):
                            out.append(Config(layers, batch, length, heads * head, heads, d_ff))
    return tuple(out)


CONFIGS = _configs()
MODEL_SEEDS = (11, 12)  # nnx.Rngs seeds of the two models whose numbers are checked
# temp_memory_bytes may differ from the grader's figure by 3%. Measured on the grader's own models
# as drawn (tests/test_ex6_grader.py measures it again): jax.grad of the loss spelled every way
# tried (x and y passed or closed over, lowered from shapes, nnx.grad of the merged model, jax.vjp,
# a pure dict of parameters) gives the grader's figure exactly, and jax.value_and_grad gives the
# grader's other figure exactly (the loss returned beside the gradient keeps up to 6% less; both
# are right, and both are accepted; 74 draws); the loss returned as has_aux came within 1.9% of
# one of them (17 draws). A figure that adds other fields of memory_analysis() to the temporary memory is
# named exactly (field_sums), however close it comes: the gradients' output is less than 1% of the
# temporary memory on some draws, so no tolerance could tell it apart. (jax.jit(...,
# donate_argnums=...) measures another program, whose buffers alias the parameters: up to 11% off.)
MEMORY_AGREEMENT = 0.03
# A wrong figure is said to be the forward pass's only when it is that within 2%: a
# temp_memory_bytes that measures the loss alone compiles the program the grader compiles for it
# (tests/corpus/ex6/forward_only_memory.py gives its figure exactly), while a figure made up some
# other way may fall within 10% of it by chance (one scaled from another measurement did).
FORWARD_MATCH = 0.02
# The learner's checkpointed gradient goes through nnx.split/merge, the grader's own is a plain
# function of the same parameters; XLA plans both within a few percent of each other, while a
# checkpoint around only half of each block needs 1.4 times as much or more (measured on every
# configuration: 1.4-2.2 times with only the attention half inside, 2.3-4.0 with only the MLP's).
OWN_MARGIN = 0.15
# What each block's checkpoint in the learner's gradient is computed from, out of the forward
# pass, may exceed the grader's own per-block figure by this much: every right way of writing
# per-block remat tried (nnx.remat, jax.checkpoint over split/merge, jitted or not, methods,
# closures) gives exactly the grader's figure, while one computed from the block's activations
# instead of recomputing them (jax.custom_vjp, jax.linearize) needs 20-23 times as much as a
# checkpoint with no policy, and 2.5-2.7 times as much as one with dots_saveable.
KEPT_MARGIN = 0.10


def config(seed: int) -> Config:
    """The configuration of this grading run, drawn from the grading seed (so no figure can be
    looked up); the report prints the seed and --seed reproduces it."""
    return CONFIGS[int(np.random.default_rng(seed).integers(len(CONFIGS)))]


# ----- the grader's own programs (its block: graders/exercises/ex6_nnx_block_remat/probes.py) -------------

def stack_fn(ps: list, x, heads: int, policy=None, remat=False):
    block = jax.checkpoint(block_fn, policy=policy, static_argnums=2) if remat else block_fn
    for p in ps:
        x = block(p, x, heads)
    return x


def own_checkpointed_gradient(policy):
    """The grader's own per-block checkpointed gradient (one jax.checkpoint per block)."""
    def grad_fn(ps, x, y, heads):
        return jax.grad(lambda ps: mse(stack_fn(ps, x, heads, policy, remat=True), y))(ps)
    return jax.jit(grad_fn, static_argnums=3)


# The grader's own figures: each a (name, key, compute) for graders/kit/figure_store.py, which keeps it
# between runs; the first check that asks for one finds it worked out already, in a process of
# its own (see own_figures_ahead), when graders/kit/figure_store.py could start one.

def signatures_figure(cfg: Config) -> tuple:
    """name -> what the grader's own block (and each of its halves) binds, by MARKERS."""
    return "ex6 own signatures", tuple(cfg), partial(own_block_markers, cfg)


@expected
def own_block_markers(cfg: Config) -> dict:
    p, x = abstract_block_args(cfg)
    trace = lambda f: dict(markers(jaxpr.walk(jaxpr.trace(f, p, x))))  # noqa: E731
    return {"one whole block": trace(lambda p, x: block_fn(p, x, cfg.heads)),
            "only the attention half, x + attn(ln1(x))": trace(lambda p, x: attention_half(p, x, cfg.heads)),
            "only the MLP half, h + fc2(gelu(fc1(ln2(h))))": trace(mlp_half)}


def own_temp_figure(cfg: Config) -> tuple:
    """remat -> temp_size_in_bytes of the grader's own per-block checkpointed gradient ("full":
    no policy, "dots": dots_saveable), compiled in threads."""
    return "ex6 own temp", tuple(cfg), partial(own_checkpointed_temps, cfg)


@expected
def own_checkpointed_temps(cfg: Config) -> dict:
    block, act = abstract_block_args(cfg)
    shapes = [block] * cfg.layers
    policies = {"full": None, "dots": cp.dots_saveable}
    with ThreadPoolExecutor(max_workers=len(policies)) as pool:
        programs = {r: pool.submit(lambda p=p: own_checkpointed_gradient(p).lower(shapes, act, act, cfg.heads).compile())
                    for r, p in policies.items()}
        return {r: int(f.result().memory_analysis().temp_size_in_bytes) for r, f in programs.items()}


def kept_figure(cfg: Config) -> tuple:
    """"full"/"dots" -> for each block of the grader's own per-block checkpointed gradient, the
    bytes of the forward pass's values its checkpoint is computed from."""
    return "ex6 own kept", tuple(cfg), partial(own_kept_by_policy, cfg)


@expected
def own_kept_by_policy(cfg: Config) -> dict:
    return {"full": own_kept(cfg, None), "dots": own_kept(cfg, cp.dots_saveable)}


def stack_memory_figure(c: StackConfig, layout: tuple, with_loss: bool = False) -> tuple:
    """memory_analysis() of the gradient of the grader's own model GraderStack(c, layout), by field
    (with_loss: of its jax.value_and_grad)."""
    return ("ex6 grader MLP stack memory" + (" with loss" if with_loss else ""), (tuple(c), layout),
            partial(own_stack_memory_fields, c, layout, with_loss))


@expected
def own_stack_memory_fields(c: StackConfig, layout: tuple, with_loss: bool) -> dict:
    x = jax.ShapeDtypeStruct((c.batch, c.length, c.d_model), np.float32)  # x and y alike
    return grader_stack_memory(c, layout, x, x, with_loss)


@pytest.fixture(scope="session", autouse=True)
def own_figures_ahead(seed):
    """Every figure of the grader's own that this run's draw needs, worked out from the start in
    a process of its own while the learner's model is traced and compiled here. Otherwise the
    first run on a seed (a new installation's, --seed, a submission graded with an empty cache)
    would pay for their tracing and compiling after the learner's."""
    cfg = config(seed)
    figure_store.ahead([signatures_figure(cfg), own_temp_figure(cfg), kept_figure(cfg),
                 *(stack_memory_figure(c, layout, with_loss) for c, layout in stack_specs(seed)
                   for with_loss in (False, True))])
    yield
    figure_store.stop_ahead()


@functools.cache
def own_signatures(cfg: Config) -> dict:
    return {name: Counter(sig) for name, sig in figure_store.stored(*signatures_figure(cfg)).items()}


def own_memory(cfg: Config) -> dict:
    return figure_store.stored(*own_temp_figure(cfg))


@functools.cache
def own_memory_started(cfg: Config):
    """own_memory(cfg), started in a thread while the learner's programs compile (the expected
    outputs and gradients need no program: graders/exercises/ex6_nnx_block_remat/plain_stack.py computes them in NumPy)."""
    pool = ThreadPoolExecutor(max_workers=1)
    future = pool.submit(own_memory, cfg)
    pool.shutdown(wait=False)
    return future


def own_stack_memory(c: StackConfig, layout: tuple, with_loss: bool = False) -> dict:
    return figure_store.stored(*stack_memory_figure(c, layout, with_loss))


# What a figure made of several of memory_analysis()'s fields is called in a message.
FIELD_NAMES = {"temp_size_in_bytes": "temporary", "argument_size_in_bytes": "argument",
               "output_size_in_bytes": "output", "generated_code_size_in_bytes": "generated code",
               "peak_memory_in_bytes": "peak"}


def field_sums(stat: dict) -> dict:
    """figure -> which of memory_analysis()'s fields add up to it (one field other than
    temp_size_in_bytes, or a sum of two or more, zero fields left out): what a temp_memory_bytes
    that reads the wrong field, or adds fields, returns for a program measured the right way."""
    import itertools

    fields = [f for f, v in stat.items() if v]
    found = {}
    for k in range(1, len(fields) + 1):
        for chosen in itertools.combinations(fields, k):
            if chosen != ("temp_size_in_bytes",):
                found.setdefault(sum(stat[f] for f in chosen), chosen)
    return found


def own_stack_forward_temp(c: StackConfig, layout: tuple) -> int:
    """temp_size_in_bytes of that model's loss alone, not differentiated; kept between runs."""
    return figure_store.stored("ex6 grader MLP stack forward temp", (tuple(c), layout),
                               partial(own_stack_forward_figure, c, layout))


@expected
def own_stack_forward_figure(c: StackConfig, layout: tuple) -> int:
    x = jax.ShapeDtypeStruct((c.batch, c.length, c.d_model), np.float32)
    return grader_stack_forward_temp(c, layout, x, x)


def describe_layout(layout: tuple) -> str:
    return f"{len(layout)} blocks: " + ", ".join(
        f"blocks[{i}] {'plain' if how is None else f'checkpointed as {how!r}'}" for i, how in enumerate(layout))


def describe_stack(c: StackConfig, layout: tuple) -> str:
    return (f"{describe_layout(layout)}, each x + tanh(x @ w_in + b_in) @ w_out with w_in of shape "
            f"{(c.d_model, c.d_hidden)}; x and y of shape {(c.batch, c.length, c.d_model)}")


def own_kept_bytes(cfg: Config) -> dict:
    return figure_store.stored(*kept_figure(cfg))


# ----- what the learner's model gives, through the probes ----------------------------------------

class Run(NamedTuple):
    """This grading run: the way to the learner's code, and the grading seed."""
    worker: object
    seed: int


def data(cfg: Config, grading_seed: int, k: int):
    r = np.random.default_rng((grading_seed, k))
    shape = (cfg.batch, cfg.length, cfg.d_model)
    return (np.asarray(r.normal(size=shape), np.float32), np.asarray(r.normal(size=shape), np.float32))


# The sizes the grader's own model is drawn from: over a million shapes with every axis a
# distinct size, times 6 orders of its blocks, so that no table of figures computed beforehand
# holds its figure (tests/test_ex6_grader.py counts them); compiling takes about as long whatever
# the sizes. Narrow and deep (d_model < d_hidden, batch * length > d_model), so that the
# activations the gradient keeps outweigh the parameters: then the loss alone needs at most 0.7
# of the gradient's temporary memory (measured on 200 draws: 0 to 0.68), and a function measuring
# only the forward pass is off by far more than MEMORY_AGREEMENT; with wider blocks the two came
# within 5% of each other.
STACK_SIZES = {"batch": range(3, 12), "length": range(8, 65), "d_model": range(4, 17), "d_hidden": range(20, 301)}


def stack_specs(seed: int) -> tuple:
    """The grader's own model (GraderStack) that temp_memory_bytes is given, as a one-element tuple
    of (configuration, layout): three blocks, one run plainly (None), one "full" and one "dots",
    in a drawn order, and sizes drawn from STACK_SIZES (every axis a distinct size), all from the
    grading seed.
    A model of the grader's, not the learner's variants: a function that measures whatever model
    it is given measures this one too, and one that does not is caught here, whatever it returns
    for the learner's own Transformer. One model, since it is compiled after every edit: one of
    three blocks catches every wrong measurement that two of two blocks caught
    (tests/corpus/ex6), and costs one compilation instead of two. Its blocks are small residual
    MLPs, not Transformer blocks: a gradient of three Transformer blocks took 1.1-1.4 s of CPU to
    compile, one of these 0.2 s (README, Performance)."""
    rng = np.random.default_rng((seed, 6))
    layout = tuple(VARIANTS[int(i)] for i in rng.permutation(len(VARIANTS)))
    while True:
        c = StackConfig(*(int(rng.choice(STACK_SIZES[k])) for k in StackConfig._fields))
        sizes = (len(layout), *c)
        if len(set(sizes)) == len(sizes):
            return ((c, layout),)


def probe_args(cfg: Config, seed: int) -> tuple:
    """What every probe is given to find the work already started: the configuration, the model
    seeds, the grader's own models, and the data the variants are traced with."""
    return (tuple(cfg), MODEL_SEEDS, tuple((tuple(c), layout) for c, layout in stack_specs(seed)), *data(cfg, 0, 0))


def nonce() -> str:
    """This judge's nonce, kept in its own process's probes module (probes.IN_PROCESS): a probe
    that finds it there runs in this process (no --sandbox) and hands its programs over."""
    return program_reading.IN_PROCESS.setdefault("judge", secrets.token_hex(16))


@functools.cache
def started(run: Run, cfg: Config) -> bool:
    """Start the learner's work in the worker; whether any variant of their model traced."""
    traced = run.worker.start(*probe_args(cfg, run.seed), nonce())
    if not (isinstance(traced, list) and len(traced) == len(VARIANTS) and all(isinstance(t, bool) for t in traced)):
        raise Verdict("failed", "the process running your code sent back something no probe sends")
    return any(traced)


@functools.cache
def replies(run: Run, cfg: Config) -> dict:
    """remat -> what the worker sent of Transformer(remat=remat) (see the variant probe), its
    programs rebuilt here and compiling in threads (XLA releases the GIL), or the Verdict that
    asking for it ended with. All three are asked for at once, so that they compile together."""
    if started(run, cfg):
        # The grader's own programs compile while the learner's do; a model that does not even
        # trace (the stub, a half-written module) has nothing to compare with them.
        own_memory_started(cfg)
    cfg_args, seeds, stacks, x, y = probe_args(cfg, run.seed)
    runs = [data(cfg, run.seed, k + 1) for k in range(len(MODEL_SEEDS))]
    out = {}
    # Each reply is rebuilt (and its programs lowered and compiled) in a thread while the next is
    # asked for: under --sandbox the worker encodes one while the judge rebuilds the last.
    pool = ThreadPoolExecutor(max_workers=len(VARIANTS))
    # the compilations judged() starts (never shut down while it may still submit; idle at the end)
    compiling = ThreadPoolExecutor(max_workers=2 * len(VARIANTS))
    for r in VARIANTS:
        try:
            reply = run.worker.variant(cfg_args, r, seeds, stacks, x, y, runs)
        except Verdict as exc:
            out[r] = exc
            continue
        if not well_formed(reply, cfg):
            # Only a process that did not run the probe sends this: the checks below zip lists, so a
            # short one must not pass for a right one.
            out[r] = Verdict("failed", "the process running your code sent back something no probe sends")
            continue
        handed = program_reading.IN_PROCESS.pop(("variant", nonce(), r), None)
        out[r] = pool.submit(judged, reply, cfg, r, runs, compiling, handed)
    pool.shutdown(wait=False)
    return out


class Unreadable(NamedTuple):
    """A variant whose programs the grader could not read: why, and how many devices the worker
    says its program ran on (for messages only)."""
    why: str
    devices: int


def judged(reply: dict, cfg: Config, remat, runs, pool, handed: dict | None = None) -> dict:
    """The reply as the checks read it: params (the worker's: values, held to the plain stack),
    and, from the programs rebuilt here, "gradient", "forward", "leaves" (each input leaf's
    block), "compiled" (a future: the gradient program compiled here, run and measured here),
    "policies" (the worker's descriptions of the learner's own policies, for messages). For a
    program that could not be sent or read, "unreadable" (Unreadable) and the worker's numbers.
    handed: the programs themselves, traced and compiling, when the probe ran in this very process
    (probes.IN_PROCESS: no --sandbox), read in place of their encoding: the same programs, the
    learner's own policies numbered alike ("custom")."""
    if reply["params_error"] is not None:
        return {"params_error": reply["params_error"], "params": None}
    v = {"params_error": None, "params": reply["params"], "policies": reply["policies"], "unreadable": None,
         "custom": []}
    try:
        gradient, forward, leaves = rebuilt(reply, cfg, handed)
    except program_data.ProgramError as exc:
        v["unreadable"] = Unreadable(str(exc), reply["devices"])
        if len(reply["outs"]) != len(MODEL_SEEDS) or len(reply["grads"]) != len(MODEL_SEEDS):
            raise Verdict("failed", "the process running your code sent back something no probe sends") from None
        v["outs"], v["grads"] = reply["outs"], reply["grads"]
        return v
    inputs = []
    for k, (rx, ry) in enumerate(runs):
        args = []
        for j, (name, given) in enumerate(zip(reply["leaves"], reply["state"][k])):
            aval = gradient.jaxpr.invars[j].aval
            value = reply["params"][k][name[0]][name[1]] if name is not None else given
            args.append(np.asarray(value).astype(aval.dtype))
        inputs.append([*args, rx, ry])
    v.update(gradient=gradient, forward=forward, leaves=leaves, names=reply["leaves"], inputs=inputs)
    if handed is not None:
        treedef = handed["treedef"]
        v.update(custom=handed["custom"], compiled=handed["compiled"],
                 call=lambda compiled, args: jax.tree.leaves(compiled(jax.tree.unflatten(treedef, args[:-2]), *args[-2:])))
    else:
        # Sent by another process: model(x)'s program, whose checkpoints the checks read too, is run
        # here as well (require_held). Handed over in this process, it is the model's own trace.
        v.update(compiled=pool.submit(lambda: jax.jit(program_data.core.jaxpr_as_fun(gradient)).lower(*inputs[0]).compile()),
                 call=lambda compiled, args: compiled(*args),
                 forward_compiled=pool.submit(lambda: jax.jit(program_data.core.jaxpr_as_fun(forward)).lower(
                     *inputs[0][:-1]).compile()))
    return v


def rebuilt(reply: dict, cfg: Config, handed: dict | None = None) -> tuple:
    """The gradient and forward programs the worker sent, rebuilt (graders/kit/program.py), or
    handed over in this process, and checked to take the model's parameter leaves, x (and y) and
    return model(x) (and a gradient per leaf), every parameter the checks read named once; a
    ProgramError otherwise."""
    for sent in (reply["gradient"], reply["forward"]):  # refused alike, handed or not
        if isinstance(sent, dict) and set(sent) == {"unreadable"} and isinstance(sent["unreadable"], str):
            raise program_data.ProgramError(f"your program holds {sent['unreadable'][:300]}")
    if handed is not None:
        gradient, forward = handed["gradient"], handed["forward"]
    else:
        gradient = program_data.decode(reply["gradient"], custom_policies=True).closed
        forward = program_data.decode(reply["forward"], custom_policies=True).closed
    names, params = reply["leaves"], reply["params"][0]
    act = (cfg.batch, cfg.length, cfg.d_model)
    wanted = [(i, p) for i in range(cfg.layers) for p in PARAMS]
    if sorted(tuple(n) for n in names if n is not None) != sorted(wanted):
        raise program_data.ProgramError("inputs that are not the model's parameters, each named once")
    shapes = [tuple(params[n[0]][n[1]].shape) if n is not None else tuple(np.shape(g))
              for n, g in zip(names, reply["state"][0])]
    if [tuple(v.aval.shape) for v in gradient.jaxpr.invars] != [*shapes, act, act]:
        raise program_data.ProgramError("a gradient program whose inputs are not the model's parameters, x and y")
    if [tuple(v.aval.shape) for v in gradient.jaxpr.outvars] != [act, *shapes]:
        raise program_data.ProgramError("a gradient program that does not return model(x) and one gradient per parameter")
    if ([tuple(v.aval.shape) for v in forward.jaxpr.invars] != [*shapes, act]
            or [tuple(v.aval.shape) for v in forward.jaxpr.outvars] != [act]):
        raise program_data.ProgramError("a program of model(x) that does not take the model's parameters and x")
    for k, state in enumerate(reply["state"]):
        for n, g, shape in zip(names, state, shapes):
            if (n is None) == (g is None) or (g is not None and tuple(np.shape(g)) != shape):
                raise program_data.ProgramError("parameter values that do not fit the program")
    return gradient, forward, [None if n is None else n[0] for n in names]


@functools.cache
def variant(run: Run, cfg: Config, remat) -> dict:
    """Everything of Transformer(remat=remat) (see judged): the numbers are the grader's own run of
    the program the worker sent (or, for a program it could not send, the worker's)."""
    v = replies(run, cfg)[remat]
    if isinstance(v, Verdict):
        raise v
    v = v.result()  # a Verdict judged() raised is raised again here
    if v["params_error"] is None and v["unreadable"] is None and "outs" not in v:
        compiled = v["compiled"].result()
        v["memory"] = costs.memory_figures(compiled)
        v["outs"], v["grads"] = [], []
        n = len(v["names"])
        for args in v["inputs"]:
            results = [np.asarray(a) for a in v["call"](compiled, args)]
            v["outs"].append(results[0])
            grads = [{} for _ in range(cfg.layers)]
            for name, g in zip(v["names"], results[1:1 + n]):
                if name is not None:
                    grads[name[0]][name[1]] = g.astype(np.float32)
            v["grads"].append(grads)
    return v


def well_formed(v, cfg: Config) -> bool:
    """Whether a variant probe's reply has the shape the probe gives it: one entry per model and
    per block, every parameter named; the programs are read by graders/kit/program.py."""
    def is_(value, kind):
        return isinstance(value, kind) and not (kind is int and isinstance(value, bool))

    def blocks(value):
        return (is_(value, list) and len(value) == cfg.layers
                and all(is_(b, dict) and set(b) == set(PARAMS) and all(is_(a, np.ndarray) for a in b.values())
                        for b in value))

    def error(e):
        return is_(e, list) and len(e) == 2 and all(is_(m, str) for m in e)

    def policy(p):
        return (is_(p, dict) and set(p) == {"text", "error"} and (p["text"] is None or is_(p["text"], str))
                and (p["error"] is None or error(p["error"])))

    def leaf(n):
        return n is None or (is_(n, list) and len(n) == 2 and is_(n[0], int) and 0 <= n[0] < cfg.layers
                             and n[1] in PARAMS)

    n = len(MODEL_SEEDS)
    if not (is_(v, dict) and set(v) == {"params", "params_error", "leaves", "state", "gradient", "forward",
                                        "policies", "outs", "grads", "devices"}):
        return False
    if v["params_error"] is not None:
        return is_(v["params_error"], str)
    return (is_(v["params"], list) and len(v["params"]) == n and all(blocks(p) for p in v["params"])
            and is_(v["leaves"], list) and all(leaf(x) for x in v["leaves"])
            and is_(v["state"], list) and len(v["state"]) == n
            and all(is_(s, list) and len(s) == len(v["leaves"]) and all(a is None or is_(a, np.ndarray) for a in s)
                    for s in v["state"])
            and is_(v["policies"], list) and all(policy(p) for p in v["policies"])
            and is_(v["devices"], int)
            and is_(v["outs"], list) and all(is_(o, np.ndarray) for o in v["outs"])
            and is_(v["grads"], list) and all(blocks(g) for g in v["grads"]))


def params_of(run: Run, cfg: Config, remat) -> list:
    """For each model seed, each block's parameters: {path: float32 array}."""
    v = variant(run, cfg, remat)
    if v["params_error"] is not None:
        fail(v["params_error"])
    return v["params"]


@functools.cache
def numbers(run: Run, cfg: Config, remat) -> list:
    """For each model seed: (seed, params, model(x), gradients, expected output, expected gradients)."""
    v = variant(run, cfg, remat)
    params = params_of(run, cfg, remat)
    rows = []
    for k, seed in enumerate(MODEL_SEEDS):
        x, y = data(cfg, run.seed, k + 1)
        expected_out, expected_grads = plain_stack.out_and_grads(params[k], x, y, cfg.heads)
        rows.append((seed, params[k], v["outs"][k], v["grads"][k], expected_out, expected_grads))
    return rows


# ----- what the learner's programs hold -------------------------------------------------------

class Structure(NamedTuple):
    live: int            # working checkpoints: reaching the output in the forward pass, and a
                         # gradient in the gradient (a stop_gradient'ed or zeroed one does neither)
    working: int         # checkpoints of the gradient program whose work reaches a gradient
    blocks: list         # for each block, read from the gradient program: {"checkpoints": which
                         # working checkpoints compute its parameters' gradients, "outside":
                         # whether any part of them is computed outside every checkpoint}
    gradient_outside: Counter  # MARKERS counts of the gradient's work outside every checkpoint
    side_channels: int   # callbacks and mutable arrays in model(x) and its gradient (the probe's side_channels)
    prevent_cse_off: int # working checkpoints of the gradient made with prevent_cse=False
    looped: int          # working checkpoints of the gradient that run inside a scan or while loop
    policies: list       # the policy of each checkpoint that reaches a gradient: {"is": which of
                         # None, nothing_saveable, dots_saveable it is ("" if none), "text": its
                         # description, or "error": what asking it raised (judged_policies)}
    dead: int            # checkpoints in the forward pass whose result never reaches the output
    holds: list          # for each live checkpoint of the forward pass: its MARKERS counts
    outside: Counter     # MARKERS counts of live forward work outside every checkpoint


def raise_verdict(error: list):
    """End the check with what the probe classified (the learner's code raised there)."""
    outcome, message = error
    raise Verdict(outcome if outcome in ("failed", "not_attempted") else "failed", message[:2000])


def unreadable_text(run: Run, cfg: Config, remat) -> str:
    """Why the programs of this variant are not read ('' when they are)."""
    v = variant(run, cfg, remat)
    if v["unreadable"] is None:
        return ""
    return (f"the grader cannot read the gradient program of Transformer(remat={show(remat)}) that the process running "
            f"your code sent: {v['unreadable'].why}. The technique is judged on the program the grader reads and "
            "runs itself; where values leave the program's dataflow there (say, activations kept on the host by "
            f"{SIDE_CHANNELS}, or spread over devices by a sharding), neither what the checkpoints recompute nor the "
            "memory the gradient keeps can be read. Hint: the exercise needs neither; keep every value in the "
            "program and let nnx.remat recompute each block.")


def require_held(run: Run, cfg: Config, remat) -> None:
    """What a program holds counts only if the program computes the model: its outputs and
    gradients, run by the grader on its own inputs, must equal the grader's plain stack (NumPy,
    float64) of the model's parameters. A program with every mark of the technique that computes
    something else earns nothing."""
    for model_seed, _, out, grads, expected_out, expected_grads in numbers(run, cfg, remat):
        if is_close(out, expected_out) and all(is_close(g[p], e[p]) for g, e in zip(grads, expected_grads)
                                               for p in PARAMS):
            continue
        fail(f"run by the grader on its own inputs, the gradient program of Transformer(remat={show(remat)}) "
             f"(built from nnx.Rngs({model_seed})) does not compute the grader's plain stack of the model's blocks "
             "(its output or a gradient differs): how a program checkpoints is judged only on a program that "
             "computes the model's outputs and gradients. Hint: make the numbers right first (the outputs and "
             "gradients checks say how).")
    v = variant(run, cfg, remat)
    if v.get("forward_compiled") is not None:
        out = np.asarray(v["forward_compiled"].result()(*v["inputs"][0][:-1])[0])
        if not is_close(out, numbers(run, cfg, remat)[0][4]):
            fail(f"run by the grader on its own inputs, the program of Transformer(remat={show(remat)})(x) that the "
                 "process running your code sent does not compute the model's output, which its gradient program "
                 "does: the checkpoints of model(x) are judged only on a program that computes it.")


@functools.cache
def structure(run: Run, cfg: Config, remat) -> Structure:
    """What the checkpoints of the variant's programs do, read here from the programs the worker
    sent (probes.structure), once they are held to the plain stack (require_held)."""
    params_of(run, cfg, remat)
    problem = unreadable_text(run, cfg, remat)
    if problem:
        fail(problem)
    require_held(run, cfg, remat)
    v = variant(run, cfg, remat)
    try:
        s = program_reading.structure(v["gradient"], v["forward"], v["leaves"], cfg)
    except program_data.ProgramError as exc:
        fail(f"the grader could not read the checkpoints of Transformer(remat={show(remat)}): {exc}.")
    judged = judged_policies(s, cfg, v["policies"], v["custom"])
    blocks = [dict(b, policies=[judged[id(p)]["label"] for p in b["policies"]]) for b in s["blocks"]]
    return Structure(s["live"], s["working"], blocks, Counter(s["gradient_outside"]), s["side_channels"],
                     s["prevent_cse_off"], s["looped"], [judged[id(p)] for p in s["policies"]],
                     s["dead"], [Counter(h) for h in s["holds"]], Counter(s["outside"]))


def flow_kind(kept: list, cfg: Config) -> str | None:
    """What the checkpoints carrying one policy keep, read from the gradient's dataflow: "full" when
    every one is computed from no more of the forward pass than the grader's own checkpoint with no
    policy, "dots" when every one is computed from what the grader's own with dots_saveable is
    (within KEPT_MARGIN), "" otherwise; None when no block has a checkpoint of its own to read.
    `kept`: (block, bytes) of each block whose one checkpoint carries that policy."""
    if not kept:
        return None
    own = own_kept_bytes(cfg)
    # blocks[0]'s input is the model's: a right model may make it a value of its own first
    slack = [cfg.batch * cfg.length * cfg.d_model * np.dtype(np.float32).itemsize] + [0] * (cfg.layers - 1)
    if all(k <= (1 + KEPT_MARGIN) * own["full"][i] + slack[i] for i, k in kept):
        return "full"
    if all((1 - KEPT_MARGIN) * own["dots"][i] - slack[i] <= k <= (1 + KEPT_MARGIN) * own["dots"][i] + slack[i]
           for i, k in kept):
        return "dots"
    return ""


def judged_policies(s: dict, cfg: Config, described: list, custom: list) -> dict:
    """id(policy) -> {"is", "label", "text", "error", "policy"} for each policy the programs'
    checkpoints carry. "label": which policy the program says it is (None, one of JAX's,
    judged by asking it in the grader; a policy of the learner's own by what its checkpoints
    keep). "is": the same, once held to what the gradient's dataflow keeps: a dots_saveable that
    keeps no matmul result is none of the policies. "text": the worker's description of a policy of
    the learner's own (messages only); described here for JAX's own, when a message needs it.
    custom: the learner's own policies, by number, when the programs were handed over in this
    process (rebuilt, each is a program.CustomPolicy that knows its number)."""
    kept: dict = {}
    objects = {id(p): p for p in s["policies"]}
    for i, b in enumerate(s["blocks"]):
        objects.update((id(p), p) for p in b["policies"])
        if len(b["kept"]) == 1:
            kept.setdefault(id(b["policies"][0]), []).append((i, b["kept"][0]))
    out = {}
    for key, policy in objects.items():
        flow = flow_kind(kept.get(key, []), cfg)
        number = policy.number if isinstance(policy, program_data.CustomPolicy) else next(
            (n for n, p in enumerate(custom) if p is policy), None)
        if number is not None:
            words = described[number] if number < len(described) else {"text": None, "error": None}
            kind = {"full": "nothing_saveable", "dots": "dots_saveable"}.get(flow, "")
            out[key] = {"is": kind, "label": kind, "text": words["text"] or f"a policy of your own (#{number})",
                        "error": words["error"], "policy": policy}
            continue
        label = policy_kind(policy, cfg)
        entry = {"is": label, "label": label, "text": None, "error": None, "policy": policy, "cfg": cfg}
        if label == "dots_saveable" and flow not in (None, "dots"):
            i, k = kept[key][0]
            entry["is"] = ""
            entry["text"] = (f"dots_saveable by name, yet in the gradient the checkpoint of blocks[{i}] is computed from "
                             f"{k:,} bytes of the forward pass's values, where dots_saveable keeps "
                             f"{own_kept_bytes(cfg)['dots'][i]:,} (the program does not keep what its policy says)")
        out[key] = entry
    return out


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


def count_problem(run: Run, cfg: Config, remat) -> str:
    """'' when the gradient holds one working checkpoint per block, else why not."""
    s = structure(run, cfg, remat)
    n = cfg.layers
    if s.live == n and all(s.holds):
        return ownership_problem(run, cfg, remat)
    if s.live == 0 and (s.dead or s.holds):
        return ("its checkpoints do no work: their result never reaches the loss or its gradient (it is "
                "discarded, multiplied by zero, or behind stop_gradient), and the blocks run plainly beside "
                "them. Hint: use the checkpointed call's result as the block's output.")
    if s.live == 0:
        return (f"no block is checkpointed, so every block's activations are kept for the backward pass. "
                f"Hint: with remat={show(remat)}, call each block through nnx.remat.")
    if s.looped and s.live < n:
        return loop_problem(s, n)
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


def loop_problem(s: Structure, n: int) -> str:
    """What a checkpoint run by a loop (a scan over the blocks' stacked parameters) does instead."""
    return (f"{s.looped} checkpoint(s) run inside a loop (jax.lax.scan or a while loop, say over the blocks' "
            f"parameters stacked), so the gradient holds {s.live} checkpoint(s) for the {n} blocks, not one "
            "nnx.remat per block of self.blocks; stacked, the parameters and their gradients are copied, and "
            "the memory checks measure what that costs. Hint: loop over self.blocks in Python and call each "
            "block through nnx.remat.")


def blocks_text(indices: list) -> str:
    return ", ".join(f"blocks[{i}]" for i in indices)


def ownership_problem(run: Run, cfg: Config, remat) -> str:
    """'' when, in the gradient program, each block's parameter gradients are computed in a
    checkpoint of its own, else why not. The forward pass traced alone can look right while
    the gradient is not (a model that checkpoints only when it is not differentiated)."""
    s = structure(run, cfg, remat)
    plain = [i for i, b in enumerate(s.blocks) if not b["checkpoints"]]
    if plain:
        return (f"traced alone, model(x) has one checkpoint per block, but in the gradient (the program the "
                f"grader compiles and measures) the parameter gradients of {blocks_text(plain)} are computed "
                "outside every checkpoint: differentiated, the model runs those blocks plainly. Hint: call every "
                "block through its own nnx.remat, the same way whether or not the model is differentiated.")
    claimed = Counter(c for b in s.blocks for c in b["checkpoints"])
    shared = [i for i, b in enumerate(s.blocks) if len(b["checkpoints"]) > 1 or claimed[b["checkpoints"][0]] > 1]
    if shared:
        return (f"in the gradient, the parameter gradients of {blocks_text(shared)} are not computed in a "
                "checkpoint of their own block alone: a checkpoint holds more than one block, or a block is "
                "split over several. Hint: wrap each block's whole call in its own nnx.remat, exactly once.")
    return recompute_problem(run, cfg, remat)


def recompute_problem(run: Run, cfg: Config, remat) -> str:
    """'' when each block's checkpoint in the gradient recomputes the block from its input, as
    the grader's own per-block checkpoint does (it is computed from no more of the forward pass's
    values), and no value leaves the program through a callback; else why not."""
    s = structure(run, cfg, remat)
    if s.side_channels:
        return (f"model(x) or its gradient goes around the program's dataflow {s.side_channels} time(s) ({SIDE_CHANNELS}): "
                "values leave the program's dataflow there (say, activations kept on the host or in a mutable array until "
                "the backward pass), so "
                "neither what the checkpoints recompute nor the memory the grader measures can be read. Hint: the "
                "exercise needs neither; keep every value in the program and let nnx.remat recompute each block.")
    own = own_kept_bytes(cfg)
    over = []
    # The grader's blocks[0] keeps nothing: its input is the model's. A right model may make it a
    # value of its own first (checkpoint_name, optimization_barrier), one block input's bytes.
    first_input = cfg.batch * cfg.length * cfg.d_model * np.dtype(np.float32).itemsize
    for i, b in enumerate(s.blocks):
        which = {"None": "full", "nothing_saveable": "full", "dots_saveable": "dots"}.get(b["policies"][0]) if len(b["kept"]) == 1 else None
        if which and b["kept"][0] > (1 + KEPT_MARGIN) * own[which][i] + (first_input if i == 0 else 0):
            over.append((i, b["kept"][0], which))
    if not over:
        return ""
    if any(s.blocks[i]["outside"] for i, _, _ in over):
        # Part of the block runs plainly, and what its backward pass keeps reaches the checkpoint
        # with the cotangent: what runs outside is the mistake to name.
        return part_problem(run, cfg, remat)
    # blocks[0]'s input is the model's input, which no checkpoint has to keep: a later block is
    # the plainer example.
    i, kept, which = next((o for o in over if o[0] > 0), over[0])
    return (f"in the gradient of remat={show(remat)} (the program the grader compiles and measures), the "
            f"checkpoint of blocks[{i}] is computed from {kept:,} bytes of the forward pass's values, where one "
            f"jax.checkpoint around the whole block with {'no policy' if which == 'full' else 'dots_saveable'} needs "
            f"{own[which][i]:,}: the block's activations are kept for the backward pass, not recomputed (is the block "
            "differentiated by your own code -- jax.vjp, jax.linearize, jax.custom_vjp -- with only what follows "
            "checkpointed?). Hint: let nnx.remat recompute each block from its input, and jax.grad of the loss do the rest.")


def content_problem(run: Run, cfg: Config, remat) -> str:
    """'' when each checkpoint holds exactly one whole block, no block work runs outside, and
    each checkpoint recomputes its block."""
    return part_problem(run, cfg, remat) or recompute_problem(run, cfg, remat)


def part_problem(run: Run, cfg: Config, remat) -> str:
    """'' when each checkpoint holds exactly one whole block and no block work runs outside, in
    model(x) traced alone and in its gradient."""
    s = structure(run, cfg, remat)
    if s.looped and s.live < cfg.layers:
        return f"in remat={show(remat)}, {loop_problem(s, cfg.layers)}"
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
    partly = [i for i, b in enumerate(s.blocks) if b["outside"]]
    if partly:
        return (f"traced alone, model(x) runs each block inside a checkpoint, but in the gradient of remat={show(remat)} "
                f"(the program the grader compiles and measures) part of the parameter gradients of "
                f"{blocks_text(partly)} is computed outside their checkpoint: differentiated, part of those blocks "
                "runs plainly. Hint: run the whole of every block inside its own nnx.remat, the same way whether "
                "or not the model is differentiated.")
    forward = Counter({m: cfg.layers * k for m, k in sigs["one whole block"].items()})
    if s.gradient_outside != forward:
        return (f"in the gradient of remat={show(remat)} (the program the grader compiles and measures), "
                f"{counts_text(s.gradient_outside)} run outside every checkpoint; with each whole block in its own "
                f"checkpoint only the forward pass runs there ({counts_text(forward)}). Hint: run the whole of "
                "every block inside its own nnx.remat, the same way whether or not the model is differentiated.")
    return ""


def policies(run: Run, cfg: Config, remat) -> list:
    return structure(run, cfg, remat).policies


def describe_policy(policy: dict) -> str:
    """The policy's name and what it keeps of a block: the worker's description of a policy of the
    learner's own (if asking it raised in the learner's code, that ends the check as it would have
    there), the grader's of one of JAX's."""
    if policy["error"] is not None:
        raise_verdict(policy["error"])
    if policy["text"] is None:
        policy["text"] = describe_own_policy(policy["policy"], policy["cfg"])
    return policy["text"]


def policy_problem(run: Run, cfg: Config, remat) -> str:
    """'' when every working checkpoint of this variant carries the right policy, else what it carries."""
    for policy in policies(run, cfg, remat):
        if remat == "full" and policy["is"] not in EXPECTED_POLICIES["full"]:
            return (f"remat='full' carries the policy {describe_policy(policy)}; full rematerialisation "
                    "keeps only each block's input. Hint: nnx.remat without a policy (or "
                    "policy=jax.checkpoint_policies.nothing_saveable).")
        if remat == "dots" and policy["is"] not in EXPECTED_POLICIES["dots"]:
            return (f"remat='dots' carries the policy {describe_policy(policy)}; dots_saveable keeps "
                    "every matmul result and nothing else. Hint: policy=jax.checkpoint_policies.dots_saveable.")
    return ""


# ----- memory, measured by the grader ----------------------------------------------------------

def measured(run: Run, cfg: Config, remat) -> dict:
    """memory_analysis() of the learner's program for this variant, compiled here (the one run for
    the numbers), once it is held to the plain stack."""
    require_measurable(run, cfg)
    require_held(run, cfg, remat)
    return variant(run, cfg, remat)["memory"]


def temp(run: Run, cfg: Config, remat) -> int:
    """temp_size_in_bytes of the learner's program for this variant, compiled by the grader."""
    return measured(run, cfg, remat)["temp_size_in_bytes"]


def own_temp(cfg: Config, remat) -> int:
    return own_memory_started(cfg).result()[remat]


def kib(n: float) -> str:
    return f"{n / 1024:.1f} KiB"


def figures(values: dict) -> str:
    """remat=None: ... KiB | remat='dots': ... KiB (..% less) | remat='full': ..."""
    def change(r):
        saved = 1 - values[r] / values[None] if values[None] else 0.0
        return "" if r is None else f" ({saved:.0%} less)" if saved >= 0 else f" ({-saved:.0%} more)"
    return " | ".join(f"remat={show(r)}: {kib(values[r])}{change(r)}" for r in (None, "dots", "full"))


def memory_diagnosis(run: Run, cfg: Config) -> str:
    """The first reason, read from the jaxprs, why the memory figures are off."""
    found = structure(run, cfg, None).working
    if found:
        return (f"remat=None is checkpointed too ({found} checkpoints), so there is no plain baseline. "
                "Hint: call the blocks plainly when remat is None.")
    for r in ("full", "dots"):
        problem = count_problem(run, cfg, r)
        if problem:
            return f"In remat={show(r)}, {problem}"
        problem = content_problem(run, cfg, r)
        if problem:
            return problem[0].upper() + problem[1:]
    for r in ("full", "dots"):
        problem = policy_problem(run, cfg, r)
        if problem:
            return problem
    if any(structure(run, cfg, r).prevent_cse_off for r in ("full", "dots")):
        return ("The checkpoints are made with prevent_cse=False: XLA then merges each block's recomputation "
                "with its forward pass (common-subexpression elimination), so the activations are kept after all. "
                "Hint: leave prevent_cse at its default, True; False is meant for checkpoints inside a scan.")
    return ("Hint: call every block through its own nnx.remat; look at the remat2 equations in "
            "jax.make_jaxpr of the gradient.")


# What the side channels the probe counts are, for the messages.
SIDE_CHANNELS = "a callback that returns values, such as jax.pure_callback, or a mutable array made with jax.new_ref"


def require_measurable(run: Run, cfg: Config) -> None:
    """temp_size_in_bytes says what a gradient keeps only if every value stays in the program
    and the gradient runs on one device (the figure is what one device holds): the grader compiles
    the program it reads, and a program that goes around its dataflow (a callback) or is spread
    over devices (a sharding) is not sent (graders/kit/program.py); the worker's count of devices
    only words the message."""
    for r in VARIANTS:
        params_of(run, cfg, r)
        unreadable = variant(run, cfg, r)["unreadable"]
        if unreadable is None:
            continue
        if unreadable.devices > 1:
            fail(f"the gradient of Transformer(remat={show(r)}) runs on {unreadable.devices} devices (its values are "
                 "sharded across them, e.g. by jax.lax.with_sharding_constraint): the temporary memory the grader "
                 "measures is what one device holds, not what the gradient keeps, and the grader does not read such a "
                 f"program ({unreadable.why}). Hint: the exercise runs on one device; let nnx.remat recompute each block.")
        fail(f"the grader cannot read the gradient program of Transformer(remat={show(r)}): {unreadable.why} "
             f"({SIDE_CHANNELS}, say): what leaves the program there (say, activations kept on the host or in a "
             "mutable array) is not in the temporary memory the grader measures, so no figure says what the gradient "
             "keeps. Hint: the exercise needs neither; let nnx.remat recompute each block.")


def require_one_whole_block_per_checkpoint(run: Run, cfg: Config, remat) -> None:
    """A policy earns points only on checkpoints that do the work: one per block, each holding
    the whole block (so a policy on a decoy checkpoint around a no-op earns nothing)."""
    problem = count_problem(run, cfg, remat)
    if problem:
        fail(f"the policy of remat={show(remat)} is read from working checkpoints, one per block of the "
             f"{cfg.layers}: {problem}")
    problem = content_problem(run, cfg, remat)
    if problem:
        fail(f"the policy of remat={show(remat)} is read from checkpoints that each hold one whole block: {problem}")


def returned_well_formed(reply) -> bool:
    """Whether a reply is what the temp_memory_bytes probe sends for one call: {"value", "type",
    "repr"}, or {"error": [outcome, message]}."""
    if not isinstance(reply, dict):
        return False
    if set(reply) == {"error"}:
        error = reply["error"]
        return isinstance(error, (list, tuple)) and len(error) == 2 and all(isinstance(e, str) for e in error)
    return set(reply) == {"value", "type", "repr"} and isinstance(reply["type"], str) and isinstance(reply["repr"], str)


def returned_int(reply: dict, what: str, hint: str = "") -> int:
    """What the learner's function returned (the probe's {"value", "type", "repr"}) as a Python
    int, or a failed check that says what came back, with the type and repr of the value as the
    learner's code returned it."""
    return as_int(reply["value"], what, hint, f"{reply['type']} {reply['repr']}")


# ----- the checks --------------------------------------------------------------------------------

@pytest.mark.points(1)
def test_blocks_compute_the_given_block(worker, seed):
    """Each block of Transformer(remat=None) computes the Block given in the stub."""
    run, cfg = Run(worker, seed), config(seed)
    rows = numbers(run, cfg, None)
    # A stack of distinct random blocks whose output and every gradient match the grader's on two
    # models is made of the given block; only otherwise is a single block compiled, to say which.
    if all(is_close(out, e_out) and all(is_close(g[p], e[p]) for g, e in zip(grads, e_grads) for p in PARAMS)
           for _, _, out, grads, e_out, e_grads in rows):
        return
    x, _ = data(cfg, seed, 1)
    for i, params in enumerate(params_of(run, cfg, None)[0]):
        expected = plain_stack.block_output(params, x, cfg.heads)
        assert_close(worker.block_output(*probe_args(cfg, seed), i, x), expected, f"blocks[{i}](x) of Transformer(remat=None)",
                     "Hint: Block is given and shared with the grader; keep it as in the stub.")


@pytest.mark.points(1)
def test_variants_share_parameters(worker, seed):
    """Built from the same nnx.Rngs, None, "full" and "dots" hold the same parameters (another seed, others)."""
    run, cfg = Run(worker, seed), config(seed)
    first, second = MODEL_SEEDS
    params = {r: params_of(run, cfg, r)[0] for r in VARIANTS}
    other = params_of(run, cfg, None)[1]
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
def test_outputs_match_a_plain_stack(worker, seed):
    """model(x) equals the grader's plain stack of the model's blocks, for every variant."""
    run, cfg = Run(worker, seed), config(seed)
    for r in VARIANTS:
        for model_seed, _, out, _, expected_out, _ in numbers(run, cfg, r):
            assert_close(out, expected_out, f"Transformer(remat={show(r)})(x) built from nnx.Rngs({model_seed})",
                         "Hint: apply every block of self.blocks once, in order, to the running x; "
                         "checkpointing must not change the output.")


@pytest.mark.points(2)
def test_gradients_match_a_plain_stack(worker, seed):
    """Gradients w.r.t. every nnx.Param equal the plain stack's, for every variant."""
    run, cfg = Run(worker, seed), config(seed)
    for r in VARIANTS:
        for model_seed, _, _, grads, _, expected_grads in numbers(run, cfg, r):
            for i, (g, e) in enumerate(zip(grads, expected_grads)):
                for path in PARAMS:
                    assert_close(g[path], e[path],
                                 f"gradient of blocks[{i}].{path} for remat={show(r)} (nnx.Rngs({model_seed}))",
                                 "Hint: checkpointing must not change any gradient; call each block "
                                 "once, in order, and keep Block as given.")


@pytest.mark.points(1)
def test_none_is_not_checkpointed(worker, seed):
    """The gradient of remat=None holds no checkpoint that does work."""
    run, cfg = Run(worker, seed), config(seed)
    found = structure(run, cfg, None).working
    if found:
        fail(f"the gradient of Transformer({cfg.layers}, ..., remat=None) holds {found} remat2 equation(s): "
             "remat=None should call the blocks plainly (it is the baseline the memory is compared with). "
             "Hint: use nnx.remat only when remat is 'full' or 'dots'.")


@pytest.mark.points(3)
def test_each_block_is_checkpointed_separately(worker, seed):
    """The gradients of "full" and "dots" hold exactly num_layers working checkpoints, one per block."""
    run, cfg = Run(worker, seed), config(seed)
    for r in ("full", "dots"):
        problem = count_problem(run, cfg, r)
        if problem:
            live = structure(run, cfg, r).live
            fail(f"the gradient of Transformer({cfg.layers}, ..., remat={show(r)}) holds {live} working remat2 "
                 f"equation(s), expected {cfg.layers} (one per block): {problem}" if live != cfg.layers else
                 f"the gradient of Transformer({cfg.layers}, ..., remat={show(r)}) holds {live} remat2 equations that "
                 f"reach a gradient, yet they are not {cfg.layers} working per-block checkpoints: {problem}")


@pytest.mark.points(2)
def test_each_checkpoint_holds_a_whole_block(worker, seed):
    """In "full" and "dots", every checkpoint holds all of one block's matmuls and normalisations, and none run outside."""
    run, cfg = Run(worker, seed), config(seed)
    for r in ("full", "dots"):
        problem = content_problem(run, cfg, r)
        if problem:
            fail(problem)


@pytest.mark.points(1)
def test_full_saves_nothing(worker, seed):
    """The working checkpoints of "full" carry no policy (or nothing_saveable)."""
    run, cfg = Run(worker, seed), config(seed)
    require_one_whole_block_per_checkpoint(run, cfg, "full")
    problem = policy_problem(run, cfg, "full")
    if problem:
        fail(problem)


@pytest.mark.points(2)
def test_dots_uses_dots_saveable(worker, seed):
    """The working checkpoints of "dots" carry the policy jax.checkpoint_policies.dots_saveable."""
    run, cfg = Run(worker, seed), config(seed)
    require_one_whole_block_per_checkpoint(run, cfg, "dots")
    for policy in policies(run, cfg, "dots"):
        if policy["is"] in EXPECTED_POLICIES["dots"]:
            continue
        text = describe_policy(policy)
        if text.startswith("save_only_these_names"):
            fail(f"remat='dots' is checkpointed with {text}: the names this policy keeps are tags set with "
                 "checkpoint_name(value, name) (from jax.ad_checkpoint import checkpoint_name), not primitive "
                 "names. Nothing in the block is tagged that way, so 'dots' silently behaves like 'full' (a bug "
                 "in an NNX rematerialization tutorial). Hint: the policy that keeps every matmul result is "
                 "jax.checkpoint_policies.dots_saveable.")
        if policy["is"] in ("None", "nothing_saveable"):
            fail(f"remat='dots' is checkpointed with {text}: that is full rematerialisation, the same "
                 "as 'full'. Hint: pass policy=jax.checkpoint_policies.dots_saveable to nnx.remat.")
        fail(f"remat='dots' is checkpointed with the policy {text}; expected dots_saveable, which keeps every "
             "matmul result and recomputes the rest. Hint: policy=jax.checkpoint_policies.dots_saveable.")


@pytest.mark.points(2)
def test_full_remat_matches_per_block_remat(worker, seed, note):
    """"full" needs no more temporary memory than the grader's own per-block checkpointed gradient."""
    run, cfg = Run(worker, seed), config(seed)
    require_measurable(run, cfg)
    values = {r: temp(run, cfg, r) for r in (None, "dots", "full")}
    own = {r: own_temp(cfg, r) for r in ("full", "dots")}
    note(f"temp memory of the gradient, measured by the grader ({cfg.text()}): {figures(values)}; "
         f"the grader's own per-block checkpointing: 'dots' {kib(own['dots'])}, 'full' {kib(own['full'])}")
    if values["full"] > (1 + OWN_MARGIN) * own["full"]:
        fail(f"remat='full' needs {kib(values['full'])} of temporary memory ({figures(values)}); the grader's own "
             f"gradient with one jax.checkpoint around each whole block needs {kib(own['full'])} for the same "
             f"parameters. {memory_diagnosis(run, cfg)}")


@pytest.mark.points(1)
def test_dots_memory_lies_between(worker, seed):
    """"dots" needs less temporary memory than None, more than "full", and no more than the grader's own."""
    run, cfg = Run(worker, seed), config(seed)
    require_measurable(run, cfg)
    values = {r: temp(run, cfg, r) for r in (None, "dots", "full")}
    own = own_temp(cfg, "dots")
    if not values["full"] < values["dots"] < values[None]:
        fail(f"expected full < dots < None; the grader measures {figures(values)}. {memory_diagnosis(run, cfg)}")
    if values["dots"] > (1 + OWN_MARGIN) * own:
        fail(f"remat='dots' needs {kib(values['dots'])} of temporary memory; the grader's own per-block "
             f"gradient with dots_saveable needs {kib(own)}. {memory_diagnosis(run, cfg)}")


@pytest.mark.points(2)
def test_temp_memory_bytes_agrees_with_grader(worker, seed, note):
    """temp_memory_bytes(model, x, y) gives the grader's figure for a model of the grader's own."""
    cfg, stacks = config(seed), stack_specs(seed)
    returned = worker.temp_memory_bytes(*probe_args(cfg, seed))
    if not (isinstance(returned, list) and len(returned) == len(stacks) and all(map(returned_well_formed, returned))):
        raise Verdict("failed", "the process running your code sent back something no probe sends")
    models = [f"a model of the grader's own ({describe_stack(c, layout)}; its `remat` attribute, which it does not "
              "read, says 'full')" for c, layout in stacks]
    got = []
    for what, reply in zip(models, returned):
        if "error" in reply:
            outcome, message = reply["error"]
            if outcome == "not_attempted":
                raise Verdict(outcome, message)
            raise Verdict("failed", f"given {what}, temp_memory_bytes raised: {message}"[:2000])
        got.append(returned_int(reply, f"temp_memory_bytes for {what}",
                                "Hint: return the compiled program's memory_analysis().temp_size_in_bytes as an int, a number of bytes."))
    stats = [own_stack_memory(c, layout) for c, layout in stacks]
    note("your temp_memory_bytes on the grader's own models: " + " | ".join(
        f"{describe_layout(layout)}, w_in of shape {(c.d_model, c.d_hidden)}: {kib(g)} (the grader measures {kib(s['temp_size_in_bytes'])})"
        for (c, layout), g, s in zip(stacks, got, stats)))
    for (c, layout), what, g, stat in zip(stacks, models, got, stats):
        expected = stat["temp_size_in_bytes"]
        recorded_ahead(lambda: own_stack_forward_temp(c, layout))
        # The gradient measured alone, or beside the loss (jax.value_and_grad): both are right.
        right = {expected, own_stack_memory(c, layout, with_loss=True)["temp_size_in_bytes"]}
        where = (f"temp_memory_bytes returned {g:,} bytes for {what}; the gradient of the mean squared error of that "
                 f"model w.r.t. its nnx.Param state needs {expected:,} bytes of temporary memory")
        if g not in right:
            # Other fields, read or added: named exactly, however close the sum comes.
            for program in (stat, own_stack_memory(c, layout, with_loss=True)):
                chosen = field_sums(program).get(g)
                if chosen:
                    fields = " + ".join(f"{f} ({program[f]:,})" for f in chosen)
                    kinds = " + ".join(FIELD_NAMES.get(f, f) for f in chosen)
                    fail(f"{where}. {g:,} is the program's {fields}: its {kinds} memory, not the temporary memory "
                         "alone. Hint: return memory_analysis().temp_size_in_bytes and nothing added to it.")
        if any(abs(g - r) <= MEMORY_AGREEMENT * r for r in right):
            continue
        forward = own_stack_forward_temp(c, layout)
        if abs(g - forward) <= FORWARD_MATCH * forward:
            fail(f"{where}. {g:,} bytes is what the forward pass alone needs: checkpointing only pays off in the "
                 "gradient. Hint: compile jax.grad of the loss w.r.t. the nnx.Param state.")
        fail(f"{where}. A figure must be measured on the model given, not derived from another's. Hint: "
             "nnx.split(model, nnx.Param, ...), a pure function returning jax.grad of mse_loss(nnx.merge(...), x, y), "
             "then jax.jit(f).lower(...).compile().memory_analysis().temp_size_in_bytes.")
