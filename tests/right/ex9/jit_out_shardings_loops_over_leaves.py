"""Right: jax.jit with out_shardings given as a prefix of the outputs (one replicated sharding
for every parameter and for the loss, None to keep the state as it is typed), the leaves handled
by Python loops over flattened lists, and the moments' specs read back from the state's own types.
"""
import jax
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from reference.ex9_zero1_adamw import (  # noqa: F401  right as they are
    adamw_step, decay_mask, init_params, init_zero1_state, loss, make_mesh, mlp,
)


def make_zero1_step(mesh, lr=1e-3, b1=0.9, b2=0.999, eps=1e-8, wd=1e-2):
    def update(params, state, x, y):
        value, grads = jax.value_and_grad(loss)(params, x, y)
        p_leaves, treedef = jax.tree.flatten(params)
        g_leaves = jax.tree.leaves(grads)
        specs = [jax.typeof(m).sharding.spec for m in jax.tree.leaves(state["mu"])]  # the state's own
        blocks, g_blocks = [], []
        for p, g, spec in zip(p_leaves, g_leaves, specs):
            blocks.append(jax.reshard(p, spec))
            g_blocks.append(jax.reshard(g, spec))
        new, state = adamw_step(treedef.unflatten(blocks), treedef.unflatten(g_blocks), state,
                                lr, b1, b2, eps, wd, decay_mask(params))
        return new, state, value

    whole = NamedSharding(mesh, P())
    return jax.jit(update, out_shardings=(whole, None, whole))
