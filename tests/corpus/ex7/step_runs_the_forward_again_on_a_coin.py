"""Wrong: the dropout step of tests/right/ex7/step_dropout_keeping_every_unit.py, which also runs the
forward pass again each step inside a lax.cond whose predicate is a coin of probability 1.0 drawn
from the step's key (the loss averaged with itself: the reference's values): a second forward on
every device, every step, which the grader's own step does not do. The coin is data: the judge
reads the FLOPs of a copy that takes each value drawn as an input (no constant XLA could fold the
branch on), so the second forward counts.

18/22 with and without --sandbox at seeds 20261130, 7 and 0 (1.50 to 1.69 times the grader's own
Megatron step on (4, 2); the second forward's all-reduce also shows).

loses: each_device_does_its_share_of_the_work: devices repeat each other's work
loses: training_step_communicates_like_megatron: Megatron's step
"""
import jax
import jax.numpy as jnp
import optax
from jax import lax
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

W1_SPEC = P(None, "model")
W2_SPEC = P("model", None)
X_SPEC = P("data", None)
H_SPEC = P("data", "model")  # the hidden activations: rows by data, hidden units by model
PARAM_SPECS = {"w1": W1_SPEC, "w2": W2_SPEC}


def tp_mlp(w1, w2, x):
    h = jax.nn.relu(x @ w1)
    return jnp.matmul(h, w2, out_sharding=X_SPEC)


def _tp_mlp_local(w1_blk, w2_blk, x_blk):
    return lax.psum(jax.nn.relu(x_blk @ w1_blk) @ w2_blk, "model")


def make_tp_mlp_shard_map(mesh):
    return jax.shard_map(_tp_mlp_local, mesh=mesh, in_specs=(W1_SPEC, W2_SPEC, X_SPEC), out_specs=X_SPEC)


def init_tp_state(mesh, tx, params):
    placed = {k: jax.device_put(v, NamedSharding(mesh, PARAM_SPECS[k])) for k, v in params.items()}
    return placed, tx.init(placed)


KEEP = 1.0  # dropout's keep probability; 1.0 while the model is small (every unit kept)


def _loss(params, x, y, key):
    h = jax.nn.relu(x @ params["w1"])
    keep = jax.random.bernoulli(key, KEEP, h.shape, out_sharding=H_SPEC)
    h = jnp.where(keep, h / KEEP, 0.0)
    out = jnp.matmul(h, params["w2"], out_sharding=X_SPEC)
    return jnp.mean((out - y) ** 2)


def make_tp_train_step(mesh, tx):
    @jax.jit
    def _step(params, opt_state, x, y, key):
        key, drop = jax.random.split(key)
        loss, grads = jax.value_and_grad(_loss)(params, x, y, drop)
        # A coin of probability 1.0: the forward pass runs once more, every step, to check the loss.
        again = lax.cond(jax.random.bernoulli(drop, 1.0), lambda: _loss(params, x, y, drop), lambda: loss)
        loss = (loss + again) / 2
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss, key

    rng = [jax.random.key(42)]

    def step(params, opt_state, x, y):
        params, opt_state, loss, rng[0] = _step(params, opt_state, x, y, rng[0])
        return params, opt_state, loss

    return step
