"""Grader for Exercise 5: a Linen MLP whose class is wrapped with nn.checkpoint.

Expected outputs come from the grader's own *unwrapped* Linen MLP, initialised with the same
PRNGKey and evaluated in NumPy float64. Checkpointing changes no number, so the technique
checks read the learner's program with probes put into their model (see "what the checkpoint
does" below): which Dense layers run inside which remat2 once dead code is removed, whether
that remat2 is Linen's lifted nn.checkpoint, what its policy saves (measured), and whether the
returned output and its gradient really go through it. Those checks compare the learner's
program with itself, so wrong weights cost only the numbers checks.
The parameter tree is read with flax.linen.intercept_methods while the learner's code runs.

The checks never call the learner's code: graders/exercises/ex5_linen_checkpoint/probes.py does
(calls it, and traces it with taps in the learner's model) and hands back arrays, shapes and the
traced program as data (graders/kit/program.py). The technique checks rebuild that program here,
hold it to a ReLU MLP at inputs of their own, read its checkpoints and policies, and run it with
their own taps (issue 31: graders/README.md says which facts are still the worker's word). Inputs,
expected values and verdicts are all here.
"""

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import flax.linen as nn

from graders import settings
from graders.kit import figure_store
from graders.kit import expected as marks  # this grader's own `expected` is a function
from graders.kit.verdicts import fail
from graders.kit.numeric import as_array, assert_close, fmt, is_close, rng
from graders.kit import jaxpr
from graders.kit import program as program_data
from graders.exercises.ex5_linen_checkpoint.probes import (FIRST, PREFIX, SECOND, TRANSFORM_TARGET, TYPE_OR_VALUE,
                                                           show_policy, tap, tap_name, untapped)

# (seed, D, F): every D and F distinct, D = 1 included; tiny, since only the wiring is tested.
# The first is also the call the technique checks trace (PROBE_*, below). (Making its F 64, so that
# a policy of the learner's own deciding by size is read at a real width, cost 0.3 s of CPU per
# grading, measured: not done.)
# The other checks reuse these shapes with other seeds where they can: each new shape is a new
# program for the learner's code to compile, and the seeds and float arguments are what they test.
INT_CASES = ((3, 4, 6), (11, 1, 5), (25, 7, 2))
# (seed, D, F, the seed passed, the features passed): one of them a Python float.
FLOAT_CASES = ((9, 4, 6, 9.0, 6), (14, 7, 2, 14, 2.0))
NAME_HINT = ("Hint: the seeded values depend on the key given to init and on the layer names, which "
             "Flax folds into each layer's key: use jax.random.PRNGKey(int(seed)) and two unnamed "
             "nn.Dense(features) layers with ReLU only between them.")


class PlainMLP(nn.Module):
    """The exercise's MLP without nn.checkpoint: the same parameters, the same numbers."""

    features: int

    @nn.compact
    def __call__(self, x):
        # Flax names layers in the order they are constructed: Dense_0 first, then Dense_1.
        x = nn.Dense(self.features)(x)
        x = nn.relu(x)
        return nn.Dense(self.features)(x)


def make_x(seed: int, d: int) -> np.ndarray:
    """The x given to the learner's function (the probes pass it on as a float32 JAX array), drawn
    from the grading seed too: the students' copy holds the outputs for its public seed's x only."""
    return np.asarray(rng([settings.seed(), 100 + seed]).normal(size=(d,)), np.float32)


@functools.cache
def init_program(d: int, f: int):
    """key -> the unwrapped MLP's parameters on a (D,) input, compiled once per D and F: the
    checks run in a process of their own under --sandbox, which shares no compiled op with the
    learner's init, and one program costs less there than Flax's init op by op."""
    return jax.jit(lambda key: PlainMLP(features=f).init(key, jnp.zeros((d,), jnp.float32))["params"])


def plain_params(key, d: int, f: int) -> dict:
    """Dense_0/Dense_1 parameters of the unwrapped MLP, as float64 NumPy arrays."""
    return jax.tree.map(lambda a: np.asarray(a, np.float64), init_program(d, f)(key))


# The (seed, D, F) whose outputs every grading checks.
NEEDED = (*INT_CASES, *((seed, d, f) for seed, d, f, _, _ in FLOAT_CASES))


@functools.cache
def needed_params() -> dict:
    """plain_params(PRNGKey(seed), D, F) of every case in NEEDED, from one program: each program
    the checks compile or load costs them about 0.3 s, more than initialising all the cases. They
    depend on nothing the learner writes, so they are kept between runs (graders/kit/figure_store.py; a
    float32 value survives JSON exactly)."""
    def init_all():
        def programme(seeds):
            return [PlainMLP(features=f).init(jax.random.PRNGKey(seeds[i]), jnp.zeros((d,), jnp.float32))["params"]
                    for i, (_, d, f) in enumerate(NEEDED)]
        found = jax.jit(programme)(np.array([seed for seed, _, _ in NEEDED], np.uint32))
        return [jax.tree.map(lambda a: np.asarray(a, np.float64).tolist(), p) for p in found]
    stored = figure_store.stored("ex5 plain params", NEEDED, init_all)
    return {case: jax.tree.map(np.asarray, p, is_leaf=lambda v: isinstance(v, list)) for case, p in zip(NEEDED, stored)}


def forward_np(p: dict, x, relu_hidden=True):
    h = np.asarray(x, np.float64) @ p["Dense_0"]["kernel"] + p["Dense_0"]["bias"]
    h = np.maximum(h, 0.0) if relu_hidden else h
    return h @ p["Dense_1"]["kernel"] + p["Dense_1"]["bias"]


@marks.expected
def expected(seed: int, x, f: int):
    case = (seed, x.shape[0], f)
    params = needed_params()[case] if case in NEEDED else plain_params(jax.random.PRNGKey(seed), *case[1:])
    return forward_np(params, x)


@marks.expected
def mistakes(seed: int, x, f: int) -> list:
    """(value, message) of the known wrong ideas, computed only when the answer is wrong."""
    d = x.shape[0]
    key = jax.random.PRNGKey(seed)
    p = plain_params(key, d, f)
    out = forward_np(p, x)
    split = jax.random.split(key)
    wrong = [
        (np.maximum(out, 0.0),
         "That is the MLP with a ReLU after the output layer too. Hint: ReLU goes only between the "
         "two Dense layers; the second layer's output is returned as it is."),
        (forward_np(p, x, relu_hidden=False),
         "That is the MLP without the ReLU between the two Dense layers. Hint: apply nn.relu to the "
         "first layer's output."),
        *[(forward_np(plain_params(k, d, f), x),
           f"That is the model initialised with jax.random.split(PRNGKey(seed))[{i}]. Hint: pass "
           "jax.random.PRNGKey(int(seed)) itself to init; splitting it changes every parameter.")
          for i, k in enumerate(split)],
    ]
    if seed != 0:
        wrong.append((forward_np(plain_params(jax.random.PRNGKey(0), d, f), x),
                      f"That is the model initialised with PRNGKey(0), not PRNGKey({seed}). "
                      "Hint: build the key from the seed argument, jax.random.PRNGKey(int(seed))."))
    return wrong


def answer(reply, floats: str = ""):
    """What a probe sent back, or the verdict on the error of the learner's code it reports:
    wrapping an instance instead of the class gets its own hint, and so does a TypeError or
    ValueError when seed or features arrived as a float (`floats` says which)."""
    if not (isinstance(reply, dict) and "raised" in reply):
        return reply
    described = reply["described"]
    if reply["raised"] == TRANSFORM_TARGET:
        fail(f"your code raised {described} Hint: nn.checkpoint takes the "
             "module class, not an instance: model = nn.checkpoint(MLP)(features=int(features)).")
    if reply["raised"] == TYPE_OR_VALUE and floats:
        fail(f"called with {floats} (a float), your code raised {described}. "
             "Hint: convert before use: jax.random.PRNGKey(int(seed)) and features=int(features).")
    fail(f"your code raised {described}")


def call(worker, seed, x, features, what: str, floats: str = "") -> np.ndarray:
    """The learner's output for nn_checkpoint_forward(seed, x, features), as a float64 array."""
    return answer(worker.forward(seed, x, features, what), floats)["out"]


def output_of(got, f: int, what: str) -> np.ndarray:
    array = as_array(got, what)
    if array.shape != (f,):
        flat = " flattened" if array.size == f else ""
        fail(f"{what}: expected shape ({f},), got shape {array.shape}. "
             f"Hint: return the model's output{flat} as a vector of length features, e.g. out.reshape(-1).")
    return array


def check_output(worker, seed, d, f, seed_arg, features_arg, floats: str = ""):
    x = make_x(int(seed), d)
    what = f"output for seed={seed_arg!r}, D={d}, features={features_arg!r}"
    want = expected(int(seed), x, f)
    marks.recorded_ahead(lambda: mistakes(int(seed), x, f))
    got = output_of(call(worker, seed_arg, x, features_arg, what, floats), f, what)
    if not is_close(got, want):  # the known mistakes cost four more inits: only for a wrong answer
        assert_close(got, want, what, NAME_HINT, mistakes=marks.or_else(lambda: mistakes(int(seed), x, f), []))


@pytest.mark.points(2)
def test_output_matches_unwrapped_mlp(worker):
    """The output equals the grader's unwrapped MLP with PRNGKey(seed), for three seeds, D and F."""
    # Every call the output checks make, started at once in the worker (they overlap there).
    worker.start([[seed_arg, make_x(seed, d), features_arg]
                  for seed, d, f, seed_arg, features_arg in (*((s, d, f, s, f) for s, d, f in INT_CASES), *FLOAT_CASES)])
    for seed, d, f in INT_CASES:
        check_output(worker, seed, d, f, seed, f)


@pytest.mark.points(1)
def test_accepts_float_seed_and_features(worker):
    """Still right when seed or features arrives as a Python float (9.0, 2.0)."""
    for seed, d, f, seed_arg, features_arg in FLOAT_CASES:
        floats = " and ".join(f"{n}={v!r}" for n, v in (("seed", seed_arg), ("features", features_arg))
                              if isinstance(v, float))
        # A TypeError or ValueError of the learner's code comes back as such (see answer).
        check_output(worker, seed, d, f, seed_arg, features_arg, floats)


@pytest.mark.points(1)
def test_parameter_tree_is_dense_0_dense_1(worker):
    """The applied parameters are Dense_0 (kernel (D, F), bias (F,)) and Dense_1 (kernel (F, F), bias (F,))."""
    seed, d, f = 8, 4, 6
    # The shapes of the parameters the top-level module was last applied to (not initialised
    # with), read with flax.linen.intercept_methods while the learner's code ran.
    tree = answer(worker.parameter_tree(seed, make_x(seed, d), f))["tree"]
    if tree is None:
        fail("no Flax Linen module was applied to parameters while your function ran. Hint: build "
             "the MLP as a flax.linen Module, then call model.init(...) and model.apply(variables, x).")
    expected = {"Dense_0": {"kernel": (d, f), "bias": (f,)}, "Dense_1": {"kernel": (f, f), "bias": (f,)}}
    layers = sorted(tree)
    if layers != ["Dense_0", "Dense_1"]:
        wrapped = [n for n in layers if n.startswith(("Checkpoint", "Remat"))]
        if wrapped:
            hint = (f"{wrapped[0]} is a single layer wrapped with nn.checkpoint. Hint: wrap the MLP "
                    "class itself, nn.checkpoint(MLP), and keep plain nn.Dense layers inside it.")
        else:
            hint = ("Explicit layer names change the parameter names and, since Flax folds each name "
                    "into the layer's key, the seeded values too. Hint: drop name= from the nn.Dense "
                    "layers so Flax names them Dense_0 and Dense_1.")
        fail(f"expected the parameter layers ['Dense_0', 'Dense_1'], got {layers}. {hint}")
    for name, want in expected.items():
        leaves = tree[name] if isinstance(tree[name], dict) else {}
        if "bias" not in leaves:
            fail(f"{name} holds {sorted(leaves)}, expected ['bias', 'kernel']: the layer has no bias. "
                 "Hint: keep nn.Dense's default use_bias=True.")
        if sorted(leaves) != ["bias", "kernel"]:
            fail(f"{name} holds {sorted(leaves)}, expected ['bias', 'kernel']. "
                 "Hint: use plain nn.Dense(features) layers.")
        got = {k: leaves[k] for k in ("kernel", "bias")}
        if got != want:
            fail(f"{name} has shapes {got}, expected {want} (D={d}, features={f}). "
                 "Hint: both layers are nn.Dense(features); the first maps D to F, the second F to F.")


@pytest.mark.points(1)
def test_x_is_unchanged(worker):
    """x still holds its values afterwards (not modified, donated or deleted)."""
    # D = F on purpose: only then could a donated x be reused for the output (and deleted).
    seed, d, f = 5, 6, 6
    x = make_x(seed, d)
    copy = np.array(x, np.float64)  # what x held before the call
    after = answer(worker.x_after_call(seed, x, f))  # the caller's x (a JAX array) after the call
    if after["deleted"]:
        fail("after your function returned, the caller's x was deleted: it was donated (e.g. "
             "jax.jit(..., donate_argnums=...)) and its buffer reused. Hint: do not donate x; the "
             "caller still owns it.")
    now = np.asarray(after["now"], np.float64)
    if not np.array_equal(now, copy):
        fail(f"x changed during the call: it held {copy[:4]} and now holds {now[:4]}. "
             "Hint: leave x as it is; compute new arrays instead of writing into it.")


# ----- what the checkpoint does -------------------------------------------------------------
# Checkpointing changes no number, so the technique checks have the probes put taps into the
# learner's model while it is applied (flax.linen.intercept_methods; init is left alone). A tap
# is an identity jitted under its own name; the program the worker sends carries it, so the
# judge's rebuilt program says which module calls run inside which remat2, and whether they are
# still there once dead code is removed. Then the judge runs that program with taps of its own
# (an identity with its own custom VJP) put where the program's are: inside the checkpoint they
# shift the output of the model call made there and scale the Dense layers' cotangents, and the
# returned output and its gradient must move exactly as that says: a checkpointed model whose
# result is thrown away, multiplied by zero, masked out, averaged with a twin or cut off from the
# gradient cannot do that. Nothing here depends on the learner's weights being right (the
# program is held to a ReLU MLP with the weights it holds): the numbers checks judge those.

# One small program; D != F tells the two Dense layers apart by their input. It is the very call
# (seed, x, features) the first numbers check made before: code that keeps state between calls
# (checkpointing only the first call at a shape, say) is traced doing what it does on a call it
# has seen, not on a first one; its numbers check has compiled that shape already.
PROBE_SEED, PROBE_D, PROBE_F = INT_CASES[0]
# A tap scales its layer's cotangent by this. The gradient with respect to x crosses each
# Dense layer's output once, so it is scaled by the product of the tapped layers' factors;
# distinct primes, so the product says which layers the gradient crossed.
CT_SCALE = {FIRST: 3.0, SECOND: 5.0}
LIFTED_HINT = ("Hint: model = nn.checkpoint(MLP)(features=int(features)), then model.init and "
               "model.apply as usual, and return that model's output.")


class Call(NamedTuple):
    k: int  # calls are numbered as they return: a model's call after its layers'
    role: str | None  # FIRST, SECOND, or None for a module that is not a Dense layer (the worker's label)
    live: bool  # in the program the judge rebuilt, still there once dead code is removed
    remats: tuple  # the remat2 equations it runs in there (their indices), outermost first
    recomputing: tuple  # those of them whose policy keeps less than everything_saveable does
    lifted: tuple  # those recomputing ones that are Linen's nn.checkpoint (the worker's word)
    traced_in: bool  # whether it ran inside any remat2 in the worker's whole trace, dead code included (words)


class Program(NamedTuple):
    calls: list
    remats: int  # remat2 equations in the worker's whole trace, dead code included (words)
    saves: list  # remat2 index -> what its policy saves (activations: no input, no constant)
    policies: list  # remat2 index -> its policy's name
    kept: list  # remat2 index -> (bytes its policy saves, bytes everything_saveable saves)
    merged: list  # remat2 index -> made with prevent_cse=False
    closed: object  # the rebuilt program, x -> output (the judge's own, see graders/kit/program.py)


# What the judge read of the program, kept for the four technique checks: (id(worker), seed) -> the
# Program or the message of the failure reading it.
_READ: dict = {}


def read_program(worker) -> Program:
    """The learner's program as the worker sent it (x -> output, with the taps on each applied
    module call), rebuilt, type-checked and read here: which taps run inside which remat2 once
    dead code is removed, what each remat2's policy saves (measured here for JAX's policies, by
    differentiating the rebuilt body), whether it was made with prevent_cse=False. The worker's
    word is taken only for labels (which call is which Dense layer, whether a remat2 is Linen's
    lift), for the counts of the whole trace that word the messages, and for what a policy of the
    learner's own (Python code, which the judge does not run) saves."""
    key = (id(worker), settings.seed())
    if key not in _READ:
        reply = answer(worker.program(PROBE_SEED, make_x(PROBE_SEED, PROBE_D), PROBE_F))
        try:
            _READ[key] = _read(reply)
        except program_data.ProgramError as exc:
            _READ[key] = f"your program could not be read: {exc}."
            told = reply.get("calls") if isinstance(reply, dict) else None
            if isinstance(told, list) and not any(isinstance(c, dict) and c.get("role") in (FIRST, SECOND)
                                                  for c in told):
                # no Dense layer applied (the worker's word, which only words a failed verdict): say
                # that, not what in the rest of the program (e.g. init's random draws) is unreadable
                _READ[key] = ("no nn.Dense layer was applied while your function ran: model.init "
                              "(or init_with_output) initialises a model, it does not apply it, and the "
                              "technique checks read the model you apply. Hint: variables = model.init(key, x), "
                              "then return model.apply(variables, x).")
        except (KeyError, TypeError, ValueError, IndexError, AttributeError):
            _READ[key] = "your program could not be read: the reply about it is not one the grader reads."
    read = _READ[key]
    if isinstance(read, str):
        fail(read)
    return read


def _read(reply) -> Program:
    closed = program_data.decode(reply.get("program"), custom_policies=True).closed
    if [tuple(v.aval.shape) for v in closed.jaxpr.invars] != [(PROBE_D,)]:
        raise program_data.ProgramError(f"it takes inputs of shapes {[v.aval.shape for v in closed.jaxpr.invars]}, "
                                        f"not x's ({PROBE_D},)")
    body = closed.jaxpr
    live = {tap_name(e) for e in jaxpr.walk(jaxpr.live(body))}
    around = {tap_name(e): tuple(o for o in outer if jaxpr.is_a(o, "checkpoint"))
              for e, outer in jaxpr.walk_nested(body) if tap_name(e).startswith(PREFIX)}
    own = {int(d["index"]): d for d in reply["own_policies"]}
    index, saves, policies, kept, merged, recomputes = {}, [], [], [], [], []
    for i, eqn in enumerate(jaxpr.find(body, "checkpoint")):
        index[id(eqn)] = i
        plain = untapped(eqn)
        if isinstance(eqn.params["policy"], program_data.CustomPolicy):
            # the learner's own policy (Python code, not sent): what it saves is read from JAX's
            # programs of the body's gradient under it, run here and held to the judge's own
            told = own.get(i)
            if told is None:
                raise program_data.ProgramError("a checkpoint with a policy of your own, sent without its gradient")
            residuals = policy_residuals(plain, told)
            name = str(told.get("policy", "a policy of your own"))
            if name.endswith(".<locals>.policy"):  # one a policy factory of JAX's made, e.g. an offloading one
                name = name[:-len(".<locals>.policy")] + "(...)"
        else:
            residuals = jaxpr.checkpoint_residuals(plain)
            name = show_policy(eqn)
        everything = jaxpr.checkpoint_residuals(plain, jax.checkpoint_policies.everything_saveable)
        saved, held, most = [w for w, _ in residuals], sum(n for _, n in residuals), sum(n for _, n in everything)
        # A checkpoint earns its keep by keeping less of the activations for the backward pass
        # than saving everything would: a policy that keeps as many bytes of them (all but a
        # constant, or one value in place of another) recomputes nothing worth recomputing.
        # prevent_cse=False lets XLA merge the recomputation with the forward pass once compiled
        # (common-subexpression elimination), so the activations are kept after all: measured on
        # four 512-wide MLPs, the gradient needed 3.0 MiB plain, 1.5 MiB checkpointed and 3.0 MiB
        # checkpointed with prevent_cse=False. (It is meant for checkpoints inside a scan.)
        cse = eqn.params.get("prevent_cse", True) is False
        saves.append(saved), policies.append(name), kept.append((held, most)), merged.append(cse)
        recomputes.append(held < most and not cse)
    made_inside = {index[id(r)]: computed_inside(r) for r in jaxpr.find(body, "checkpoint")}
    calls = []
    for k, told in enumerate(reply["calls"]):
        name = f"{PREFIX}call_{k}"
        role = told["role"] if told["role"] in (FIRST, SECOND) else None
        # A Dense layer runs inside a checkpoint where its product is computed there: a tap put
        # on a value the checkpoint only receives marks no layer inside it.
        remats = tuple(index[id(r)] for r in around.get(name, ())
                       if role is None or k in made_inside[index[id(r)]])
        # What a checkpoint recomputes is decided by the checkpoints around it too: one whose policy
        # keeps as much as saving everything keeps the residuals of the checkpoints inside it
        # (JAX's print_saved_residuals lists them), so a remat2 counts as recomputing only if it
        # and every remat2 around it does.
        recomputing = tuple(r for i, r in enumerate(remats) if all(recomputes[o] for o in remats[:i + 1]))
        # the worker's word on which of them is Linen's lift, matched innermost first
        flags = dict(zip(reversed(remats), reversed([bool(f) for f in told["lifted"]])))
        lifted = tuple(r for r in recomputing if flags.get(r, False))
        calls.append(Call(k, role, name in live, remats, recomputing, lifted, bool(told["traced_in"])))
    return Program(calls, int(reply["remats"]), saves, policies, kept, merged, closed)


def policy_residuals(plain, told: dict) -> list:
    """What a checkpoint with a policy of the learner's own keeps for the backward pass, as
    graders.kit.jaxpr.checkpoint_residuals words it: read from the programs JAX made of its
    body's gradient under that policy in the worker (probes.policy_programs), once the judge has
    run them on values of its own: the forward pass must return the body's outputs, and the
    backward pass, from the residuals alone, the body's gradient (the judge's own, by
    differentiating the rebuilt body). Residuals that are the body's inputs or constants do not count."""
    from jax.extend.core import ClosedJaxpr, Literal, jaxpr_as_fun
    from jax._src.core import MemorySpace

    body = plain.params["jaxpr"]
    forward = program_data.decode(told.get("forward"), custom_policies=True).closed
    backward = program_data.decode(told.get("backward"), custom_policies=True).closed
    count = told.get("residuals")
    n_in, n_out = len(body.invars), len(body.outvars)

    def on_device(avals):  # a residual an offloading policy keeps on the host enters the backward
        return [a.update(memory_space=MemorySpace.Device) for a in avals]  # pass as a device value's type

    if (not isinstance(count, int) or [v.aval for v in forward.jaxpr.invars] != [v.aval for v in body.invars]
            or len(forward.jaxpr.outvars) != n_out + count
            or [v.aval for v in forward.jaxpr.outvars[:n_out]] != [v.aval for v in body.outvars]
            or on_device(v.aval for v in backward.jaxpr.invars) != on_device(
                [v.aval for v in forward.jaxpr.outvars[n_out:]] + [v.aval for v in body.outvars])
            or len(backward.jaxpr.outvars) != n_in):
        raise program_data.ProgramError("the gradient of a checkpoint with a policy of your own, sent in a shape "
                                        "that is not its body's")
    r = rng([settings.seed(), 32])
    args = [jnp.asarray(r.normal(size=v.aval.shape), v.aval.dtype) for v in body.invars]
    cts = [jnp.asarray(r.normal(size=v.aval.shape), v.aval.dtype) for v in body.outvars]

    def run(closed, values):
        return jaxpr.evaluate(closed.jaxpr, closed.consts, values, jaxpr.bind, through=("jit", "checkpoint"))

    outs, vjp = jax.vjp(jaxpr_as_fun(ClosedJaxpr(body, ())), *args)
    grads = vjp(list(cts))
    got = run(forward, args)
    got_grads = run(backward, [*got[n_out:], *cts])
    if not all(is_close(np.asarray(a, np.float64), np.asarray(b, np.float64))
               for a, b in zip([*got[:n_out], *got_grads], [*outs, *grads])):
        raise program_data.ProgramError("the gradient of a checkpoint with a policy of your own, which does not "
                                        "compute its body's gradient")
    program = forward.jaxpr
    kept = program.outvars[n_out:]
    computed = jaxpr.depends_on(program.replace(outvars=kept), lambda _: False, [True] * n_in)
    made_by = {v: e for e in program.eqns for v in e.outvars}
    inputs = set(program.invars)
    found, seen = [], set()
    for var, from_inputs in zip(kept, computed):
        if isinstance(var, Literal) or var in inputs or not from_inputs or var in seen:
            continue
        seen.add(var)
        made = made_by.get(var)
        offloaded = made is not None and made.primitive.name == "device_put" and var.aval.memory_space.name == "Host"
        if offloaded:  # kept on the host (an offloading policy): what is kept is what it copies there
            made = made_by.get(made.invars[0])
        while made is not None and made.primitive.name == "reduce_precision":  # as JAX looks through it
            made = made_by.get(made.invars[0], made)
            if made.primitive.name == "reduce_precision":
                break
        name = made.primitive.name if made is not None else "an equation"
        if name in ("jit", "pjit") and made.params.get("name") in ("custom_jvp_call", "custom_vjp_call"):
            name = made.params["name"]  # a custom function as sent (program.encode's forward=True)
        what = (f"output of jitted function {made.params['name']!r}" if name in ("jit", "pjit") else
                f"output of {jaxpr.said(name)}" if name in jaxpr.SAID else f"output of {name}")
        what += ", offloaded to the host" if offloaded else ""
        found.append((f"{var.aval.update(memory_space=MemorySpace.Device).str_short()} {what}",
                      int(var.aval.size) * var.aval.dtype.itemsize))
    return found


class Probed(NamedTuple):
    value: np.ndarray  # the output, taps at work
    grad: np.ndarray  # d<w, output>/dx, taps at work
    want_value: np.ndarray  # what they must be, from the same program without the taps at work
    want_grad: np.ndarray
    roles: tuple  # the Dense layers whose cotangents are scaled


def evaluated(closed, x, w, perturb: dict, keep: bool = True) -> tuple:
    """`_evaluated`, kept for the four technique checks (they mostly ask for the same runs)."""
    key = (id(closed), np.asarray(x, np.float32).tobytes(), repr(sorted(perturb.items())))
    if not keep:
        return _evaluated(closed, x, w, perturb)
    if key not in _READ:
        _READ[key] = _evaluated(closed, x, w, perturb)
    return _READ[key]


def _evaluated(closed, x, w, perturb: dict) -> tuple:
    """The judge's run of the rebuilt program at x: (output, d<w, output>/dx, {k: what tap k
    saw}), with the taps `perturb` ({k: (shift or None, scale)}) at work: each is the judge's
    own identity (graders/exercises/ex5_linen_checkpoint/probes.py's tap) put where the program's tap is."""
    def apply(eqn, ins, seen):
        name = tap_name(eqn)
        sub = eqn.params.get("jaxpr") if (name or jaxpr.is_a(eqn, "checkpoint")) else None
        if sub is None:
            looped = run_loop(eqn, ins, lambda e, i: apply(e, i, seen))
            return jaxpr.bind(eqn, ins) if looped is None else looped
        outs = jaxpr.evaluate(getattr(sub, "jaxpr", sub), getattr(sub, "consts", ()), ins,
                              lambda e, i: apply(e, i, seen), through=())
        if name.startswith(PREFIX) and len(outs) == 1:
            k = int(name.rsplit("_", 1)[1])
            seen[k] = outs[0]
            if k in perturb:
                outs = [tap(name, *perturb[k])(outs[0])]
        return outs

    def weighted(x):
        seen = {}
        outs = jaxpr.evaluate(closed.jaxpr, closed.consts, [x], lambda e, i: apply(e, i, seen), through=())
        out = jnp.reshape(outs[0], (-1,))
        if out.shape != (PROBE_F,):
            return jnp.float32(0), (out, seen)
        return jnp.vdot(jnp.asarray(w, jnp.float32), out), (out, seen)

    (_, (out, seen)), grad = jax.value_and_grad(weighted, has_aux=True)(jnp.asarray(x, jnp.float32))
    return (np.asarray(out, np.float64), np.asarray(grad, np.float64),
            {k: np.asarray(v, np.float64) for k, v in seen.items()})


def computed_inside(remat) -> set:
    """The taps (by k) inside a remat2's body whose value is made from a matrix product computed
    inside that body (graders/kit/jaxpr.py's symbolic Values, followed through calls)."""
    found = set()

    def value(v):
        return v if isinstance(v, jaxpr.Value) else jaxpr.Value(None, -1, const=v)

    def apply(eqn, ins):
        ins = [value(v) for v in ins]
        name = tap_name(eqn)
        sub = eqn.params.get("jaxpr") if (name or jaxpr.is_a(eqn, "checkpoint")) else None
        if sub is not None and len(getattr(sub, "jaxpr", sub).invars) == len(ins):
            if name.startswith(PREFIX) and ins and any(
                    a.eqn is not None and a.eqn.primitive.name == "dot_general" for a in jaxpr.ancestors(ins[0])):
                found.add(int(name.rsplit("_", 1)[1]))
            return [value(v) for v in jaxpr.evaluate(getattr(sub, "jaxpr", sub), [value(c) for c in getattr(sub, "consts", ())],
                                                     ins, apply, through=())]
        site = object()
        return [jaxpr.Value(eqn, i, ins, site=site) for i in range(len(eqn.outvars))]

    body = remat.params["jaxpr"]
    jaxpr.evaluate(body, [], [jaxpr.Value(None, i) for i in range(len(body.invars))], apply, through=())
    return found


# A loop (a scan, or a while loop whose condition the judge can decide, e.g. a fori_loop) is run
# trip by trip, its body equation by equation, so the taps inside it are seen and put to work as
# anywhere else (a tap seen on several trips keeps its last trip's value). It computes what the
# loop computes. The program is traced at D=3, F=5, where a solution loops over a batch of a few
# rows or a few steps; a loop of more trips than this is bound whole (its taps unseen), so that
# the judge's evaluation does not grow with a loop's length.
LOOP_TRIPS = 16


def run_loop(eqn, ins, apply):
    """The outputs of a scan or while equation, run trip by trip with `apply` on its body's
    equations, or None if it is no such loop or has more than LOOP_TRIPS trips."""
    def body_of(closed, values):
        return jaxpr.evaluate(closed.jaxpr, closed.consts, values, apply, through=())

    if eqn.primitive.name == "scan":
        p = eqn.params
        length = p["length"]
        if length > LOOP_TRIPS:
            return None
        if "ft_in" in p:  # this JAX's scan: its operands and results as flat trees
            consts, carry, xs = map(list, p["ft_in"].update(ins).unpack())
            n_carry = len(carry)
        else:
            n_consts, n_carry = p["num_consts"], p["num_carry"]
            consts, carry, xs = ins[:n_consts], list(ins[n_consts:n_consts + n_carry]), ins[n_consts + n_carry:]
        ys = [None] * length
        for i in (reversed(range(length)) if p["reverse"] else range(length)):
            outs = body_of(p["jaxpr"], [*consts, *carry, *(x[i] for x in xs)])
            carry, ys[i] = list(outs[:n_carry]), outs[n_carry:]
        n_ys = len(eqn.outvars) - n_carry
        stacked = [jnp.stack([jnp.asarray(y[j]) for y in ys]) if length else
                   jnp.zeros(eqn.outvars[n_carry + j].aval.shape, eqn.outvars[n_carry + j].aval.dtype)
                   for j in range(n_ys)]
        return [*carry, *stacked]
    if eqn.primitive.name == "while":
        p = eqn.params
        n_cond, n_body = p["cond_nconsts"], p["body_nconsts"]
        cond_consts, body_consts, carry = ins[:n_cond], ins[n_cond:n_cond + n_body], list(ins[n_cond + n_body:])
        for _ in range(LOOP_TRIPS + 1):
            go = body_of(p["cond_jaxpr"], [*cond_consts, *carry])[0]
            if isinstance(go, jax.core.Tracer):
                return None  # decided by traced values: not a loop the judge can count
            if not bool(go):
                return carry
            carry = list(body_of(p["body_jaxpr"], [*body_consts, *carry]))
        return None
    return None


def at_points(closed, points: np.ndarray) -> tuple:
    """The rebuilt program run on each row of points at once (jax.vmap of the judge's evaluation):
    (outputs (N, size), {k: what tap k saw, (N, size)}) in float64."""
    def one(x):
        seen = {}

        def apply(eqn, ins):
            name = tap_name(eqn)
            sub = eqn.params.get("jaxpr") if (name or jaxpr.is_a(eqn, "checkpoint")) else None
            if sub is None:
                looped = run_loop(eqn, ins, apply)
                return jaxpr.bind(eqn, ins) if looped is None else looped
            outs = jaxpr.evaluate(getattr(sub, "jaxpr", sub), getattr(sub, "consts", ()), ins, apply, through=())
            if name.startswith(PREFIX) and len(outs) == 1:
                seen[int(name.rsplit("_", 1)[1])] = jnp.reshape(outs[0], (-1,))
            return outs

        outs = jaxpr.evaluate(closed.jaxpr, closed.consts, [x], apply, through=())
        return jnp.reshape(outs[0], (-1,)), seen

    out, seen = jax.vmap(one)(jnp.asarray(points, jnp.float32))
    return np.asarray(out, np.float64), {k: np.asarray(v, np.float64) for k, v in seen.items()}


def _affine_fit(inputs: np.ndarray, values: np.ndarray) -> bool:
    """Whether values (N, F) are an affine function of inputs (N, K), to float32's precision."""
    design = np.concatenate([inputs, np.ones((len(inputs), 1))], axis=1)
    coefficients, *_ = np.linalg.lstsq(design, values, rcond=None)
    return is_close(design @ coefficients, values)


def held(program: Program) -> None:
    """The program held to what the exercise's MLP computes, with whatever weights it holds (the
    numbers checks judge those): the judge runs it at points of its own, the worker never saw,
    and reads what each tap saw there. What a tap labelled as the first Dense layer sees must be
    an affine function of x; what one labelled the second sees, an affine function of the first's
    output through a ReLU (or without one); and the output, that (or its ReLU). A program with the
    technique's marks that computes something else fails here."""
    key = (id(program), "held")
    if key not in _READ:
        _READ[key] = _held(program)
    if _READ[key]:
        fail(_READ[key])


def _held(program: Program) -> str:
    points = np.asarray(rng([settings.seed(), 31, PROBE_SEED]).normal(size=(PROBE_D + PROBE_F + 4, PROBE_D)),
                        np.float32)
    out, seen = at_points(program.closed, points)
    if out.shape[1:] != (PROBE_F,):
        return (f"expected an output of shape ({PROBE_F},), got {tuple(out.shape[1:])}. "
                "Hint: return the model's output as a vector of length features.")
    layers = {role: [seen[c.k] for c in program.calls if c.role == role and c.k in seen] for role in (FIRST, SECOND)}
    firsts = [h for h in layers[FIRST] if h.shape[1:] == (PROBE_F,) and _affine_fit(points, h)]
    seconds = [g for g in layers[SECOND] if g.shape[1:] == (PROBE_F,) and any(
        _affine_fit(np.maximum(h, 0.0), g) or _affine_fit(h, g) for h in firsts)]
    if any(is_close(out, g) or is_close(out, np.maximum(g, 0.0)) for g in seconds):
        return ""
    return ("the technique checks run your program (traced from nn_checkpoint_forward) themselves, at "
            "inputs of their own: what it returns there is not the output of its two Dense layers, the "
            "first an affine function of x and the second of the first's output through a ReLU, so what "
            f"it checkpoints is not the exercise's MLP. {LIFTED_HINT}")


def run_probed(worker, program: Program, inside: list) -> Probed:
    """The learner's output and its gradient with respect to x, the judge's runs of the rebuilt
    program: first as it is (held to the grader's own MLP, see `held`), then with the taps of the
    calls `inside` a checkpoint at work: the Dense layers among them have their cotangents scaled;
    and if the output layer is among them, the last of them to return (the model call made inside
    the checkpoint) has its output shifted by u, which must shift the returned output by u."""
    r = rng(PROBE_SEED + 1)
    shift = r.normal(size=(PROBE_F,)).astype(np.float32)
    w = r.normal(size=(PROBE_F,)).astype(np.float32)
    x = make_x(PROBE_SEED, PROBE_D)
    last = inside[-1]
    roles = tuple(sorted({c.role for c in inside if c.role}))
    perturb = {c.k: (None, CT_SCALE[c.role]) for c in inside if c.role}
    if SECOND in roles:  # without the output layer, the checkpoint's last call is not the output
        perturb[last.k] = (shift, CT_SCALE.get(last.role, 1.0))
    held(program)
    value0, grad0, _ = evaluated(program.closed, x, w, {})
    if np.allclose(grad0, 0.0):
        # Some seeds draw an x at which the ReLU turns every hidden unit off: the gradient is then
        # 0 for every solution, and no tap can show that it crosses the checkpoint. Dense's biases
        # start at zero, so -x turns on every unit that x turned off.
        x = -x
        value0, grad0, _ = evaluated(program.closed, x, w, {})
    value, grad, _ = evaluated(program.closed, x, w, perturb)
    return Probed(value, grad, value0 + shift, np.prod([CT_SCALE[r] for r in roles]) * grad0, roles)


def saves_as_much(program: Program, remat: int) -> str:
    """Words for a checkpoint whose policy keeps as many bytes of the activations as saving
    everything would (what remains left out is a constant, or one value kept in place of another)."""
    kept, most = program.kept[remat]
    return (f"saves as much for the backward pass as saving every intermediate value would ({kept} "
            f"bytes of the MLP's activations, against {most}), so it recomputes nothing worth "
            "recomputing and saves no memory")


def no_checkpoint_message(program: Program, kind: str) -> str:
    """Why no live applied Dense layer runs inside a checkpoint of `kind` (see calls_inside)
    ('' if one does)."""
    dense = [c for c in program.calls if c.role]
    if not dense:
        return ("no nn.Dense layer was applied while your function ran. Hint: build the MLP from "
                "nn.Dense layers and call model.apply(variables, x).")
    live = [c for c in dense if c.live]
    if not any(c.traced_in or c.remats for c in dense):
        if program.remats:
            return (f"your program holds {program.remats} remat2 equation(s), but no applied Dense "
                    "layer runs inside one: only model.init (or something else) is checkpointed, "
                    f"and the model you apply is not. {LIFTED_HINT}")
        return ("the traced function holds no remat2 (the primitive nn.checkpoint binds): your model "
                f"is not checkpointed, even if its numbers are right. {LIFTED_HINT}")
    if not any(c.remats for c in live):
        return ("the checkpointed model's output is thrown away: once dead code is removed, no "
                "remat2 is left, and the output you return comes from a model that is not "
                f"checkpointed. {LIFTED_HINT}")
    if kind != "any" and not any(c.recomputing for c in live):
        remats = [r for c in live for r in c.remats]
        if any(program.merged[r] for r in remats):
            return ("your checkpoint is made with prevent_cse=False: once compiled, XLA merges its recomputation "
                    "with the forward pass (common-subexpression elimination), so the activations are kept after "
                    "all and no memory is saved. Hint: leave prevent_cse at its default, True (False is meant for "
                    "checkpoints inside a scan): nn.checkpoint(MLP).")
        if not any(program.saves[r] for r in remats):
            inside = sorted({c.role for c in live if c.remats})
            return (f"your checkpoint holds only {' and '.join(inside)}, and a lone Dense layer's "
                    "backward pass needs only its input and kernel, which are kept anyway: the "
                    "checkpoint recomputes nothing and saves no memory. Hint: wrap the whole MLP "
                    "class, nn.checkpoint(MLP), and keep plain nn.Dense layers inside it.")
        # the checkpoints that keep everything (around another, they keep what it would recompute)
        keeping = [r for r in remats if program.kept[r][0] >= program.kept[r][1]] or remats
        return (f"your checkpoint's policy ({', '.join(sorted({program.policies[r] for r in keeping}))}) "
                f"{saves_as_much(program, keeping[0])}: it does what no checkpoint does. "
                "Hint: leave policy out, nn.checkpoint(MLP) saves nothing.")
    if kind == "lifted" and not any(c.lifted for c in live):
        return ("the checkpoint wraps a function around the whole model call (e.g. "
                "jax.checkpoint(model.apply)), not the module: your Dense layers run inside a "
                "remat2, but not inside Linen's nn.checkpoint, which checkpoints the module's own "
                "call (Flax marks the scope of every layer inside it with 'remat()' in its debug "
                "path, and JAX records that it traced Flax's lift). The exercise is Linen's lifted "
                f"transform on the module class. {LIFTED_HINT}")
    return ""


def calls_inside(program: Program, kind: str, remats=None) -> list:
    """The live calls inside a checkpoint: any remat2 ("any"), one that recomputes
    ("recomputing") or Linen's own that recomputes ("lifted"); within `remats` if given."""
    def chosen(c):
        found = c.remats if kind == "any" else c.recomputing if kind == "recomputing" else c.lifted
        return found if remats is None else [r for r in found if r in remats]
    return [c for c in program.calls if c.live and chosen(c)]


def working(worker, kind: str):
    """(program, the live Dense layers inside the checkpoints of `kind`, the probed run), or a
    failed check if there are none."""
    program = read_program(worker)
    dense = [c for c in calls_inside(program, kind) if c.role]
    if not dense:
        fail(no_checkpoint_message(program, kind))
    return program, dense, run_probed(worker, program, calls_inside(program, kind))


def value_message(run: Probed, required: bool = True) -> str:
    """Why the returned output is not what the checkpoint computed ('' if it is). A checkpoint
    without the output layer cannot be asked to make the output: unless `required`, it is not."""
    if SECOND not in run.roles:
        return "" if not required else (
            "only the first Dense layer runs inside the checkpoint; the rest of the model, which "
            f"makes the output, runs outside it. {LIFTED_HINT}")
    if is_close(run.value, run.want_value):
        return ""
    return ("shifting the output of the model call made inside the checkpoint should shift your "
            f"returned output by the same, to {fmt(run.want_value)}, but it came back as "
            f"{fmt(run.value)}: the output you return is not the checkpointed model's (it is "
            "computed beside it, or the checkpointed result is multiplied by zero, masked out or "
            f"averaged with another). {LIFTED_HINT}")


def gradient_message(run: Probed) -> str:
    """Why the gradient does not all cross the checkpointed layers ('' if it does)."""
    if is_close(run.grad, run.want_grad) and not np.allclose(run.want_grad, 0.0):
        return ""
    return (f"the gradient of your output with respect to x should flow, all of it, through the "
            f"checkpointed layers ({' and '.join(run.roles)}): scaling their cotangents inside the "
            f"checkpoint should turn it into {fmt(run.want_grad)}, but it came back as "
            f"{fmt(run.grad)}. The backward pass is where a checkpoint recomputes; a stop_gradient "
            "on its result, or a second model beside it that carries the gradient, leaves the "
            f"checkpoint unused. {LIFTED_HINT}")


@pytest.mark.points(1)
def test_forward_holds_remat2(worker):
    """Dead code removed, a remat2 that recomputes holds Dense layers your output and gradient go through."""
    _, _, run = working(worker, "recomputing")
    message = value_message(run, required=False) or gradient_message(run)
    if message:
        fail(message)


@pytest.mark.points(1)
def test_checkpoint_policy_saves_nothing(worker):
    """Every remat2 around the applied layers saves nothing (the default policy), as measured."""
    program, dense, run = working(worker, "any")
    message = value_message(run, required=False) or gradient_message(run)
    if message:
        fail(message)
    for remat in dict.fromkeys(r for c in dense for r in c.remats):
        saved = program.saves[remat]
        if saved:
            shown = ", ".join(saved[:6]) + (", ..." if len(saved) > 6 else "")
            every = (f"; it {saves_as_much(program, remat)}"
                     if not any(remat in c.recomputing for c in dense) else "")
            fail(f"your checkpoint's policy ({program.policies[remat]}) saves {len(saved)} value(s) for "
                 f"the backward pass ({shown}), measured by differentiating it{every}; the exercise "
                 "asks for the default, which saves nothing and recomputes the MLP. Hint: drop "
                 "policy=, nn.checkpoint(MLP).")


@pytest.mark.points(4)
def test_output_and_gradient_go_through_nn_checkpoint(worker):
    """Shifting the model's output inside nn.checkpoint shifts yours, and all of the gradient crosses it."""
    _, _, run = working(worker, "lifted")
    message = value_message(run) or gradient_message(run)
    if message:
        fail(message)


@pytest.mark.points(3)
def test_nn_checkpoint_wraps_whole_mlp(worker):
    """One nn.checkpoint holds both Dense layers (the MLP class is wrapped) and does the work."""
    program, dense, run = working(worker, "lifted")
    message = value_message(run) or gradient_message(run)
    if message:
        fail(message)
    for remat in dict.fromkeys(r for c in dense for r in c.lifted):
        if {c.role for c in calls_inside(program, "lifted", [remat]) if c.role} == {FIRST, SECOND}:
            return
    inside = sorted({c.role for c in dense})
    fail(f"only {' and '.join(inside)} runs inside nn.checkpoint: the checkpoint holds one layer, "
         "not the MLP, so the other layer's activations are still stored for the backward pass. "
         "Hint: wrap the whole MLP class, nn.checkpoint(MLP), and keep plain nn.Dense layers "
         "inside it.")
