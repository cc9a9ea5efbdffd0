"""Grader for Exercise 9: AdamW by hand with a decay mask, and ZeRO-1 on a 1-D "data" mesh.

Expected values come from the grader's own computation: optax.adamw(..., mask=...) and NumPy
float64 AdamW for the step, a single-device optax.adamw training for the ZeRO-1 runs, and
single-device programs compiled here for the FLOP budget, each a function of the seed marked
@expected (graders/kit/expected.py), as are the rules of init_zero1_state and decay_mask: the
students' copy holds their values on its public seed, not their code. The sizes and hyper-parameters are drawn
from the grading seed, so that some leaves have an axis the mesh divides and some do not, on
meshes of 8, 4 and 2 devices (on 2 with a first layer of 356 to 484 inputs: WIDE_MESH). The learner's functions run in graders/exercises/ex9_zero1_adamw/probes.py:
these checks never call them. decay_mask and adamw_step send back values. init_zero1_state and the
ZeRO-1 step send their programs, traced at the grader's placement on each mesh (graders/kit/program.py,
issue 31): rebuilt here on this process's own devices, run here on the grader's inputs (the step for
every step of the training), and read here: where each value computed here lives, and the collectives,
per-device FLOPs, values computed for the optimizer and psums of the step as compiled here, on every
mesh. init_zero1_state is traced as it is called (probes.init_program): zeros it places with
device=NamedSharding(...) at its own top level keep that placement in its program, and a
jax.set_mesh of the mesh it is called under, which JAX refuses in a trace, is skipped there.
The technique is read only from a step whose run here gives the grader's training. Without
--sandbox the probes run in this process and hand over the traced programs in place of their
encoding (rebuilt; probes.IN_PROCESS), the same programs.
"""

import base64
import dataclasses
import functools
import math
import re
import secrets
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from jax import lax
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from graders.kit import costs, figure_store, hlo, program
from graders.kit import jaxpr as jaxpr_kit
from graders.kit.replies import received
from graders.kit.expected import expected, or_else, recorded_ahead
from graders.kit.numeric import as_array, as_scalar, assert_close, fmt, is_close, rng
from graders.kit.verdicts import CheckFailed, Deferred, Verdict, fail
from graders.exercises.ex9_zero1_adamw.probes import (HANDED, HYPER, IN_PROCESS, PSUM, STATE_KEYS, _layout, mesh,
                                                       placement, psums, replicated, step_inputs)

MESHES = (8, 4, 2)
STEPS = 5
ADAMW_STEPS = 3
LN_EPS = 1e-5
# The model's leaves, in the order jax.tree flattens the stub's params (keys sorted).
PATHS = (("dense1", "bias"), ("dense1", "kernel"), ("dense2", "bias"), ("dense2", "kernel"), ("norm", "scale"))


@dataclass(frozen=True)
class Config:
    d_in: int
    hidden: int
    d_out: int
    batch: int
    lr: float
    b1: float
    b2: float
    eps: float
    wd: float

    def shapes(self) -> dict:
        return {("dense1", "kernel"): (self.d_in, self.hidden), ("dense1", "bias"): (self.hidden,),
                ("norm", "scale"): (self.hidden,), ("dense2", "kernel"): (self.hidden, self.d_out),
                ("dense2", "bias"): (self.d_out,)}

    def hyper(self) -> dict:
        return {k: getattr(self, k) for k in HYPER}


# The mesh whose run draws dense1's kernel wide: over 8,000 values, 5 times and more the largest leaf
# of the other meshes' runs (1,568), so that a step that keeps ZeRO-1 for leaves of the sizes the
# other runs draw and updates larger ones whole is run, and read, on a leaf of that size too.
WIDE_MESH = 2
# Its input widths: 4 more than a multiple of 8, as the others (356 x 24 = 8,544 to 484 x 56 = 27,104).
WIDE_D_IN = (356, 420, 484)


def config(seed: int, n: int | None = None) -> Config:
    """The drawn sizes and hyper-parameters; for the run on n == WIDE_MESH devices dense1's input
    width is drawn from WIDE_D_IN (after every other draw: the rest is the same on every mesh)."""
    r = rng(seed)
    cfg = Config(
        # Multiples of 4, not of 8: dense1's kernel splits along its first axis on 4 and 2 devices
        # and along its second on 8 (the rule is the first axis the data size divides).
        d_in=int(r.choice([12, 20, 28])),
        # Multiples of 8: every hidden-sized axis splits on every mesh.
        hidden=int(r.choice([24, 40, 56])),
        # Odd or 6: dense2's bias splits on no mesh, or on 2 devices only, and stays whole elsewhere.
        d_out=int(r.choice([3, 5, 6, 7])),
        batch=8 * int(r.choice([2, 3])),
        lr=float(10 ** r.uniform(-2.5, -1.5)), wd=float(r.uniform(0.05, 0.3)), **moment_hyper(r))
    wide = int(r.choice(WIDE_D_IN))
    return dataclasses.replace(cfg, d_in=wide) if n == WIDE_MESH else cfg


def moment_hyper(r: np.random.Generator) -> dict:
    """b1, b2 and eps, none of them the usual default (0.9, 0.999, 1e-8): a step that uses the
    defaults instead of the values it is given gets other numbers on every draw."""
    return {"b1": float(r.choice([0.8, 0.85])), "b2": float(r.choice([0.95, 0.98, 0.995])),
            "eps": float(r.choice([1e-7, 1e-6]))}


def adamw_hyper(seed: int) -> dict:
    """Hyper-parameters for the adamw_step checks: a learning rate and a decay large enough that
    decaying the new parameters instead of the old ones (a change of lr * wd relative to the step)
    lies far outside float32's rounding of the step."""
    r = rng(seed)
    return {"lr": float(r.uniform(0.02, 0.08)), "wd": float(r.uniform(0.1, 0.4)), **moment_hyper(r)}


# ---------------------------------------------------------------- trees

def nest(leaves: dict) -> dict:
    tree: dict = {}
    for (layer, name), value in leaves.items():
        tree.setdefault(layer, {})[name] = value
    return tree


def flat(tree) -> dict:
    """{(layer, name): float64 array} of a tree shaped like the model's params."""
    return {path: np.asarray(tree[path[0]][path[1]], np.float64) for path in PATHS}


def shown(path) -> str:
    return f"['{path[0]}']['{path[1]}']"


def draw_params(cfg: Config, r: np.random.Generator) -> dict:
    out = {}
    for path, shape in cfg.shapes().items():
        if path[1] == "kernel":
            value = r.normal(size=shape) / math.sqrt(shape[0])
        elif path[1] == "scale":
            value = 1.0 + 0.2 * r.normal(size=shape)
        else:
            value = 0.3 * r.normal(size=shape)
        out[path] = value.astype(np.float32)
    return out


@expected
def split_axis(shape, n: int):
    """The rule of init_zero1_state: the first axis n divides, or None (replicated)."""
    return next((i for i, d in enumerate(shape) if d % n == 0), None)


def spec_text(shape, n: int) -> str:
    axis = split_axis(shape, n)
    if axis is None:
        return "P()"
    return "P(" + ", ".join(["None"] * axis + ["'data'"]) + ")"


@expected
def own_mask(tree) -> list:
    """The rule of decay_mask on a tree of NumPy arrays: each leaf's bool, in jax.tree's order."""
    return [bool(np.ndim(p) >= 2) for p in jax.tree.leaves(tree)]


# ---------------------------------------------------------------- the grader's own AdamW

def adamw_np(params, grads, state, hp, mask, mistake=None):
    """One AdamW step in NumPy float64 on flat trees ({path: array}); `mistake` computes a known
    wrong idea instead: one of ADAMW_MISTAKES."""
    if mistake == "by_ndim":
        mask, mistake = {p: np.ndim(v) >= 2 for p, v in params.items()}, None
    lr, b1, b2, eps, wd = (hp[k] for k in HYPER)
    count = int(state["count"]) + 1
    t = {"old_count": count - 1, "first_count": 1}.get(mistake, count)
    out, mu, nu = {}, {}, {}
    for path, p in params.items():
        decay = {"decay_all": True, "decay_none": False}.get(mistake, bool(mask[path]))
        g = grads[path] + (wd * p if mistake == "l2" and decay else 0.0)
        mu[path] = b1 * state["mu"][path] + (1 - b1) * g
        nu[path] = b2 * state["nu"][path] + (1 - b2) * g * g
        with np.errstate(divide="ignore", invalid="ignore"):
            c1, c2 = (1.0, 1.0) if mistake == "no_correction" else (1 - b1 ** t, 1 - b2 ** t)
            if mistake == "eps_inside":
                new = p - lr * (mu[path] / c1) / np.sqrt(nu[path] / c2 + eps)
            else:
                new = p - lr * (mu[path] / c1) / (np.sqrt(nu[path] / c2) + eps)
        if decay and mistake != "l2":
            new = new - lr * wd * (new if mistake == "decay_new" else p)
        out[path] = new
    return out, {"mu": mu, "nu": nu, "count": count}


def zero_state(params: dict) -> dict:
    return {"mu": {k: np.zeros_like(v, np.float64) for k, v in params.items()},
            "nu": {k: np.zeros_like(v, np.float64) for k, v in params.items()}, "count": 0}


def run_np(params, grads_list, state, hp, mask, mistake=None, carry=True):
    """ADAMW_STEPS float64 steps; carry=False: the state passed in is reused every step."""
    first = state
    for grads in grads_list:
        params, new = adamw_np(params, grads, state, hp, mask, mistake)
        state = new if carry else first
    return params, state


ADAMW_MISTAKES = {
    "l2": "That is Adam with L2 regularization: the decay was added to the gradient (g + wd * theta), so "
          "it went through the moments and was divided by sqrt(v_hat). AdamW's decay is decoupled: "
          "theta_t = theta' - lr * wd * theta_{t-1}, applied after the Adam step.",
    "decay_new": "That decays the new parameters (theta_t = theta' - lr * wd * theta'); AdamW decays the "
                 "parameters from before the step: theta_t = theta' - lr * wd * theta_{t-1}.",
    "no_correction": "That is Adam without bias correction: divide m by (1 - b1**t) and v by (1 - b2**t), "
                     "with t = count + 1.",
    "old_count": "That corrects with t = count, the count before this step (from a fresh state, 1 - b1**0 = 0 "
                 "divides by zero). t is the count after this step: state['count'] + 1.",
    "first_count": "That corrects every step as if it were the first (t = 1): the count in the state is not "
                   "used, or not incremented. t = state['count'] + 1, and the new state holds that count.",
    "eps_inside": "That adds eps inside the square root, m_hat / sqrt(v_hat + eps): where a gradient is as small "
                  "as eps, the step shrinks by orders of magnitude. AdamW divides by sqrt(v_hat) + eps.",
    "decay_all": "That decays every leaf, biases and norm scales included: the mask was not applied. Decay "
                 "only the leaves where mask is True.",
    "decay_none": "That decays no leaf at all: apply -lr * wd * theta where mask is True.",
    "by_ndim": "That decays the leaves with ndim >= 2, not the leaves the mask marks: adamw_step must follow "
               "the mask it is given (here the grader's own).",
}


ADAMW_STALE = ("That is what AdamW gives when the state is not carried: every step starts from the state passed "
               "to the first. Return the new {'mu', 'nu', 'count'}, and the grader passes it back.")


def adamw_start(seed: int, saved: bool):
    """The start of an adamw_step check: params, gradients and state (float32, flat trees), the
    hyper-parameters and the mask. From a fresh state, or (saved) from one with count > 0."""
    params, grads_list, state = adamw_problem(seed + (2 if saved else 1), config(seed), saved)
    return params, grads_list, state, adamw_hyper(seed), drawn_mask(seed)


def float64_start(params, grads_list, state):
    return (as64(params), [as64(g) for g in grads_list],
            {"mu": as64(state["mu"]), "nu": as64(state["nu"]), "count": state["count"]})


def as_named(params, state) -> dict:
    """A run's (params, state) of flat trees, as data the students' copy can hold."""
    named = lambda t: {"/".join(p): np.asarray(t[p], np.float64) for p in PATHS}  # noqa: E731
    return {"params": named(params), "mu": named(state["mu"]), "nu": named(state["nu"]), "count": int(state["count"])}


def from_named(run: dict):
    back = lambda t: {p: np.asarray(t["/".join(p)], np.float64) for p in PATHS}  # noqa: E731
    return back(run["params"]), {"mu": back(run["mu"]), "nu": back(run["nu"]), "count": run["count"]}


@expected
def own_saved_run(seed: int) -> dict:
    """The grader's own float64 AdamW from the saved state of the adamw_step check (as_named)."""
    params, grads_list, state, hp, mask = adamw_start(seed, saved=True)
    return as_named(*run_np(*float64_start(params, grads_list, state), hp, mask))


@expected
def own_adamw_mistakes(seed: int, saved: bool) -> dict:
    """{mistake: the final (params, state) of that known wrong idea (as_named)}, every one of
    ADAMW_MISTAKES and "stale" (the state not carried), from the start of an adamw_step check: what
    names a wrong answer."""
    params, grads_list, state, hp, mask = adamw_start(seed, saved)
    start = float64_start(params, grads_list, state)
    out = {mistake: as_named(*run_np(*start, hp, mask, mistake)) for mistake in ADAMW_MISTAKES}
    out["stale"] = as_named(*run_np(*start, hp, mask, carry=False))
    return out


def adamw_mistakes(seed: int, saved: bool) -> list:
    """[(final (params, state), message)] of every known wrong idea, from the check's start (none
    where the students' copy holds no recorded value for it: the verdict stands, unnamed)."""
    runs = or_else(lambda: own_adamw_mistakes(seed, saved), {})
    messages = {**ADAMW_MISTAKES, "stale": ADAMW_STALE}
    return [(from_named(runs[mistake]), message) for mistake, message in messages.items() if mistake in runs]


def learner_leaf(tree, path, what: str, shape):
    try:
        value = tree[path[0]][path[1]]
    except (KeyError, TypeError, IndexError):
        fail(f"{what}: expected a tree shaped like params, with {shown(path)}; got {type(tree).__name__}.")
    return as_array(received(value, what, shape), what, shape)


# ---------------------------------------------------------------- decay_mask

def drawn_tree(seed: int):
    """A tree unlike the model's: lists, a tuple, nesting, other names, 0-d to 3-d leaves, and
    1-D leaves named like matrices and the other way round."""
    r = rng(seed)
    a, b, c = (int(v) for v in r.choice([3, 4, 5, 6, 7], size=3, replace=False))
    return {"blocks": [{"w": np.zeros((a, b), np.float32), "gamma": np.zeros((b,), np.float32)},
                       {"kernel": np.zeros((b,), np.float32), "bias": np.zeros((b, a), np.float32)}],
            "embedding": np.zeros((c, a), np.float32),
            "head": (np.zeros((a, c, 2), np.float32), np.zeros((c,), np.float32)),
            "temperature": np.zeros((), np.float32)}


def check_mask(worker, tree, where: str):
    got = worker.decay_mask(tree)
    if not got["same_structure"]:
        fail(f"decay_mask on {where} should return a tree with the structure of params "
             f"({jax.tree.structure(tree)}), got {got['structure']}. Hint: jax.tree.map(lambda p: "
             "p.ndim >= 2, params) keeps the structure; a None leaf removes it.")
    wanted = own_mask(tree)
    leaves = got["leaves"]
    bad = [row for row in leaves if row["value"] is None]
    if bad:
        fail(f"decay_mask on {where}: the leaf at {bad[0]['path']} is a {bad[0]['kind']}, expected a bool. "
             "Hint: return leaf.ndim >= 2 (a Python bool) for every leaf.")
    values = [row["value"] for row in leaves]
    if values == wanted:
        return
    if all(values):
        fail(f"decay_mask on {where} marks every leaf True: decay would apply to biases and norm scales too. "
             "Only weight matrices (ndim >= 2) are decayed.")
    wrong = [(row["path"], row["value"], want) for row, want in zip(leaves, wanted) if row["value"] != want]
    path, value, want = wrong[0]
    why = ("a leaf of 2 or more dimensions is a weight matrix, whatever its name" if want
           else "a leaf of 0 or 1 dimension (a bias, a scale, a scalar) is not decayed, whatever its name")
    fail(f"decay_mask on {where}: the leaf at {path} is {value}, expected {want} ({why}); {len(wrong)} of "
         f"{len(wanted)} leaves are wrong. Hint: decide by the leaf's shape, p.ndim >= 2, not by its name.")


@pytest.mark.points(1)
def test_decay_mask_marks_weight_matrices(worker, seed):
    """decay_mask is True for leaves of ndim >= 2 only, on the model's tree and on a drawn tree."""
    cfg = config(seed)
    check_mask(worker, nest({p: np.zeros(s, np.float32) for p, s in cfg.shapes().items()}), "the model's params")
    check_mask(worker, drawn_tree(seed), "a tree of the grader's own (lists, a tuple, other names)")


# ---------------------------------------------------------------- adamw_step

# Gradient entries kept the same in every step: 0, and a few as small as eps or below, where the
# division by sqrt(v_hat) + eps is decided by eps (and eps inside the square root, or another eps,
# is far off).
EDGE_GRADIENTS = (0.0, 3e-6, -1e-6, 2e-7, -3e-8)


def adamw_problem(seed: int, cfg: Config, saved: bool):
    """params, ADAMW_STEPS gradients and a starting state (float32 values, flat trees)."""
    r = rng(seed)
    params = draw_params(cfg, r)
    grads_list = [{p: r.normal(size=v.shape).astype(np.float32) for p, v in params.items()} for _ in range(ADAMW_STEPS)]
    for grads in grads_list:
        for g in grads.values():
            g.reshape(-1)[:len(EDGE_GRADIENTS)] = EDGE_GRADIENTS[:g.size]
    if not saved:
        return params, grads_list, {k: v if k == "count" else {p: a.astype(np.float32) for p, a in v.items()}
                                    for k, v in zero_state(params).items()}
    state = {"mu": {p: (0.3 * r.normal(size=v.shape)).astype(np.float32) for p, v in params.items()},
             "nu": {p: (0.2 * r.random(size=v.shape) + 0.05).astype(np.float32) for p, v in params.items()},
             "count": int(r.integers(3, 40))}
    return params, grads_list[:2], state


def drawn_mask(seed: int) -> dict:
    """A mask of the grader's own, not decay_mask's: a decayed bias and an undecayed matrix at
    least. Both adamw_step checks use it with the same hyper-parameters, so that the probe compiles
    the learner's step once."""
    r = rng(seed)
    mask = {p: bool(r.integers(2)) for p in PATHS}
    mask[("dense1", "bias")], mask[("dense2", "kernel")] = True, False
    return mask


def send_state(state) -> dict:
    return {"mu": nest(state["mu"]), "nu": nest(state["nu"]), "count": np.int32(state["count"])}


def as64(tree) -> dict:
    return {p: np.asarray(v, np.float64) for p, v in tree.items()}


def check_adamw(runs, seed: int, saved: bool, expected, where: str):
    """The learner's final params (as steps from the initial ones), moments and count against
    `expected` (params, state). A wrong result is named by the known mistake that explains every
    leaf at once (one leaf alone cannot tell "decays nothing" from "decays by ndim")."""
    final = runs[-1]
    if not final["structure_ok"]:
        fail(f"adamw_step's state: mu and nu should have the structure of params. {where}")
    params = adamw_start(seed, saved)[0]
    p64 = as64(params)
    exp_params, exp_state = expected
    # The step itself (new - old) is compared for the params: the decay's timing changes it by
    # lr * wd relative, far beyond float32's rounding of the step, far below the parameters' size.
    parts = [("params", lambda tree, path: tree[path] - p64[path], "Hint: follow the five steps of the module "
              "docstring.", lambda path: f"the step taken by params{shown(path)} {where}")]
    for key, rule in (("mu", "m = b1 * m + (1 - b1) * g"), ("nu", "v = b2 * v + (1 - b2) * g**2")):
        parts.append((key, lambda tree, path: tree[path], f"Hint: {rule}, and return the new moments in the state.",
                      lambda path, key=key: f"state['{key}']{shown(path)} {where}"))
    for key, view, hint, name in parts:
        got = {path: learner_leaf(final[key], path, name(path), params[path].shape) for path in PATHS}
        if key == "params":
            got = {path: value - p64[path] for path, value in got.items()}
        want = {path: view(exp_params if key == "params" else exp_state[key], path) for path in PATHS}
        bad = [path for path in PATHS if not is_close(got[path], want[path])]
        if not bad:
            continue
        wrong = adamw_mistakes(seed, saved)
        for value, message in wrong:
            ideas = {path: view(value[0] if key == "params" else value[1][key], path) for path in PATHS}
            if all(is_close(got[path], ideas[path]) or (np.isnan(got[path]).any() and np.isnan(ideas[path]).any())
                   for path in PATHS):
                fail(f"{name(bad[0])}: expected {fmt(want[bad[0]])}, got {fmt(got[bad[0]])}. {message}")
        assert_close(got[bad[0]], want[bad[0]], name(bad[0]), hint,
                     mistakes=[(view(v[0] if key == "params" else v[1][key], bad[0]), m) for v, m in wrong])
    count = as_scalar(received(final["count"], "the count adamw_step returns"), "the count adamw_step returns")
    if count != exp_state["count"]:
        fail(f"the state's count {where} is {count:g}, expected {exp_state['count']}: each step adds 1 to "
             "state['count'] and returns it.")


def optax_figure(seed: int) -> tuple:
    """(name, key, compute) of the grader's own ADAMW_STEPS steps of optax.adamw(..., mask=...)
    from a fresh state, float32, for graders/kit/figure_store.py."""
    return "ex9 own optax.adamw", (seed,), functools.partial(own_optax_adamw, seed)


@expected
def own_optax_adamw(seed: int) -> dict:
    params, grads_list, _ = adamw_problem(seed + 1, config(seed), saved=False)
    hp = adamw_hyper(seed)
    tree = nest({p: jnp.asarray(v) for p, v in params.items()})
    tx = optax.adamw(hp["lr"], b1=hp["b1"], b2=hp["b2"], eps=hp["eps"], weight_decay=hp["wd"],
                     mask=nest(drawn_mask(seed)))
    state = tx.init(tree)
    update = jax.jit(tx.update)
    for grads in grads_list:
        updates, state = update(nest({p: jnp.asarray(v) for p, v in grads.items()}), state, tree)
        tree = optax.apply_updates(tree, updates)
    adam = state[0]  # ScaleByAdamState of optax's chain
    as_lists = lambda t: {"/".join(k): v.tolist() for k, v in flat(t).items()}  # noqa: E731
    return {"params": as_lists(tree), "mu": as_lists(adam.mu), "nu": as_lists(adam.nu), "count": int(adam.count)}


def own_optax_run(seed: int):
    """The grader's own optax.adamw run: (params, state) as flat trees. It depends on the draw
    alone, so it is kept between runs (graders/kit/figure_store.py)."""
    return from_named(figure_store.stored(*optax_figure(seed)))


@pytest.mark.points(2)
def test_adamw_step_matches_optax_adamw(worker, seed):
    """3 adamw_step calls from a fresh state equal optax.adamw(..., mask=...) on drawn hyper-parameters and mask."""
    params, grads_list, state, hp, mask = adamw_start(seed, saved=False)
    recorded_ahead(lambda: own_adamw_mistakes(seed, False))
    runs = worker.adamw_run(nest(params), [nest(g) for g in grads_list], send_state(state), hp, nest(mask))
    where = f"after {ADAMW_STEPS} steps from a fresh state (lr {hp['lr']:.3g}, wd {hp['wd']:.3g})"
    check_adamw(runs, seed, False, own_optax_run(seed), where)


@pytest.mark.points(1)
def test_adamw_step_continues_from_a_saved_state(worker, seed):
    """2 adamw_step calls from a state with count > 0 and non-zero moments equal float64 AdamW."""
    params, grads_list, state, hp, mask = adamw_start(seed, saved=True)
    recorded_ahead(lambda: own_adamw_mistakes(seed, True))
    runs = worker.adamw_run(nest(params), [nest(g) for g in grads_list], send_state(state), hp, nest(mask))
    where = f"after 2 steps from a saved state (count {state['count']}, the grader's mask)"
    check_adamw(runs, seed, True, from_named(own_saved_run(seed)), where)


# ---------------------------------------------------------------- ZeRO-1 training

def training_problem(seed: int, n: int):
    """The drawn configuration, float32 params and a batch, for the run on n devices."""
    cfg = config(seed, n)
    r = np.random.default_rng([seed, n])
    params = draw_params(cfg, r)
    x = r.normal(size=(cfg.batch, cfg.d_in)).astype(np.float32)
    y = r.normal(size=(cfg.batch, cfg.d_out)).astype(np.float32)
    return cfg, params, x, y


def own_loss(params, x, y):
    """The stub's model and loss, written again here."""
    h = x @ params["dense1"]["kernel"] + params["dense1"]["bias"]
    mean = jnp.mean(h, axis=-1, keepdims=True)
    var = jnp.mean((h - mean) ** 2, axis=-1, keepdims=True)
    h = (h - mean) * lax.rsqrt(var + LN_EPS) * params["norm"]["scale"]
    return jnp.mean((jnp.tanh(h) @ params["dense2"]["kernel"] + params["dense2"]["bias"] - y) ** 2)


def own_tx(hp: dict, tree):
    mask = jax.tree.map(lambda p: np.ndim(p) >= 2, tree)
    return optax.adamw(hp["lr"], b1=hp["b1"], b2=hp["b2"], eps=hp["eps"], weight_decay=hp["wd"], mask=mask)


def training_figure(seed: int, n: int) -> tuple:
    """(name, key, compute) of STEPS steps of the grader's own single-device optax.adamw training
    on the data of the run on n devices, and the same with the state not carried or the gradients
    scaled by n or 1/n (own_training_run): final params and
    moments ({"layer/name": values}) and losses, for graders/kit/figure_store.py."""
    return "ex9 own training", (seed, n), functools.partial(own_training_run, seed, n)


@expected
def own_training_run(seed: int, n: int) -> dict:
    cfg, params, x, y = training_problem(seed, n)
    tree = nest({p: jnp.asarray(v) for p, v in params.items()})
    tx = own_tx(cfg.hyper(), tree)

    @jax.jit
    def step(p, s, scale):
        value, grads = jax.value_and_grad(own_loss)(p, x, y)
        updates, s = tx.update(jax.tree.map(lambda g: g * scale, grads), s, p)
        return optax.apply_updates(p, updates), s, value

    def as_lists(t):
        return {"/".join(k): packed(v) for k, v in flat(t).items()}

    out = {}
    # The right training, the state not carried, and the gradients summed over the n devices where
    # the loss is their mean (n times too large) or averaged twice (n times too small).
    for name, carry, scale in (("right", True, 1.0), ("stale", False, 1.0), ("summed", True, float(n)),
                               ("averaged_twice", True, 1.0 / n)):
        p, s, losses = tree, tx.init(tree), []
        for _ in range(STEPS):
            p, new, value = step(p, s, np.float32(scale))
            s = new if carry else s
            losses.append(float(value))
        out[name] = {"params": as_lists(p), "losses": losses}
        if name in ("right", "stale"):  # the moments of the others are never compared
            out[name].update(mu=as_lists(s[0].mu), nu=as_lists(s[0].nu))
    return out


def packed(value) -> dict:
    """A float64 array as JSON-safe data, its bytes in base64: the run on WIDE_MESH holds tens of
    thousands of values per run, which as JSON numbers take a tenth of a second to read back."""
    value = np.asarray(value, np.float64)
    return {"shape": list(value.shape), "float64": base64.b64encode(value.tobytes()).decode()}


def unpacked(value: dict) -> np.ndarray:
    return np.frombuffer(base64.b64decode(value["float64"]), np.float64).reshape(value["shape"])


def own_training(seed: int, n: int) -> dict:
    """The grader's own training for the run on n devices; it depends on the draw alone, so it
    is kept between runs (graders/kit/figure_store.py)."""
    runs = figure_store.stored(*training_figure(seed, n))
    return {name: {key: got if key == "losses" else {path: unpacked(v) for path, v in got.items()}
                   for key, got in run.items()} for name, run in runs.items()}


def splits(cfg: Config, n: int) -> list:
    """The rule's axis (or None) for every leaf, in the order jax.tree flattens params."""
    shapes = cfg.shapes()
    return [split_axis(shapes[p], n) for p in PATHS]


def train_request(seed: int) -> tuple:
    """What the probe needs to trace the learner's step on every mesh: [n, params, x, y, splits]
    per mesh, and the hyper-parameters."""
    runs = []
    for size in MESHES:
        cfg, params, x, y = training_problem(seed, size)
        runs.append([size, nest(params), x, y, splits(cfg, size)])
    return runs, config(seed).hyper()


@pytest.fixture(scope="session", autouse=True)
def own_figures_ahead(seed):
    """Every figure of the grader's own that this run's draw needs (its optax.adamw run, its
    training on each mesh, its FLOPs), worked out from the start in a process of its own while
    the learner's step is traced and run here: otherwise the first run on a seed would pay
    for them after the learner's. Forked before this process runs any JAX computation."""
    figure_store.ahead([optax_figure(seed), *(training_figure(seed, n) for n in MESHES),
                        *(flops_figure(seed, n) for n in MESHES)])
    yield
    figure_store.stop_ahead()


# ---- the learner's programs, rebuilt, run and read here (graders/kit/program.py) -------------

_JUDGED: dict = {}  # what this process rebuilt, ran and read of the learner's programs, per mesh


def nonce() -> str:
    """This judge's nonce, kept in its own process's probes module (probes.IN_PROCESS): a probe
    that finds it there runs in this process (no --sandbox) and hands its programs over."""
    return IN_PROCESS.setdefault("judge", secrets.token_hex(16))


def rebuilt(message, kind: str, n: int):
    """The program the probe sent (rebuilt on this process's own devices), or the traced program
    itself where the probe ran in this process and handed it over (HANDED); a ProgramError if
    there is none to read. Rebuilt once per kind and mesh."""
    key = ("rebuilt", kind, int(n))
    if key in _JUDGED:
        return _JUDGED[key]
    if isinstance(message, dict) and set(message) == set(HANDED):
        filed = IN_PROCESS.pop((nonce(), kind, int(n)), None)
        closed = program.ProgramError("no program came back") if filed is None else filed[1]
    else:
        try:
            closed = program.decode(message, meshes=True).closed
        except program.ProgramError as exc:
            closed = exc
    _JUDGED[key] = closed
    return closed


def out_shardings(closed, m):
    """Where the step's program puts its results when it is one jit call: the jit's own
    out_shardings (jax.jit(..., out_shardings=...) places its results there whatever their types
    say; a result it leaves unspecified lies as its type says), for the jit this process stages
    the program in. None (the types decide) for any other program."""
    if not jitted(closed):
        return None
    said = closed.eqns[0].params.get("out_shardings", ())
    if not any(isinstance(s, NamedSharding) for s in said):
        return None
    out = []
    for s, v in zip(said, closed.outvars):
        if isinstance(s, NamedSharding):
            out.append(NamedSharding(m, s.spec, memory_kind=s.memory_kind))
        else:
            typed = getattr(v.aval, "sharding", None)
            out.append(NamedSharding(m, typed.spec if isinstance(typed, NamedSharding) else P()))
    return out  # as jit_p.bind gives the results: a list


def shapes_of(values) -> list:
    return [tuple(int(d) for d in getattr(getattr(v, "aval", v), "shape", ())) for v in values]


def held_to(closed, what: str, n: int, ins: list, outs: list):
    """A failed check unless the program takes and gives values of these shapes."""
    if isinstance(closed, program.ProgramError):
        fail(f"the program of {what} on a mesh of {n} devices could not be read: {closed}.")
    if shapes_of(closed.invars) != shapes_of(ins):
        fail(f"the program sent for {what} on {n} devices takes inputs of shapes {shapes_of(closed.invars)}, not "
             f"those the grader gives it: {shapes_of(ins)}.")
    if shapes_of(closed.outvars) != [tuple(s) for s in outs]:
        fail(f"the program sent for {what} on {n} devices gives values of shapes {shapes_of(closed.outvars)}, "
             f"not {[tuple(s) for s in outs]}.")


def could_not(what: str, n: int, exc: Exception):
    fail(f"the grader could not run the program of {what} it rebuilt on {n} devices ({type(exc).__name__}: "
         f"{' '.join(str(exc).split())[:200]}).")


def init_run(worker, seed: int, n: int) -> dict:
    """init_zero1_state's program on n devices, run here on the grader's params placed
    replicated: the keys it returns, and for mu, nu and count their values and where each block
    lives, read from what this process computed."""
    key = ("init", n)
    if key in _JUDGED:
        return _JUDGED[key]
    cfg, params, _, _ = training_problem(seed, n)
    nonce()
    reply = worker.init_program(n, nest(params))
    got = {"keys": reply["keys"]}
    if got["keys"] != sorted(STATE_KEYS):
        return got
    for key in ("mu", "nu"):
        if "structure" in reply.get(key, {}):
            fail(f"init_zero1_state's {key} should have the structure of params, got {reply[key]['structure']}.")
    if "structure" in reply.get("count", {}):
        fail(f"init_zero1_state's count on {n} devices should be an int32 0, got {reply['count']['structure']}.")
    m = mesh(n)
    whole = jax.tree.leaves(replicated(m, nest(params)))
    shapes = [params[p].shape for p in PATHS]
    closed = rebuilt(reply.get("program"), "init", n)
    held_to(closed, "init_zero1_state", n, whole, [()] + shapes + shapes)
    try:
        with jax.set_mesh(m):
            # An init that is one jit call places its results by that jit's out_shardings, as the
            # step's are (see lowered_step).
            body = closed.eqns[0].params["jaxpr"] if jitted(closed) else closed
            outs = jax.jit(program.as_one_call(body, m.abstract_mesh), out_shardings=out_shardings(closed, m))(*whole)
    except Exception as exc:  # noqa: BLE001 (a program JAX's type rules accepted but XLA refuses)
        could_not("init_zero1_state", n, exc)
    count, moments = outs[0], {"mu": outs[1:1 + len(PATHS)], "nu": outs[1 + len(PATHS):]}

    def row(leaf):
        return {"value": np.asarray(leaf), "placed": placement(leaf), "dtype": str(leaf.dtype)}

    for k, leaves in moments.items():
        got[k] = {"leaves": [dict(row(leaf), path=shown(p)) for p, leaf in zip(PATHS, leaves)]}
    got["count"] = row(count)
    _JUDGED[key] = got
    return got


def step_replies(worker, seed: int, on_reply=None) -> dict:
    """The probe's replies: the learner's step traced on every mesh, one call per mesh, all sent
    at once, so that under --sandbox the worker traces a mesh while this process reads the one
    before. `on_reply(n, reply)` is called on each mesh's reply as it comes."""
    if "steps" not in _JUDGED:
        nonce()
        runs, hyper = train_request(seed)
        asked = [(run[0], worker.ahead.step_programs([run], hyper)) for run in runs]
        replies = {}
        for n, read in asked:
            got = read()
            replies.update(got if isinstance(got, dict) else {})  # a mesh with no reply has no program
            if on_reply is not None:
                on_reply(n, replies.get(str(n), {}))
        _JUDGED["steps"] = replies
    return _JUDGED["steps"]


@pytest.fixture(scope="session", autouse=True)
def steps_ahead(worker, seed, own_figures_ahead):
    """The learner's step traced on every mesh before the first check, and its programs rebuilt
    here (each as soon as it comes) and compiled in threads while the checks of the mask and of
    adamw_step run. Whatever the learner's code raises is said by the checks that read the run,
    not here."""
    pool = ThreadPoolExecutor(max_workers=2)
    stopped = []

    def compile_ahead(n, reply):  # rebuilt and lowered here; compiled in threads (XLA's compiler leaves the GIL)
        if "program" not in reply or stopped:
            return
        try:
            job = lowered_step(reply, seed, n)
        except CheckFailed:  # said by the checks that read this mesh's run
            return
        except (Exception, Deferred):  # the checks of the step report it
            stopped.append(n)
            return
        job["future"] = pool.submit(job["lowered"].compile)
        _JUDGED[("lowered", n)] = job

    try:
        step_replies(worker, seed, compile_ahead)
    except (Exception, Deferred):  # a Verdict about the learner's code, or (the students' copy, another
        pass                        # seed) no recorded rule: the checks of the step report it
    pool.shutdown(wait=False)
    yield


def jitted(closed) -> bool:
    """Whether the step's program is one jit call whose results are the step's: a jitted step."""
    return (len(closed.eqns) == 1 and closed.eqns[0].primitive.name in ("jit", "pjit")
            and list(closed.outvars) == list(closed.eqns[0].outvars)
            and list(closed.invars) == list(closed.eqns[0].invars))


def fitted(args, wanted):
    """Each array moved to the layout the compiled step takes it in. What a step returned is fed
    to the next as its values, wherever they lie: where they lie is judged by the checks of the
    layout (step_keeps_params_replicated_and_moments_split), not by a next step refusing them; a
    program holds one layout of its inputs, where the learner's function, called again, would have
    been traced again for another."""
    return [a if a.sharding == w else jax.device_put(a, w) for a, w in zip(args, wanted)]


def lowered_step(reply: dict, seed: int, n: int) -> dict:
    """The step's program rebuilt here, held to the shapes of the grader's inputs, and lowered at
    the grader's placement on n devices (its compile is left to compiled_step, or to a thread)."""
    cfg, params, x, y = training_problem(seed, n)
    m = mesh(n)
    with jax.set_mesh(m):
        start = step_inputs(m, nest(params), x, y, splits(cfg, n))
    ins = jax.tree.leaves(start)
    shapes = [params[p].shape for p in PATHS]
    closed = rebuilt(reply.get("program"), "step", n)
    held_to(closed, "your step", n, ins, shapes + [()] + shapes + shapes + [()])
    try:
        with jax.set_mesh(m):
            # A jitted step is compiled as its own jit: its body staged under its out_shardings,
            # not inside another jit (which would place its results as their types say).
            body = closed.eqns[0].params["jaxpr"] if jitted(closed) else closed
            lowered = jax.jit(program.as_one_call(body, m.abstract_mesh), out_shardings=out_shardings(closed, m)).lower(*ins)
    except Exception as exc:  # noqa: BLE001
        could_not("your step", n, exc)
    return {"closed": closed, "mesh": m, "start": start, "ins": ins, "lowered": lowered}


def compiled_step(reply: dict, seed: int, n: int) -> tuple:
    """(program, mesh, the grader's inputs as a tree and as leaves, the compiled step): from the
    compile steps_ahead started in a thread, or made here."""
    job = _JUDGED.pop(("lowered", n), None)
    if job is None:
        job = lowered_step(reply, seed, n)
    try:
        future = job.get("future")
        executable = future.result() if future is not None else job["lowered"].compile()
    except Exception as exc:  # noqa: BLE001 (what XLA refuses of a program JAX's type rules accepted)
        could_not("your step", n, exc)
    return job["closed"], job["mesh"], job["start"], job["ins"], executable


# ---- the optimizer's work, read from the compiled step's dataflow --------------------------------

# The parse of compiled HLO text (graders/kit/hlo.py, shared with ex7's loop-aware FLOP count).
from graders.kit.hlo import _HLO_ARG, _HLO_ARRAY, _HLO_TRIPS, covering_trips, elements, hlo_computations  # noqa: E402
# Operations whose called computation is a reducer of a few scalars (the operation is counted itself).
_HLO_REDUCERS = frozenset({"reduce", "reduce-window", "scatter", "select-and-scatter", "sort", "map", "all-reduce",
                           "reduce-scatter", "all-reduce-start"})
# The operations that compute values (about one operation per element of their result); moving,
# slicing, gathering or reshaping values computes nothing.
ARITHMETIC = frozenset("""add subtract multiply divide sqrt rsqrt cbrt power exponential exponential-minus-one log
log-plus-one tanh logistic maximum minimum negate abs sign select clamp compare floor ceil round-nearest-even
round-nearest-afz atan2 remainder is-finite reduce dot convolution""".split())


collective_counts = hlo.parsed_collective_counts  # from the parse the dataflow reads


# ---- the FLOPs a program asks for: XLA's count less its own duplicates -------------------------

# The elementwise operations XLA's cost analysis counts as one FLOP per value of their result
# (measured on the CPU backend: square roots, powers, exponentials and tanh are transcendentals,
# not FLOPs; a dot's or a reduction's FLOPs are never duplicated so).
ELEMENTWISE_FLOPS = frozenset("add subtract multiply divide maximum minimum negate abs compare select convert".split())
# Attributes that say where an operation came from or how the backend runs it, not what it computes:
# XLA prints them after every attribute that does (dimensions, slices, directions, ...).
_HLO_NOISE = (", sharding=", ", frontend_attributes=", ", statistics=", ", metadata=", ", backend_config=")


def _what_it_computes(attrs: str) -> str:
    """An instruction's attributes up to the first of _HLO_NOISE."""
    cut = len(attrs)
    for key in _HLO_NOISE:
        at = attrs.find(key, 0, cut)
        cut = at if at >= 0 else cut
    return attrs[:cut]


# Operations that give back their one operand as it is (a tuple's values each flow on as they were;
# a copy's value is its operand's: XLA copies a loop's carried values and fuses a consumer of each copy).
_HLO_SAME = frozenset({"copy", "bitcast", "opt-barrier"})
_HLO_INDEX = re.compile(r"\bindex=(\d+)")


def _whole(flow) -> int:
    """The mask of a value's flow: a tuple's is every element's."""
    return functools.reduce(lambda a, b: a | _whole(b), flow, 0) if isinstance(flow, tuple) else flow


def _joined(a, b):
    """Two flows of one value, element by element where both are tuples of one length."""
    if isinstance(a, tuple) and isinstance(b, tuple) and len(a) == len(b):
        return tuple(_joined(x, y) for x, y in zip(a, b))
    return _whole(a) | _whole(b)


_HLO_CLONE = re.compile(r"(\.clone(\.\d+)?)+$")


def _literal(op) -> tuple:
    """What a constant holds: its literal's text; XLA prints a large literal as {...}, so such a
    constant is told by its name too, less the `.clone.N` XLA gives its copies in each fusion."""
    return (op.args, _HLO_CLONE.sub("", op.name) if "..." in op.args else "")


def numbered(comps: dict, marks: dict | None = None) -> list[tuple]:
    """(operation, value, mask, times, branch) for every operation of a compiled program but
    parameters, in program order, followed into fusions, calls, conditionals and loops (a loop's body
    `times` its trips where XLA knows the trip count, as it does for every scan and fori_loop of
    fixed bounds). `value` numbers what the operation computes: its opcode, result type, attributes
    less _HLO_NOISE and the values of its operands, followed into fusions and calls through their
    parameters (a fusion's value is its root's); the same number twice is the same value computed
    again, as XLA writes when it duplicates a producer into every fusion that consumes it. Inside
    loops and branches each parameter is a value of its own. `mask`: what the value flows from
    (MOMENTS | PARAMS | DATA, from `marks`: the entry parameter's position among the jitted
    function's flattened arguments -> mark), followed through tuples element by element: a loop's
    carried values each keep their own (the loop's body walked until what each carries flows from
    no more), a conditional's branch gets its own operands'. `branch`: the conditionals the
    operation lies in, ((conditional, branch), ...) from the outermost (one branch of each runs).
    `comps`: hlo_computations of the program's text."""
    numbers, out, conditionals = {}, [], iter(range(1 << 62))
    masks = {int(k): v for k, v in (marks or {}).items()}

    def number(key) -> int:
        return numbers.setdefault(key, len(numbers))

    def run(comp: str, given: dict, values: dict, times: float, branch: tuple, into: list) -> tuple:
        flows, named, root = {}, {}, (0, None)
        for op in comps.get(comp, []):
            if op.opcode == "parameter":
                at = int(op.args.strip() or -1)
                arg = _HLO_ARG.search(op.attrs) if comp == "ENTRY" else None
                flow = masks.get(int(arg.group(1)) if arg else at, 0) if comp == "ENTRY" else given.get(at, 0)
                value = values[at] if at in values else number(("parameter", len(numbers)))
            else:
                each = [flows.get(o, 0) for o in op.operands]
                operands = tuple(named[o] if o in named else number(("unknown", comp, o)) for o in op.operands)
                flow, value = functools.reduce(lambda a, b: a | _whole(b), each, 0), None
                if op.opcode == "tuple":  # a tuple's values and flows are its elements'
                    flow, value = tuple(each), operands
                elif op.opcode == "get-tuple-element" and each:
                    at = _HLO_INDEX.search(op.attrs)
                    at = int(at.group(1)) if at else -1
                    flow = each[0][at] if isinstance(each[0], tuple) and 0 <= at < len(each[0]) else flow
                    given = operands[0] if operands else None
                    value = given[at] if isinstance(given, tuple) and 0 <= at < len(given) else None
                elif op.opcode in _HLO_SAME and len(each) == 1:
                    flow = each[0]
                    value = operands[0] if op.opcode == "copy" else None  # a copy is the value it copies
                elif op.called and op.opcode == "while":
                    trips = hlo.known_trips(op) if _HLO_TRIPS.search(op.attrs) else \
                        ranged_trips(comps, op, operands[0] if operands else None)
                    trips = covering_trips(comps, op.called[0]) if trips is None else trips
                    carried = each[0] if each else 0
                    while True:  # until what each carried value flows from grows no more
                        walked = []
                        got, _ = run(op.called[0], {0: carried}, {}, times * trips, branch, walked)
                        grown = _joined(carried, got)
                        if grown == carried:
                            break
                        carried = grown
                    into.extend(walked)
                    flow = carried
                elif op.called and op.opcode == "conditional":
                    conditional, flow = next(conditionals), 0
                    for k, sub in enumerate(op.called):  # branch k's operand follows the index
                        got, _ = run(sub, {0: each[k + 1] if k + 1 < len(each) else flow}, {}, times,
                                     branch + ((conditional, k),), into)
                        flow = got if k == 0 else _joined(flow, got)
                elif op.called and op.opcode not in _HLO_REDUCERS:
                    # A fusion's or call's parameters are its operands.
                    fused = op.opcode in ("fusion", "call")
                    for sub in op.called:
                        f, v = run(sub, dict(enumerate(each)) if fused else {0: flow},
                                   dict(enumerate(operands)) if fused else {}, times, branch, into)
                        flow = f if fused and len(op.called) == 1 else _whole(flow) | _whole(f)
                        value = v if fused and len(op.called) == 1 else None
                if value is None:
                    value = number((op.opcode, re.sub(r"\{[^}]*\}", "", op.kind),
                                    _literal(op) if op.opcode == "constant" else "", _what_it_computes(op.attrs),
                                    operands))
                into.append((op, value, _whole(flow), times, branch))
            flows[op.name], named[op.name] = flow, value
            root = (flow, value) if op.root else root
        return root

    run("ENTRY", {}, {}, 1.0, (), out)
    return out


_HLO_CONDITION = re.compile(r"\bcondition=%([\w.\-]+)")
_HLO_DIRECTION = re.compile(r"\bdirection=(\w+)")
_HLO_INTEGER = re.compile(r"\s*(-?\d+)\s*")
CARRIED = "carried"  # a loop computation's one parameter


def _affine(comps: dict, comp: str, given: dict) -> object:
    """What the root of a loop's condition or body computes, read as integers affine in what the loop
    carries: (element, constant) for the carried element `element` plus a constant ((None, c) for a
    constant), ("compare", direction, lhs, rhs), ("tuple", [...]); None for anything else. Followed into
    fusions. `given`: the computation's parameters' readings."""
    read, root = {}, None
    for op in comps.get(comp, []):
        got, each = None, [read.get(o) for o in op.operands]
        if op.opcode == "parameter":
            got = given.get(int(op.args.strip() or -1))
        elif op.opcode == "get-tuple-element" and each == [CARRIED]:
            at = _HLO_INDEX.search(op.attrs)
            got = (int(at.group(1)), 0) if at else None
        elif op.opcode == "constant" and re.match(r"[su]\d+\[\]", op.kind) and _HLO_INTEGER.fullmatch(op.args):
            got = (None, int(op.args))
        elif op.opcode in ("add", "subtract") and all(isinstance(e, tuple) and len(e) == 2 for e in each[:2]):
            (a, x), (b, y) = each[:2]
            if op.opcode == "add" and (a is None or b is None):
                got = (b if a is None else a, x + y)
            elif op.opcode == "subtract" and b is None:
                got = (a, x - y)
        elif op.opcode == "copy" and len(each) == 1:
            got = each[0]
        elif op.opcode == "compare" and len(each) == 2 and _HLO_DIRECTION.search(op.attrs):
            got = ("compare", _HLO_DIRECTION.search(op.attrs).group(1), *each)
        elif op.opcode == "tuple":
            got = ("tuple", each)
        elif op.opcode == "fusion" and len(op.called) == 1:
            got = _affine(comps, op.called[0], dict(enumerate(each)))
        read[op.name] = got
        root = got if op.root else root
    return root


def ranged_trips(comps: dict, op, carried) -> int | None:
    """The trips of a while loop whose trip count XLA does not know, read from the range its index
    covers: the condition compares a carried integer the body steps by a constant (i < bound,
    i <= bound, or bound > i ...) with a carried one the body leaves as it is, plus constants, and
    the two start from the same value (numbered: `carried` is the loop's operand's, a tuple's
    elements' values), as lax.while_loop from a device's offset to that offset plus a block writes
    it. None where the loop is not so (covering_trips then sizes it)."""
    condition = _HLO_CONDITION.search(op.attrs)
    if condition is None or not op.called or not isinstance(carried, tuple):
        return None
    test = _affine(comps, condition.group(1), {0: CARRIED})
    body = _affine(comps, op.called[0], {0: CARRIED})
    if not (isinstance(test, tuple) and test[0] == "compare" and isinstance(body, tuple) and body[0] == "tuple"):
        return None
    _, direction, lhs, rhs = test
    if direction in ("GT", "GE"):
        direction, lhs, rhs = {"GT": "LT", "GE": "LE"}[direction], rhs, lhs
    steps = body[1]
    if direction not in ("LT", "LE") or not all(isinstance(e, tuple) and len(e) == 2 for e in (lhs, rhs)):
        return None
    (i, a), (j, b) = lhs, rhs
    if i is None or j is None or max(i, j) >= min(len(steps), len(carried)):
        return None
    step, bound = steps[i], steps[j]
    if not (isinstance(step, tuple) and step[0] == i and step[1] > 0) or bound != (j, 0) or carried[i] != carried[j]:
        return None
    span = b - a + (direction == "LE")  # the index runs from v + a while under v + b
    return max(0, -(-span // step[1]))


def duplicated_flops(comps: dict, walked: list | None = None) -> float:
    """The FLOPs XLA's cost analysis counts more than once in a compiled program: an elementwise
    operation (ELEMENTWISE_FLOPS) computing a value already computed (numbered) adds its result's
    size each time after the first. XLA duplicates an elementwise producer into every fusion that
    consumes it (flat moments' update computed again in each fusion that slices them back into
    blocks and in the one that updates the parameters), where the program asks for it once."""
    seen, duplicated = set(), 0.0
    for op, value, *_ in walked if walked is not None else numbered(comps):
        if op.opcode in ELEMENTWISE_FLOPS and value in seen:
            duplicated += elements(op)
        seen.add(value)
    return duplicated


def asked_flops(executable, comps: dict, walked: list | None = None) -> float:
    """Per-device FLOPs of a compiled program as it asks for them: XLA's cost analysis less what
    XLA's fusion duplicated (duplicated_flops; `walked`: numbered(comps, ...) if made already)."""
    return costs.flops(executable) - duplicated_flops(comps, walked)


def work_flops(closed, m, ins, executable, comps: dict, walked: list, marks: dict) -> float:
    """asked_flops of the step's work: for a step that draws random numbers, of a copy that takes
    each draw as an input (program.draws_as_inputs), so the hashing of a dropout mask is not read
    as the optimizer's work while everything computed from the mask is."""
    drawless = program.work_without_draws(closed)
    if drawless is None:
        return asked_flops(executable, comps, walked)
    copy, drawn = drawless
    try:
        with jax.set_mesh(m):
            body = copy.eqns[0].params["jaxpr"] if jitted(copy) else copy
            again = jax.jit(program.as_one_call(body, m.abstract_mesh),
                            out_shardings=out_shardings(closed, m)).lower(*ins, *drawn).compile()
    except Exception:  # noqa: BLE001 (a copy XLA refuses: the step's own count stands)
        return asked_flops(executable, comps, walked)
    comps = hlo_computations(again.as_text())
    return asked_flops(again, comps, numbered(comps, marks))


# What a value flows from: the moments, the parameters, the data (the batch, or for the grader's own
# update the gradient it is given).
MOMENTS, PARAMS, DATA = 1, 2, 4


def optimizer_work(comps: dict, marks: dict, walked: list | None = None) -> float:
    """How many values a device computes in a compiled program's operations that are the
    optimizer's: those that flow from the moments, and those that flow from the parameters but not
    from the data (a decay, a parameter update; not the forward and backward passes). `marks`: the
    entry parameter's position among the jitted function's flattened arguments -> MOMENTS, PARAMS
    or DATA. Followed through fusions, calls, conditionals and loops (a loop's body counted once per
    trip where XLA knows the trip count, as it does for every scan and fori_loop of fixed bounds):
    a gradient's forward and backward passes, rematerialised, or accumulated over micro-batches in a
    loop, are never counted, whatever they cost. Each value is counted once (numbered), however
    often XLA's fusion computes it again. A conditional counts as its heaviest branch: one runs (a
    whole update in any branch is still a whole update). `comps`: hlo_computations of the
    program's text."""
    counted, work = set(), {}
    for op, value, mask, times, branch in walked if walked is not None else numbered(comps, marks):
        if op.opcode in ARITHMETIC and (mask & MOMENTS or (mask & PARAMS and not mask & DATA)) and value not in counted:
            counted.add(value)
            work[branch] = work.get(branch, 0.0) + times * elements(op)
    return _heaviest(work, ())


def _heaviest(work: dict, at: tuple) -> float:
    """The work done at a place in the conditionals (`branch` of numbered) and, of each
    conditional directly inside it, in its heaviest branch."""
    inside = {}
    for branch in work:
        if len(branch) > len(at) and branch[:len(at)] == at:
            conditional, k = branch[len(at)]
            inside.setdefault(conditional, set()).add(k)
    return work.get(at, 0.0) + sum(max(_heaviest(work, at + ((c, k),)) for k in ks) for c, ks in inside.items())


def argument_marks(args, data) -> dict:
    """{position among the flattened arguments: MOMENTS, PARAMS or DATA}: the leaves of every 'mu'
    and 'nu' (a dict's keys or a state's fields) are the moments, those of args[0] the parameters,
    those of the arguments numbered in `data` the data."""
    marks, at = {}, 0
    for i, arg in enumerate(args):
        for path, _ in jax.tree_util.tree_flatten_with_path(arg)[0]:
            if any(getattr(k, "key", getattr(k, "name", None)) in ("mu", "nu") for k in path):
                marks[at] = MOMENTS
            elif i == 0:
                marks[at] = PARAMS
            elif i in data:
                marks[at] = DATA
            at += 1
    return marks




# ---- loops and rematerialisation: what XLA's cost analysis does not count as a step computes it

LOOPS = frozenset({"scan", "while"})


def looped(jaxpr) -> bool:
    """Whether a program holds a loop (scan, fori_loop, while_loop) or a rematerialised part
    (jax.checkpoint), through every nesting: XLA's cost analysis counts a loop's body once, and a
    rematerialised forward pass as more work, so the FLOPs of such a program are not its step's."""
    return any(eqn.primitive.name in LOOPS or jaxpr_kit.is_a(eqn, "checkpoint") for eqn in jaxpr_kit.walk(jaxpr))


def judged_run(worker, seed: int, n: int) -> dict:
    """STEPS steps of the learner's step program, rebuilt and run here from the grader's own
    placement: every loss, where params and moments live after every step (read from the arrays
    computed here), the final params and moments; and what the program compiled here holds: its
    collectives, per-device FLOPs (of a program without loops or checkpoints), the values it
    computes that are the optimizer's, and the psums and psum_scatters written into it."""
    reply = step_replies(worker, seed).get(str(n), {})
    if "error" in reply:
        return reply
    if "structure" in reply:
        fail(reply["structure"])
    closed, m, start, ins, executable = compiled_step(reply, seed, n)
    found = {"losses": [], "layouts": []}
    if not jitted(closed):
        found["not_jitted"] = "function"
    else:
        text = executable.as_text()
        comps = hlo_computations(text)
        found["collectives"] = collective_counts(comps)
        found["collective_shapes"] = [[op, list(shape)] for op, shape in hlo.collective_shapes(text)]
        marks = argument_marks(tuple(start), data=(2, 3))
        walked = numbered(comps, marks)  # read by the FLOPs and by the optimizer's values
        found["flops"] = None if n not in FLOP_MESHES or looped(closed.jaxpr) else work_flops(
            closed, m, ins, executable, comps, walked, marks)
        found["psums"] = psums(closed.jaxpr)
        for row, source in zip(found["psums"], psum_sources(closed.jaxpr, marks)):
            row["updated"] = source & UPDATED == UPDATED
        found["scatters"] = scatters(closed.jaxpr)
        found["all_to_all_gathered"] = all_to_all_gathered(closed.jaxpr)
        found["optimizer_work"] = optimizer_work(comps, marks, walked)
    reference = start[0]
    out_tree = jax.tree.structure((reference, start[1], 0))
    p, s = start[0], start[1]
    args = ins
    for i in range(STEPS):
        try:
            with jax.set_mesh(m):
                outs = executable(*(fitted(args, executable.input_shardings[0]) if i else args))
        except Exception as exc:  # noqa: BLE001 (what a step returned that the next cannot take)
            if i == 0:
                could_not("your step", n, exc)
            found["stopped"] = {"step": i + 1, "verdict": [
                "failed", f"your step's program does not take what it returned: the grader ran it again on step "
                f"{i}'s params and state and it refused them ({type(exc).__name__}: "
                f"{' '.join(str(exc).split())[:160]})."]}
            break
        p, s, loss = jax.tree.unflatten(out_tree, outs)
        found["losses"].append(np.asarray(loss))
        found["layouts"].append(_layout(p, s, reference))
        args = jax.tree.leaves((p, s, start[2], start[3]))
    found["params"] = jax.tree.map(np.asarray, p)
    found["params_structure"] = str(jax.tree.structure(p))
    for key in ("mu", "nu"):
        found[key] = jax.tree.map(np.asarray, s[key])
    return found


def run(worker, seed: int, n: int) -> dict:
    """The learner's STEPS-step run on n devices, as this process ran and read it (compiled and
    read on every mesh): every check of the step reads this one run. What the learner's
    code raised on this mesh ends the check, as it would have had it been raised here."""
    key = ("run", n)
    if key not in _JUDGED:
        try:
            _JUDGED[key] = judged_run(worker, seed, n)
        except Verdict as verdict:
            _JUDGED[key] = {"error": [verdict.outcome, verdict.message]}
        except CheckFailed as failed:  # the same failure for every check that reads this run
            _JUDGED[key] = {"error": ["failed", str(failed)]}
    got = _JUDGED[key]
    if "error" in got:
        raise Verdict(*got["error"])
    return got


def stopped(got: dict, n: int) -> None:
    """A failed check (or "not attempted") with what a later step of the run raised, if one did."""
    if "stopped" in got:
        outcome, message = got["stopped"]["verdict"]
        if outcome == "not_attempted":
            raise Verdict(outcome, message)
        fail(f"step {got['stopped']['step']} on {n} devices, given what step {got['stopped']['step'] - 1} "
             f"returned: {message}")


STALE = ("That is what training gives when the optimizer state is not carried from step to step: the step "
         "returns the state it was given. Hint: return the state adamw_step returned.")
# Sharded and single-device float32 add each gradient's terms in another order, and AdamW divides
# by sqrt(v_hat): where a gradient entry is near 0, a step can turn that rounding into a sizeable
# part of the learning rate. Measured over 40 draws and every mesh, on the reference and on right
# solutions written under jit and with AdamW in another arithmetic order: parameters within
# lr / 540 of the grader's own (1.1e-5 of the largest parameter), losses within 8.3e-7 relative.
# A state not carried moves some parameter by at least 3.2 * lr and some loss by at least 9.1e-4
# relative (180 draws). The bounds lie between: a tenth of the learning rate for the parameters,
# float32's RTOL (1e-4) for the losses.
# On WIDE_MESH's run (a kernel of 8,544 to 27,104 values; seeds 20261130, 7 and 424242,
# the reference and tests/right): the reference's parameters within 3.6e-5 of the learning rate.
# There gradients summed over the devices (n times too large) move some parameter by 0.13 of the
# learning rate (eps decides the step where a gradient is tiny): computes_the_training compares
# with the grader's own run of that mistake instead of relying on Adam's step not seeing it.
LR_SHARE = 0.1
# A named mistake's run (the state not carried above all) takes Adam's first step again and again, whose
# update g / (|g| + eps) swings a gradient entry of eps's size by up to the learning rate, and which way
# it swings is the devices' summation order's, not the learner's: the learner's stale run on WIDE_MESH
# was 0.138 of the learning rate from the grader's own at seed 20261130 on an AMD EPYC (0.000 on 4 and 8
# devices), while its losses matched to RTOL. The mistakes' runs are 5 to 7 learning rates from the right
# one and from each other, so a whole learning rate still tells them apart.
MISTAKE_LR_SHARE = 1.0
# The moments follow the gradients, which move with the parameters: measured as above, within
# 1.4e-5 of their largest entry. A gradient summed over N devices instead of averaged (N >= 2) is
# off by 100% or more.
MOMENT_RTOL = 1e-3


def computes_the_training(got: dict, seed: int, n: int) -> None:
    """A failed check unless the run the judge made of the learner's program has the grader's
    losses and params after every step (or a named mistake's: the state not carried; the gradients
    n times too large or too small, which Adam's step hardly sees but where eps decides it): the
    technique is read only from a program that computes the training, never from one that has its
    marks and computes something else."""
    stopped(got, n)
    cfg, _, _, _ = training_problem(seed, n)
    own = own_training(seed, n)
    losses = [np.asarray(v, np.float64).reshape(()) if np.size(v) == 1 else np.nan for v in got["losses"]]
    for name in ("right", "stale", "summed", "averaged_twice"):
        want = own[name]
        share = LR_SHARE if name == "right" else MISTAKE_LR_SHARE
        if len(losses) == STEPS and is_close(losses, want["losses"]) and got["params"] is not None and all(
                is_close(np.asarray(got["params"][p[0]][p[1]]), want["params"]["/".join(p)], rtol=0.0,
                         atol=share * cfg.lr) for p in PATHS):
            return
    fail(f"your step's program, run by the grader on {n} devices, does not give the grader's losses and params "
         f"after {STEPS} steps (see zero1_training_matches_single_device): the grader reads ZeRO-1's placements, "
         "collectives and FLOPs only from a step that computes the training.")


@pytest.mark.points(3)
def test_zero1_training_matches_single_device(worker, seed):
    """5 ZeRO-1 steps on 8, 4 and 2 devices give the grader's single-device optax.adamw params, moments and losses."""
    for n in MESHES:
        got = run(worker, seed, n)
        stopped(got, n)
        cfg, params, _, _ = training_problem(seed, n)
        own = own_training(seed, n)
        where = f"after {STEPS} steps on {n} devices"
        hint = ("Hint: the gradient of the given loss over the whole batch (each device's gradient of its own "
                "rows' mean, summed over the devices and divided by their number), reduce-scattered, then "
                "adamw_step on each block with the hyper-parameters make_zero1_step got.")
        losses = [as_scalar(received(v, f"the loss of step {i + 1}"), f"the loss of step {i + 1}")
                  for i, v in enumerate(got["losses"])]
        assert_close(losses, own["right"]["losses"], f"the {STEPS} losses {where}", hint,
                     mistakes=[(own["stale"]["losses"], STALE)])
        if got["params"] is None:
            fail("step should return params with the structure of the params passed in, got "
                 f"{got['params_structure']}.")
        for path in PATHS:
            key = "/".join(path)
            what = f"params{shown(path)} {where}"
            value = learner_leaf(got["params"], path, what, params[path].shape)
            assert_close(value, own["right"]["params"][key], what, hint,
                         mistakes=[(own["stale"]["params"][key], STALE)], rtol=0.0, atol=LR_SHARE * cfg.lr)
        # AdamW's step hardly moves when every gradient is scaled alike; its moments do.
        for moment, power in (("mu", 1), ("nu", 2)):
            if got[moment] is None:
                fail(f"the step's state['{moment}'] {where} should have the structure of params.")
            for path in PATHS:
                key = "/".join(path)
                what = f"state['{moment}']{shown(path)} {where}"
                want = np.asarray(own["right"][moment][key])
                scaled = [(want * n ** power, f"That is the moment of gradients {n} times too large: the gradients "
                           f"are summed over the {n} devices where the loss is their mean. Hint: divide the "
                           "psum_scatter by the axis size (or average the loss over the whole batch)."),
                          (want / n ** power, f"That is the moment of gradients {n} times too small: the mean over "
                           "the devices was taken twice. Hint: a psum_scatter of each device's gradient of its own "
                           "rows' mean, divided once by the axis size.")]
                assert_close(learner_leaf(got[moment], path, what, params[path].shape), want, what, hint,
                             mistakes=scaled + [(own["stale"][moment][key], STALE)], rtol=MOMENT_RTOL)


# ---------------------------------------------------------------- placements

@functools.cache
def device_ids(n: int) -> tuple:
    return tuple(int(d.id) for d in jax.devices()[:n])


def blocks_of(shape, n: int, axis) -> list:
    """Where each block lives when a leaf is split along `axis` over n devices (None: replicated):
    rows of the device's id, then start and stop along every axis, as a probe's placement has them."""
    rows = []
    for i, dev in enumerate(device_ids(n)):
        row = [dev]
        for a, d in enumerate(shape):
            k = d // n if a == axis else d
            start = i * k if a == axis else 0
            row += [start, start + k]
        rows.append(row)
    return sorted(rows)


def layout(placed: dict, shape, n: int):
    """What a probe's placement says: ("split", axis), ("replicated",), or ("other", words)."""
    if placed.get("blocks") is None:
        return ("other", f"a {placed.get('kind')}, not an array placed on the mesh")
    if tuple(placed["shape"]) != tuple(shape):
        return ("other", f"of shape {tuple(placed['shape'])}, not {tuple(shape)}")
    blocks = np.asarray(placed["blocks"]).tolist()
    if blocks == blocks_of(shape, n, None):
        return ("replicated",)
    for axis, d in enumerate(shape):
        if d % n == 0 and blocks == blocks_of(shape, n, axis):
            return ("split", axis)
    devices = sorted({row[0] for row in blocks})
    if devices != sorted(device_ids(n)):
        return ("other", f"on devices {devices}, not on the mesh's {n}")
    return ("other", f"placed {placed['spec']}")


def as_spec(found, ndim: int) -> str:
    if found[0] == "replicated":
        return "P()"
    if found[0] == "split":
        return "P(" + ", ".join(["None"] * found[1] + ["'data'"]) + ")"
    return found[1]


def check_moment(placed, shape, n: int, what: str):
    """A moment's placement against the rule, with the usual ways of getting it wrong named."""
    want = split_axis(shape, n)
    found = layout(placed, shape, n)
    expected = ("replicated",) if want is None else ("split", want)
    if found == expected:
        return
    full = int(np.prod(shape)) * 4
    why = (f"axis {want} (size {shape[want]}) is the first that {n} divides" if want is not None
           else f"no axis of {shape} is a multiple of {n}")
    rule = f"expected {spec_text(shape, n)}: {why}"
    if found == ("replicated",):
        fail(f"{what} is replicated: every device holds all {full} bytes of it, as optax.adam().init gives for "
             f"replicated parameters, where ZeRO-1 keeps {full // n} bytes (1/{n}) on each device ({rule}). "
             "Hint: jax.device_put(zeros, NamedSharding(mesh, spec)) with the spec of the rule.")
    if found[0] == "split":
        fail(f"{what} is split along axis {found[1]} ({as_spec(found, len(shape))}); {rule}. Each device does hold "
             "1/N of it, but along another axis than the rule's, so no step written for the rule can use it.")
    fail(f"{what} is {found[1]}; {rule}, {full // n if want is not None else full} bytes per device.")


@pytest.mark.points(3)
def test_init_zero1_state_splits_the_moments(worker, seed):
    """init_zero1_state on 8, 4 and 2 devices: zero moments holding 1/N per device along the rule's axis, count 0."""
    for n in MESHES:
        cfg, params, _, _ = training_problem(seed, n)
        got = init_run(worker, seed, n)
        if got["keys"] != sorted(("mu", "nu", "count")):
            fail(f"init_zero1_state should return a dict with keys 'mu', 'nu' and 'count', got {got['keys']}.")
        for key in ("mu", "nu"):
            if "leaves" not in got[key]:
                fail(f"init_zero1_state's {key} should have the structure of params, got {got[key]['structure']}.")
            for path, row in zip(PATHS, got[key]["leaves"]):
                shape = params[path].shape
                what = f"init_zero1_state's {key}{shown(path)} on {n} devices"
                if row["dtype"] != "float32":
                    fail(f"{what} is {row['dtype']}, expected float32 (Adam's moments in the parameters' dtype).")
                assert_close(received(row["value"], what, shape), np.zeros(shape), what,
                             "Hint: the moments start at zero.")
                check_moment(row["placed"], shape, n, what)
                if split_axis(shape, n) is not None and row["placed"]["bytes"] * n != int(np.prod(shape)) * 4:
                    fail(f"{what} holds {row['placed']['bytes']} bytes on a device, expected 1/{n} of "
                         f"{int(np.prod(shape)) * 4}.")
        count = got["count"]
        what = f"init_zero1_state's count on {n} devices"
        if count["dtype"] != "int32" or as_scalar(received(count["value"], what), what) != 0:
            fail(f"{what} should be an int32 0, got {count['dtype']} {count['value']!r}.")
        if layout(count["placed"], (), n) != ("replicated",):
            fail(f"{what} is {layout(count['placed'], (), n)[-1]}; expected it replicated on the mesh, "
                 "jax.device_put(jnp.zeros((), jnp.int32), NamedSharding(mesh, P())).")


@pytest.mark.points(2)
def test_step_keeps_params_replicated_and_moments_split(worker, seed):
    """After every step on 8, 4 and 2 devices, params are replicated and the moments split as they came in."""
    for n in MESHES:
        got = run(worker, seed, n)
        cfg = config(seed, n)
        shapes = cfg.shapes()
        if got["layouts"] and all(rows["params"] is not None for rows in got["layouts"]):
            computes_the_training(got, seed, n)
        for i, rows in enumerate(got["layouts"]):
            when = f"after step {i + 1} on {n} devices"
            if rows["params"] is None or rows["mu"] is None or rows["nu"] is None:
                fail(f"{when}, the step returned params or moments without the structure of params.")
            for path, row in zip(PATHS, rows["params"]):
                found = layout(row["placed"], shapes[path], n)
                if found == ("replicated",):
                    continue
                if found[0] == "split":
                    fail(f"{when}, params{shown(path)} is left split, {as_spec(found, len(shapes[path]))}: the updated "
                         "blocks were not all-gathered, so the next forward pass has no whole parameters. Hint: "
                         "lax.all_gather(block, 'data', axis=axis, tiled=True) in shard_map, or "
                         "jax.reshard(p, P()) under jit.")
                fail(f"{when}, params{shown(path)} is {found[1]}; expected it replicated on the mesh, P().")
            for key in ("mu", "nu"):
                for path, row in zip(PATHS, rows[key]):
                    shape = shapes[path]
                    found = layout(row["placed"], shape, n)
                    want = split_axis(shape, n)
                    if found == (("replicated",) if want is None else ("split", want)):
                        continue
                    if found == ("replicated",):
                        fail(f"{when}, state['{key}']{shown(path)} comes back replicated, expected "
                             f"{spec_text(shape, n)} as it came in: the moments were gathered inside the step and "
                             "kept whole, so ZeRO-1 saves no memory. Hint: update each device's block and return "
                             "the blocks.")
                    check_moment(row["placed"], shape, n, f"{when}, state['{key}']{shown(path)}")
            if layout(rows["count"], (), n) != ("replicated",):
                fail(f"{when}, state['count'] is {layout(rows['count'], (), n)[-1]}; expected an int32 scalar "
                     "replicated on the mesh.")
        stopped(got, n)


# ---------------------------------------------------------------- the compiled step

def split_leaves(cfg: Config, n: int) -> list:
    shapes = cfg.shapes()
    return [(p, shapes[p]) for p in PATHS if split_axis(shapes[p], n) is not None]


def compiled_run(worker, seed: int, n: int) -> dict:
    """The run on n devices, with what its compiled step holds; a failed check if the step is
    not a jitted function, whose compiled program could not be read. The technique is read on
    every mesh the numbers are checked on."""
    got = run(worker, seed, n)
    computes_the_training(got, seed, n)
    if "not_jitted" in got:
        fail(f"make_zero1_step returned a {got['not_jitted']}, not a jitted function, so the grader cannot read "
             "the program it compiles. Hint: decorate the step with @jax.jit, or return "
             "jax.jit(step, out_shardings=...).")
    return got


def collectives_note(got, note, n: int):
    counts = ", ".join(f"{k} {v}" for k, v in got["collectives"].items() if v) or "none"
    note(f"collectives of your compiled step on {n} devices: {counts}")


SCATTER = frozenset({"reduce_scatter", "psum_scatter"})


def scatters(program) -> list[int]:
    """How many values each psum_scatter of a traced program takes on a device (its operands
    together), through every nesting."""
    return [sum(int(np.prod(getattr(v.aval, "shape", ()))) for v in eqn.invars)
            for eqn in jaxpr_kit.walk(program) if eqn.primitive.name in SCATTER]


# Operations that only move or reshape values: what flows through them is the values it came from.
RESHAPING = frozenset({"reshape", "transpose", "squeeze", "expand_dims", "broadcast_in_dim", "convert_element_type",
                       "copy", "copy_p", "moveaxis", "pvary", "pcast", "mul", "div"})
REDUCING = frozenset({"reduce_sum", "reduce_max", "reduce_min"})


def _jaxprs(jaxpr):
    """jaxpr and every jaxpr nested in it."""
    yield jaxpr
    for eqn in jaxpr.eqns:
        for sub in jaxpr_kit.sub_jaxprs(eqn):
            yield from _jaxprs(sub)


def all_to_all_gathered(program) -> int:
    """How many values the all_to_alls of a traced program leave each device holding whole, through
    every nesting: an all_to_all brings each device one block from every device (its result, as
    many values as it sends). Its result is a reduce-scatter's when every use of it (through
    reshapes, transposes and scalings) adds the blocks received up (a reduction): each device then
    ends up with one block. Otherwise it has gathered its result's values, whatever it gathers
    (new parameters, moments, gradients), as an all-gather would."""
    total = 0
    for jaxpr in _jaxprs(program):
        uses = {}
        for eqn in jaxpr.eqns:
            for v in eqn.invars:
                if not jaxpr_kit._is_literal(v):
                    uses.setdefault(v, []).append(eqn)
        outs = {v for v in jaxpr.outvars if not jaxpr_kit._is_literal(v)}
        for eqn in jaxpr.eqns:
            if eqn.primitive.name != "all_to_all":
                continue
            reduced, todo, seen = True, list(eqn.outvars), set()
            while todo and reduced:
                v = todo.pop()
                if v in seen:
                    continue
                seen.add(v)
                if v in outs:
                    reduced = False
                for use in uses.get(v, []):
                    if use.primitive.name in REDUCING:
                        continue
                    if use.primitive.name in RESHAPING:
                        todo.extend(use.outvars)
                    else:
                        reduced = False
            if not reduced:
                total += sum(int(np.prod(getattr(v.aval, "shape", ()))) for v in eqn.outvars)
    return total


def psum_sources(jaxpr, marks: dict) -> list[int]:
    """For each psum of a traced program, in the order probes.psums lists them (depth first): what
    its operands flow from (MOMENTS | PARAMS | DATA, from `marks`: the program's input position ->
    mark). Followed position by position into a nested jit, shard_map or checkpoint; into a loop or
    a conditional every inner input is taken to flow from all the outer ones."""
    out = []

    def run(jx, given: list) -> list:
        flows = {v: m for v, m in zip(jx.invars, given)}

        def of(v):
            return 0 if jaxpr_kit._is_literal(v) else flows.get(v, 0)

        for eqn in jx.eqns:
            ins = [of(v) for v in eqn.invars]
            every = functools.reduce(lambda a, b: a | b, ins, 0)
            if eqn.primitive.name in PSUM:
                out.append(every)
            subs = list(jaxpr_kit.sub_jaxprs(eqn))
            if len(subs) == 1 and len(subs[0].invars) == len(ins):
                inner = run(subs[0], ins)
                outs = inner if len(inner) == len(eqn.outvars) else [functools.reduce(lambda a, b: a | b, inner, every)] * len(eqn.outvars)
            else:
                held = every
                for sub in subs:
                    for m in run(sub, [every] * len(sub.invars)):
                        held |= m
                outs = [held] * len(eqn.outvars)
            flows.update(zip(eqn.outvars, outs))
        return [of(v) for v in jx.outvars]

    run(jaxpr, [marks.get(i, 0) for i in range(len(jaxpr.invars))])
    return out


# A psum of what flows from both the parameters and the moments sums updated values (new parameter
# blocks written into zeros the leaf's size: a gather), not a gradient: the gradient flows from the
# parameters and the data alone, the moments at rest from the moments alone.
UPDATED = MOMENTS | PARAMS


def whole_gradient_summed(cfg: Config, shape, n: int) -> str | None:
    """What a psum of an operand of this shape sums whole on n devices, in words, or None
    when it may be right. Judged by how many values it sums, not by its shape: a gradient reshaped,
    raveled or with its axes moved is summed whole all the same. A right step sums whole only the
    leaves the mesh splits on no axis (all of them at once at most) and its loss, so anything
    larger that holds a split leaf's worth of values (the smallest split leaf's, or more) is one."""
    split = split_leaves(cfg, n)
    size = int(np.prod(shape))
    kept = sum(int(np.prod(s)) for p, s in cfg.shapes().items() if split_axis(s, n) is None)
    if not split or size <= kept + 1 or size < min(int(np.prod(s)) for _, s in split):
        return None
    same = next((p for p, s in split if tuple(s) == tuple(shape)), None)
    if same is not None:
        return f"params{shown(same)}, whole"
    alike = next((p for p, s in split if int(np.prod(s)) == size), None)
    if alike is not None:
        return f"the {size} values of params{shown(alike)}, whole, in another shape"
    if size >= sum(int(np.prod(s)) for _, s in split):
        return "all split leaves, flattened"
    return f"{size} values, a split leaf's worth or more"


# What the psums and psum_scatters written in a step bring each device, summed: a ZeRO-1 step sums
# whole only the leaves the mesh splits on no axis and its loss (and maybe a few scalars), and
# receives 1/N of every split leaf's gradient; a step that sums the whole gradient receives all
# of it, however it cuts it (psums of small pieces, a psum_scatter of N stacked copies). The bound
# on what it receives of the split leaves is the geometric middle of the two: sqrt(N) times the
# 1/N share, either way (on 2 devices 0.71 of the split leaves' values).
RECEIVED_SLACK = math.sqrt


GRADIENT_HINT = ("Hint: differentiate lax.pcast(params, 'data', to='varying'), then lax.psum_scatter(g, 'data', "
                 "scatter_dimension=axis, tiled=True) for each split leaf.")


@pytest.mark.points(2)
def test_gradients_are_not_summed_whole(worker, note, seed):
    """Your traced step psums no whole gradient of a leaf ZeRO-1 splits, in any shape (psum, then a slice)."""
    for n in MESHES:
        cfg = config(seed, n)
        got = compiled_run(worker, seed, n)
        collectives_note(got, note, n)
        gradients = [row for row in got["psums"] if not row.get("updated")]
        for row in gradients:
            for shape in map(tuple, row["shapes"]):
                summed = whole_gradient_summed(cfg, shape, n)
                if summed:
                    fail(f"your traced step sums a whole gradient across devices: a {row['said']} over {row['axes']} "
                         f"of shape {shape} ({summed}) inside your shard_map on {n} devices. A gradient all-reduced "
                         "whole and then sliced: every device receives and holds the whole sum, and an all-reduce "
                         "moves twice the data of a reduce-scatter, though each device updates 1/N of it. JAX adds "
                         "such a psum for you when you differentiate a replicated input of a shard_map. "
                         + GRADIENT_HINT)
        split = sum(int(np.prod(s)) for _, s in split_leaves(cfg, n))
        kept = sum(int(np.prod(s)) for s in cfg.shapes().values()) - split
        summed = sum(int(np.prod(shape)) for row in gradients for shape in row["shapes"])
        received = summed + sum(got["scatters"]) / n
        if split and received - kept - 1 > RECEIVED_SLACK(n) * split / n:
            fail(f"your traced step's psums and psum_scatters bring each device {received:,.0f} summed values on {n} "
                 f"devices, where ZeRO-1 brings {kept + 1 + split / n:,.0f} (the {kept} values of the leaves no axis "
                 f"of which {n} divides, the loss, and 1/{n} of the {split} values of the split leaves): the whole "
                 "gradient is summed on every device, in pieces or as stacked copies, then sliced. Every device "
                 "receives the whole sum, though it updates 1/N of it. " + GRADIENT_HINT)
        if got["collectives"]["reduce-scatter"] == 0 and not got["psums"] and n == MESHES[0]:
            note("your step leaves the gradients' reduction to the compiler (shardings under jit), which this check "
                 "does not judge: it reads the psums you write in a shard_map. XLA on CPU writes a reduce-scatter "
                 "asked for by shardings as an all-reduce followed by each device's slice; GPU and TPU compilers "
                 "turn that pair into a reduce-scatter.")


@pytest.mark.points(2)
def test_only_the_updated_parameters_are_all_gathered(worker, note, seed):
    """The compiled step all-gathers each split parameter once and nothing else (not the moments or gradients)."""
    for n in MESHES:
        cfg = config(seed, n)
        got = compiled_run(worker, seed, n)
        collectives_note(got, note, n)
        split = split_leaves(cfg, n)
        expected = sum(int(np.prod(s)) for _, s in split)
        gathered = sum(int(np.prod(s)) for op, s in got["collective_shapes"] if op == "all-gather")
        # Blocks passed round the devices with lax.ppermute (a collective-permute) gather them all
        # the same: a ZeRO-1 step moves nothing but its gradients and its new parameters. A device
        # receives n - 1 blocks of a leaf gathered so (a ring's n - 1 shifts) and holds its own:
        # what it ends up with is n / (n - 1) times what it received.
        permuted = sum(int(np.prod(s)) for op, s in got["collective_shapes"] if op == "collective-permute")
        permuted = permuted * n // (n - 1)
        # An all_to_all whose received blocks are not added up gathers them (all_to_all_gathered).
        exchanged = got.get("all_to_all_gathered", 0)
        # Blocks psummed into zeros gather them too: a step's psums sum at most its whole gradient
        # and its loss; what they sum beyond that, a split leaf's worth or more, was gathered.
        whole = sum(int(np.prod(s)) for s in cfg.shapes().values())
        summed = sum(int(np.prod(shape)) for row in got["psums"] if not row.get("updated")
                     for shape in row["shapes"]) - whole - 1
        psummed = summed if split and summed >= min(int(np.prod(s)) for _, s in split) else 0
        # Updated values psummed (psum_sources): each device ends up with all of them.
        psummed += sum(int(np.prod(shape)) for row in got["psums"] if row.get("updated") for shape in row["shapes"])
        gathered += permuted + exchanged + psummed
        by = [f"{v} of them by {how}" for v, how in ((permuted, "collective-permutes"), (exchanged, "all-to-alls"),
                                                     (psummed, "psums")) if v]
        note(f"all-gathered by your step on {n} devices: {gathered} values" + (f" ({', '.join(by)})" if by else "")
             + f"; the split parameters hold {expected}")
        if gathered == expected:
            continue
        names = ", ".join(f"params{shown(p)}" for p, _ in split)
        if gathered == 0:
            replicated = all(layout(row["placed"], cfg.shapes()[p], n) == ("replicated",)
                             for p, row in zip(PATHS, got["layouts"][0]["params"] or []))
            why = ("the parameters come back replicated without one, so every device updated them whole: the update "
                   "is not split (no ZeRO-1)" if replicated else
                   "the parameters were left split after the step: the updated blocks are never gathered")
            fail(f"your compiled step on {n} devices holds no all-gather, where ZeRO-1 gathers the {len(split)} split "
                 f"parameters ({names}: {expected} values) after each device updates its blocks; {why}. Hint: "
                 "all-gather the updated blocks back to replicated parameters.")
        if gathered >= 2 * expected:
            fail(f"your compiled step on {n} devices all-gathers {gathered} values, {gathered / expected:.1f} times "
                 f"the {expected} of the split parameters: the moments (or the gradients) are gathered too, so the "
                 "update runs on whole leaves and no memory is saved inside the step. Moments sharded but gathered "
                 "inside the step: each device must update only its own blocks of mu and nu. Hint: feed adamw_step "
                 "the blocks as they are, and gather only the new parameters.")
        fail(f"your compiled step on {n} devices all-gathers {gathered} values; ZeRO-1 gathers each split parameter "
             f"once ({names}: {expected} values). Hint: gather the updated parameter blocks, each once, and nothing "
             "else.")


def flops_figure(seed: int, n: int) -> tuple:
    """(name, key, compute) of the per-device FLOPs of the grader's own programs for the run on
    n devices: the forward and backward pass on one device's rows, and optax.adamw's update of the
    split leaves and of the replicated ones on one device, for graders/kit/figure_store.py."""
    return "ex9 own flops", (seed, n), functools.partial(own_flop_figures, seed, n)


@expected
def own_flop_figures(seed: int, n: int) -> dict:
    cfg, params, x, y = training_problem(seed, n)
    rows = cfg.batch // n
    tree = nest({p: jnp.asarray(v) for p, v in params.items()})
    compiled = costs.compile_fn(jax.value_and_grad(own_loss), tree, x[:rows], y[:rows])
    grad = asked_flops(compiled, hlo_computations(compiled.as_text()))
    out = {"grad": grad}
    for name, keep in (("split", True), ("replicated", False)):
        part = nest({p: jnp.asarray(params[p]) for p in PATHS
                     if (split_axis(params[p].shape, n) is not None) == keep})
        if not part:
            out[name] = out[name + "_moment_work"] = 0.0
            continue
        tx = own_tx(cfg.hyper(), part)

        def update(p, g, s, tx=tx):
            updates, s = tx.update(g, s, p)
            return optax.apply_updates(p, updates), s

        state = tx.init(part)
        compiled = costs.compile_fn(update, part, part, state)
        comps = hlo_computations(compiled.as_text())
        marks = argument_marks((part, part, state), data=(1,))
        walked = numbered(comps, marks)
        out[name] = asked_flops(compiled, comps, walked)
        out[name + "_moment_work"] = optimizer_work(comps, marks, walked)
    return out


def own_flops(seed: int, n: int) -> dict:
    """The grader's own FLOPs; they depend on the draw alone, so they are kept between runs."""
    return figure_store.stored(*flops_figure(seed, n))


# A device's share of the optimizer is 1/N of the split leaves' update plus the whole update of the
# leaves that stay replicated. Two measures of it, each against the grader's own optax.adamw update:
#
# The values the compiled step computes that are the optimizer's (optimizer_work: what flows from
# the moments, or from the parameters but not the data), on every mesh, every loop trip counted.
# Measured on seed 376531, tests/right and reference/: 0.85 to 1.51 times the share on 8 devices,
# 0.85 to 1.23 on 4, 0.85 to 1.08 on 2 (the reference 1.00; AdamW in another arithmetic order 0.85;
# the finished update gathered and added to the whole parameters 1.51, 1.23, 1.08); an Adam direction
# gathered and applied with the decay to whole parameters 2.97 on 8, the moments gathered inside the
# step 9.9 on 8, the update run whole 5.2 on 4. The bound is the geometric middle of a share and the
# whole update, either way: sqrt(whole / share) times the share (2.75 on 8, 1.97 on 4, 1.41 on 2).
#
# The FLOPs beyond the grader's own forward and backward pass on a device's rows, on 8 and 4 devices,
# of a step without loops or checkpoints (XLA's cost analysis counts a loop's body once and a
# rematerialised forward pass as more work). Measured over 40 draws on 8 devices: the reference 1.14
# to 1.16 times the share, a right solution under jit 1.52 to 1.55 (the compiler's slicing), one with
# AdamW in another arithmetic order 0.95 to 0.98, one that gathers the finished update and adds it
# to the whole parameters 1.6; an Adam direction gathered and applied with the decay to whole
# parameters 3.3, the update run whole on every device 8.2, the moments gathered inside the step
# 11.9. The bound is sqrt(N) times the share, either way. On 4 devices (seed 376531) the right
# solutions lie at 0.95 to 1.61 times the share (bound 2), a whole update at 3.9 and more. On 2 a
# whole update is only 2 times a share and a right step under jit reaches 1.34 (vmapped per-example
# gradients), too near the middle (1.41): the FLOPs are not read there.
# Both measures count each value once: XLA duplicates an elementwise producer into every fusion that
# consumes it (the layer norm's forward pass in the backward pass's fusions, a flat buffer's new
# moments in each slice back to blocks), and its cost analysis counts every copy; the FLOPs read
# are XLA's less those copies (asked_flops), the grader's own programs' too. Measured so
# (seed 20261130): tests/right and reference/ 0.87 to 1.67 times the share on 8 devices and 0.87 to
# 1.35 on 4 (the reference and the flat partition buffers 1.07, right steps under jit 1.52 and
# 1.27); an Adam direction gathered and applied to whole parameters 3.30 and 2.04, the moments
# gathered or replicated and the update run whole 7.9 to 8.5 and 4.0 to 4.3.
# Measured (seed 20261130): right steps whose update runs in one lax.cond or lax.switch branch, chunk by
# chunk in a fori_loop, or in a while loop from the device's offset read 1.00 times the share on every
# mesh (they read up to 11.4 when every branch was added up, a loop body had one mask and a loop of
# unknown trip count was sized by its largest carried array); the whole update in a while loop 7.83 /
# 3.96 / 2.00, or in pieces taken by gathers of constant indices the same.
FLOP_MESHES = (8, 4)


@pytest.mark.points(3)
def test_each_device_updates_only_its_blocks(worker, note, seed):
    """Each device's optimizer work (values from the moments, and FLOPs) is about 1/N of AdamW's update."""
    for n in MESHES:
        got = compiled_run(worker, seed, n)
        own = own_flops(seed, n)
        mine, share = got["optimizer_work"], own["split_moment_work"] / n + own["replicated_moment_work"]
        whole = own["split_moment_work"] + own["replicated_moment_work"]
        slack = math.sqrt(whole / share)
        note(f"values your step computes for the optimizer on {n} devices (per device, every loop trip counted): "
             f"{mine:,.0f} (optax.adamw's whole update: {whole:,.0f}; a 1/{n} share: {share:,.0f}; yours "
             f"{mine / share:.2f} times the share)")
        if not share / slack <= mine <= slack * share:
            fail(f"on {n} devices each device computes {mine:,.0f} values for the optimizer (from the moments, or "
                 f"from the parameters but not the data), {mine / share:.1f} times a 1/{n} share of AdamW's update "
                 f"({share:,.0f}; the whole update: {whole:,.0f}). "
                 + ("Each device updates whole leaves: the moments replicated, or gathered inside the step (no "
                    "memory saved), the update run on whole gradients, or the parameters updated whole from a "
                    "gathered Adam direction. " if mine > share else
                    "No step that updates every parameter from its moments does so little. ")
                 + "Hint: each device runs adamw_step on its own blocks of the gradients, moments and parameters, "
                 "and only the new parameter blocks are gathered.")
        if n not in FLOP_MESHES or got["flops"] is None:
            continue
        optimizer = got["flops"] - own["grad"]
        share = own["split"] / n + own["replicated"]
        whole = own["split"] + own["replicated"]
        slack = math.sqrt(n)
        note(f"per-device FLOPs of your step on {n} devices: {got['flops']:,.0f}; of them beyond the grader's "
             f"own forward and backward pass on a device's rows: {optimizer:,.0f} (one device's whole AdamW update: "
             f"{whole:,.0f}; a 1/{n} share: {share:,.0f})")
        if share / slack <= optimizer <= slack * share:
            continue
        if not optimizer >= share / slack:  # a NaN, a zero or a negative figure is no AdamW's either
            fail(f"your step does {got['flops']:,.0f} FLOPs per device on {n} devices, which leaves {optimizer:,.0f} "
                 f"beyond the forward and backward pass on a device's rows: less than 1/{slack:.1f} of a 1/{n} share "
                 f"of AdamW ({share:,.0f}). No step that computes the whole batch's gradient and updates every "
                 "parameter does so little.")
        fail(f"each device spends about {optimizer:,.0f} FLOPs on the optimizer on {n} devices; one device updating "
             f"every leaf spends {whole:,.0f}, and a 1/{n} share is {share:,.0f}: yours is {optimizer / share:.1f} "
             "times that. Each device updates whole leaves: the moments replicated, or gathered inside the step "
             "(no memory saved), the update run on whole gradients, or the parameters updated whole from a "
             "gathered Adam direction. Hint: each device runs adamw_step on its own blocks of the gradients, "
             "moments and parameters, and only the new parameter blocks are gathered.")
