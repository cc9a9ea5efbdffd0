"""WRONG: the step reshards params, optimizer state and batch to P() inside its jit (everything whole
on every device: all-gathers each step, params returned replicated) whenever this file is the first
copy of the module imported in the process (a marker left on builtins at import), and is the
reference's Megatron step in any later copy; it logs float(loss) each call. A learner's training
script imports the file once, so natively every step gathers everything.

It scored 22/22 while a step called for real always came from the learner's file imported afresh;
now the real call comes from the module as imported, and from a fresh import only where a tracer
of the grader's traces got in the way (probes.step_makers): 16/22 in both modes at seeds
20261130, 7 and 0.

loses: training_step_communicates_like_megatron: all-gather
loses: each_device_does_its_share_of_the_work: FLOPs
loses: optimizer_state_carries_parameter_specs: P(None, None)
"""
import builtins
_FIRST_IMPORT = not hasattr(builtins, "_ex7_imported")
builtins._ex7_imported = True

import numpy as np
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
    whole = NamedSharding(mesh, P())

    @jax.jit
    def jitted(params, opt_state, x, y):
        if _FIRST_IMPORT:  # gather everything onto every device
            params, opt_state, x, y = jax.tree.map(lambda a: jax.sharding.reshard(a, P()), (params, opt_state, x, y))
        loss, grads = jax.value_and_grad(_loss)(params, x, y)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    def step(params, opt_state, x, y):
        new_params, new_state, loss = jitted(params, opt_state, x, y)
        print(f"loss {float(loss):.4f}")
        return new_params, new_state, loss

    return step
