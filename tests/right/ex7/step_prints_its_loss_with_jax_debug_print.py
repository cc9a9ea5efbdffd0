"""Right: the reference's jitted Megatron step with one line more inside the jit,
`jax.debug.print("loss {loss:.4f}", loss=loss)`: the compiled step prints its loss as it runs (the
usual way to log from inside a jitted function). Natively on (2, 4), Adam, D=32, H=40, B=64 it
prints "loss 1.4912" ... "loss 1.0576" and trains like the reference, the params staying
P(None, 'model') / P('model', None).

The step's program holds a debug_callback whose DebugEffect the program encoder refuses for ex7
("your program holds jit has effects (Debug)"): every step check fails. program.Encoder leaves
jax.debug.print out (PRINTS, a print returns nothing) only where it is given policies
(tests/right/ex6/debug_print_between_blocks is graded whole); ex7's step programs are encoded
without, so a print costs 9 points there.

Was 13/22 at seeds 20261130 and 7 in both modes (the program refused: "has effects (Debug)").

Full marks: ex7's programs are now sent with jax.debug.print left out (program.encode's drop_prints: it returns
nothing, so the program computes the same without it): 22/22 in both modes at seeds 20261130 and 7.
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
PARAM_SPECS = {"w1": W1_SPEC, "w2": W2_SPEC}


def tp_mlp(w1, w2, x):
    h = jax.nn.relu(x @ w1)
    return jnp.matmul(h, w2, out_sharding=X_SPEC)


def _tp_mlp_local(w1_blk, w2_blk, x_blk):
    return lax.psum(jax.nn.relu(x_blk @ w1_blk) @ w2_blk, "model")


def make_tp_mlp_shard_map(mesh):
    return jax.shard_map(_tp_mlp_local, mesh=mesh, in_specs=(W1_SPEC, W2_SPEC, X_SPEC), out_specs=X_SPEC)


def _loss(params, x, y):
    return jnp.mean((tp_mlp(params["w1"], params["w2"], x) - y) ** 2)


def init_tp_state(mesh, tx, params):
    placed = {k: jax.device_put(v, NamedSharding(mesh, PARAM_SPECS[k])) for k, v in params.items()}
    return placed, tx.init(placed)


def _make_jitted(tx):
    @jax.jit
    def step(params, opt_state, x, y):
        loss, grads = jax.value_and_grad(_loss)(params, x, y)
        jax.debug.print("loss {loss:.4f}", loss=loss)  # printed by the compiled step as it runs
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    return step


def make_tp_train_step(mesh, tx):
    return _make_jitted(tx)
