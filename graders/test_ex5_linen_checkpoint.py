"""Grader for Exercise 5: a Linen MLP whose class is wrapped with nn.checkpoint.

Expected outputs come from the grader's own *unwrapped* Linen MLP, initialised with the same
PRNGKey and evaluated in NumPy float64. Checkpointing changes no number, so the technique
checks read the learner's traced program instead: nn.checkpoint binds the primitive remat2.
The parameter tree is read with flax.linen.intercept_methods while the learner's code runs.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import flax.linen as nn
from flax.errors import TransformTargetError

from graders import jaxpr
from graders.learner import describe, fail, learner_frame
from graders.numeric import as_array, assert_close, rng
from graders.plugin import STATE

# (seed, D, F): every D and F distinct, D = 1 included; tiny, since only the wiring is tested.
INT_CASES = ((3, 4, 6), (11, 1, 5), (25, 7, 2))
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


def make_x(seed: int, d: int):
    return jnp.asarray(rng(100 + seed).normal(size=(d,)), jnp.float32)


def plain_params(key, d: int, f: int) -> dict:
    """Dense_0/Dense_1 parameters of the unwrapped MLP, as float64 NumPy arrays."""
    params = PlainMLP(features=f).init(key, jnp.zeros((d,), jnp.float32))["params"]
    return jax.tree.map(lambda a: np.asarray(a, np.float64), params)


def forward_np(p: dict, x, relu_hidden=True):
    h = np.asarray(x, np.float64) @ p["Dense_0"]["kernel"] + p["Dense_0"]["bias"]
    h = np.maximum(h, 0.0) if relu_hidden else h
    return h @ p["Dense_1"]["kernel"] + p["Dense_1"]["bias"]


def expected_and_mistakes(seed: int, x, f: int):
    d = x.shape[0]
    key = jax.random.PRNGKey(seed)
    p = plain_params(key, d, f)
    out = forward_np(p, x)
    split = jax.random.split(key)
    mistakes = [
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
        mistakes.append((forward_np(plain_params(jax.random.PRNGKey(0), d, f), x),
                         f"That is the model initialised with PRNGKey(0), not PRNGKey({seed}). "
                         "Hint: build the key from the seed argument, jax.random.PRNGKey(int(seed))."))
    return out, mistakes


def call(sol, seed, x, features):
    """The learner's output; wrapping an instance instead of the class gets its own hint."""
    try:
        return sol.nn_checkpoint_forward(seed, x, features)
    except TransformTargetError as exc:
        if learner_frame(exc, STATE.solutions_dir) is None:
            raise
        fail(f"your code raised {describe(exc, STATE.solutions_dir)} Hint: nn.checkpoint takes the "
             "module class, not an instance: model = nn.checkpoint(MLP)(features=int(features)).")


def output_of(got, f: int, what: str) -> np.ndarray:
    array = as_array(got, what)
    if array.shape != (f,):
        flat = " flattened" if array.size == f else ""
        fail(f"{what}: expected shape ({f},), got shape {array.shape}. "
             f"Hint: return the model's output{flat} as a vector of length features, e.g. out.reshape(-1).")
    return array


def check_output(sol, seed, d, f, seed_arg, features_arg):
    x = make_x(int(seed), d)
    what = f"output for seed={seed_arg!r}, D={d}, features={features_arg!r}"
    expected, mistakes = expected_and_mistakes(int(seed), x, f)
    got = output_of(call(sol, seed_arg, x, features_arg), f, what)
    assert_close(got, expected, what, NAME_HINT, mistakes=mistakes)


def trace_learner(sol, seed=6, d=3, f=5):
    """The jaxpr of the learner's function of x (seed and features fixed)."""
    x = make_x(seed, d)
    return jaxpr.trace(lambda x: call(sol, seed, x, f), x)


@pytest.mark.points(3)
def test_output_matches_unwrapped_mlp(sol):
    """The output equals the grader's unwrapped MLP with PRNGKey(seed), for three seeds, D and F."""
    for seed, d, f in INT_CASES:
        check_output(sol, seed, d, f, seed, f)


@pytest.mark.points(2)
def test_accepts_float_seed_and_features(sol):
    """Still right when seed or features arrives as a Python float (9.0, 3.0)."""
    for seed, d, f, seed_arg, features_arg in ((9, 3, 8, 9.0, 8), (14, 5, 3, 14, 3.0)):
        floats = " and ".join(f"{n}={v!r}" for n, v in (("seed", seed_arg), ("features", features_arg))
                              if isinstance(v, float))
        try:
            check_output(sol, seed, d, f, seed_arg, features_arg)
        except (TypeError, ValueError) as exc:
            if learner_frame(exc, STATE.solutions_dir) is None:
                raise
            fail(f"called with {floats} (a float), your code raised {describe(exc, STATE.solutions_dir)}. "
                 "Hint: convert before use: jax.random.PRNGKey(int(seed)) and features=int(features).")


@pytest.mark.points(2)
def test_parameter_tree_is_dense_0_dense_1(sol):
    """The applied parameters are Dense_0 (kernel (D, F), bias (F,)) and Dense_1 (kernel (F, F), bias (F,))."""
    seed, d, f = 8, 4, 3
    seen = []

    def record(next_fun, args, kwargs, context):
        module = context.module
        if module.scope is not None and module.path == () and not module.is_initializing():
            params = module.variables.get("params")
            if params:
                seen.append(jax.tree.map(lambda a: tuple(np.shape(a)), dict(params)))
        return next_fun(*args, **kwargs)

    with nn.intercept_methods(record):
        call(sol, seed, make_x(seed, d), f)
    if not seen:
        fail("no Flax Linen module was applied to parameters while your function ran. Hint: build "
             "the MLP as a flax.linen Module, then call model.init(...) and model.apply(variables, x).")
    tree = seen[-1]
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
def test_x_is_unchanged(sol):
    """x still holds its values afterwards (not modified, donated or deleted)."""
    # D = F on purpose: only then could a donated x be reused for the output (and deleted).
    seed, d, f = 5, 6, 6
    x = make_x(seed, d)
    copy = np.array(x, np.float64)  # a NumPy-backed copy, independent of x's buffer
    call(sol, seed, x, f)
    if x.is_deleted():
        fail("after your function returned, the caller's x was deleted: it was donated (e.g. "
             "jax.jit(..., donate_argnums=...)) and its buffer reused. Hint: do not donate x; the "
             "caller still owns it.")
    now = np.asarray(x, np.float64)
    if not np.array_equal(now, copy):
        fail(f"x changed during the call: it held {copy[:4]} and now holds {now[:4]}. "
             "Hint: leave x as it is; compute new arrays instead of writing into it.")


@pytest.mark.points(3)
def test_forward_holds_remat2(sol):
    """The traced function holds a checkpoint (remat2); an unwrapped model has none."""
    found = jaxpr.find(trace_learner(sol), "checkpoint")
    if not found:
        fail("the traced function holds no remat2 (the primitive nn.checkpoint binds): your model "
             "is not checkpointed, even if its numbers are right. Hint: CheckpointMLP = "
             "nn.checkpoint(MLP); model = CheckpointMLP(features=int(features)).")


@pytest.mark.points(2)
def test_checkpoint_wraps_whole_mlp_class(sol):
    """Init and apply each run the whole MLP (both Dense layers) inside one remat2, as wrapping the class does."""
    found = jaxpr.find(trace_learner(sol), "checkpoint")
    whole = [e for e in found if jaxpr.count_inside(e, "dot") >= 2]
    if not found:
        fail("the traced function holds no remat2 at all: nothing is checkpointed. "
             "Hint: wrap the MLP class with nn.checkpoint before instantiating it.")
    if not whole:
        fail(f"found {len(found)} remat2 equation(s), but none holds both Dense layers: only part of "
             "the model is checkpointed (e.g. one nn.Dense wrapped). Hint: wrap the whole MLP "
             "class, nn.checkpoint(MLP), not a layer inside it.")
    if len(whole) < 2:
        fail("found one remat2 holding the MLP, expected two: one for model.init and one for "
             "model.apply, as a wrapped class gives. You checkpointed a function (e.g. "
             "jax.checkpoint(model.apply)) rather than the module class. Hint: "
             "model = nn.checkpoint(MLP)(features=int(features)), then init and apply as usual.")
