"""WRONG: tests/right/ex7/step_aot_lowered_and_compiled.py whose executables never train: the right
step is traced and lowered, then its Lowered is given the lowering of a step that returns the params
it was given (lowered._lowering = jax.jit(frozen).lower(...)._lowering) before .compile(). Every real
call leaves the params unchanged (the optimizer state advances, the loss is right).

Scored 22/22 with and without --sandbox, seeds 20261130, 7 and 0 (a real 3-step run on a (2, 4) mesh
logs one constant loss): program.compiled_calls_traced binds the jaxpr the Traced object holds
(Lowered._traced_from), not what the executable runs. Should lose both training checks at least
(20/22 or less).

Now 13/22 at seed 20261130 without --sandbox (a Compiled whose lowering was swapped before compile() is left as JAX has it (the lowering and its text are checked against what its trace lowered): program.compiled_calls_traced, probes.step_maker).

loses: sgd_training_matches_single_device: lowered and compiled
"""
import jax
import jax.numpy as jnp
import optax
from jax import lax
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

W1_SPEC = P(None, "model")  # column split: each device owns H/model hidden units
W2_SPEC = P("model", None)  # row split: the same hidden units' rows of w2
X_SPEC = P("data", None)    # the batch split over "data"; also the output's spec
PARAM_SPECS = {"w1": W1_SPEC, "w2": W2_SPEC}


def tp_mlp(w1, w2, x):
    h = jax.nn.relu(x @ w1)  # column parallel: each device's own hidden units, no communication
    # Row parallel: the contracting dim is split, so the partial sums are added by one all-reduce;
    # on Explicit axes JAX asks where the sum should live.
    return jnp.matmul(h, w2, out_sharding=X_SPEC)


def _tp_mlp_local(w1_blk, w2_blk, x_blk):
    partial = jax.nn.relu(x_blk @ w1_blk) @ w2_blk  # (B/data, D): this device's share of the sum
    return lax.psum(partial, "model")


def make_tp_mlp_shard_map(mesh):
    return jax.shard_map(_tp_mlp_local, mesh=mesh, in_specs=(W1_SPEC, W2_SPEC, X_SPEC), out_specs=X_SPEC)


def init_tp_state(mesh, tx, params):
    placed = {k: jax.device_put(v, NamedSharding(mesh, PARAM_SPECS[k])) for k, v in params.items()}
    # The moments are zeros_like(params): made from the placed params, they inherit their split.
    return placed, tx.init(placed)


def _loss(params, x, y):
    return jnp.mean((tp_mlp(params["w1"], params["w2"], x) - y) ** 2)


def make_tp_train_step(mesh, tx):
    def _step(params, opt_state, x, y):
        loss, grads = jax.value_and_grad(_loss)(params, x, y)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    def _frozen(params, opt_state, x, y):
        new_params, opt_state, loss = _step(params, opt_state, x, y)
        return jax.tree.map(lambda p, q: p + 0 * q, params, new_params), opt_state, loss

    jitted, frozen = jax.jit(_step), jax.jit(_frozen)
    cache = {}

    def step(params, opt_state, x, y):
        key = jax.tree.map(lambda a: (a.shape, str(a.dtype), str(getattr(a, "sharding", None))), (params, opt_state, x, y))
        key = str(key)
        if key not in cache:
            lowered = jitted.lower(params, opt_state, x, y)
            lowered._lowering = frozen.lower(params, opt_state, x, y)._lowering
            cache[key] = lowered.compile()
        return cache[key](params, opt_state, x, y)

    return step
