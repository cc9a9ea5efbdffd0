"""RIGHT: the reference's step taking an int32 seed the wrapper carries between calls (seed + 1
returned each step): inside the jitted step jax.random.key(seed) makes the key (random_seed of a
traced int), and fold_in and bits draw a tag for the step's log line. No value of the step depends
on the key.

Full marks (22/22 with and without --sandbox at seeds 20261130, 7 and 0): random_seed, whose
implementation travels by its name, random_fold_in and random_bits are read like any other
operation; the second call reads the seed the first returned to the wrapper only (an input of its
own). Was 13/22: the program encoding refused the key these made.
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




def _loss(params, x, y):
    return jnp.mean((tp_mlp(params["w1"], params["w2"], x) - y) ** 2)


def make_tp_train_step(mesh, tx):
    state = {"seed": jnp.int32(0), "bits": None}

    @jax.jit
    def _step(params, opt_state, x, y, seed):
        key = jax.random.key(seed)  # a key made inside the step from the step's seed
        bits = jax.random.bits(jax.random.fold_in(key, 7), (2,))  # a tag for the step's log line
        loss, grads = jax.value_and_grad(_loss)(params, x, y)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss, seed + 1, bits

    def step(params, opt_state, x, y):
        params, opt_state, loss, state["seed"], state["bits"] = _step(params, opt_state, x, y, state["seed"])
        return params, opt_state, loss

    return step
