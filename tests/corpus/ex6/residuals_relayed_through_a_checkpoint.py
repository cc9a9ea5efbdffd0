"""As custom_vjp_keeps_activations.py (a jax.custom_vjp whose forward rule keeps every activation
through jax.vjp), but its backward rule first passes those activations through a second
jax.checkpoint that also reads the cotangent, so that what reaches the block's own checkpoint
seems made by the backward pass. Nothing is recomputed. Found by a red-team (17/20 while the
grader stopped at every checkpoint's output when it followed what a block's checkpoint is
computed from; it now stops only at another block's checkpoint).

loses: each_block_is_checkpointed_separately: the block's activations are kept for the backward pass, not recomputed
loses: each_checkpoint_holds_a_whole_block: bytes of the forward pass's values
loses: full_remat_matches_per_block_remat: remat='full' needs
technique: none (every number right, the technique not doing the work)
"""

import jax
import jax.numpy as jnp
from flax import nnx

from reference.ex6_nnx_block_remat import Block, mse_loss, temp_memory_bytes  # noqa: F401  right as they are

POLICIES = {"full": None, "dots": jax.checkpoint_policies.dots_saveable}


def make_call(graphdef, policy):
    def f(state, x):
        return nnx.merge(graphdef, state)(x)

    @jax.custom_vjp
    def g(state, x):
        return jax.checkpoint(f, policy=policy)(state, x)

    def fwd(state, x):
        return jax.vjp(f, state, x)

    def relay(vjp_fn, ct):  # every activation, plus zero times the cotangent
        zero = jnp.sum(ct) * 0.0
        return jax.tree.map(lambda a: a + zero.astype(a.dtype) if jnp.issubdtype(a.dtype, jnp.floating) else a, vjp_fn)

    def bwd(vjp_fn, ct):
        relayed = jax.checkpoint(relay, policy=policy)(vjp_fn, ct)
        return jax.checkpoint(lambda v, c: v(c), policy=policy)(relayed, ct)

    g.defvjp(fwd, bwd)
    return g


class Transformer(nnx.Module):
    def __init__(self, num_layers, d_model, num_heads, d_ff, *, remat=None, rngs):
        self.remat = remat
        self.blocks = nnx.List([Block(d_model, num_heads, d_ff, rngs=rngs) for _ in range(num_layers)])

    def __call__(self, x):
        for block in self.blocks:
            if self.remat is None:
                x = block(x)
            else:
                graphdef, state = nnx.split(block)
                x = make_call(graphdef, POLICIES[self.remat])(state, x)
        return x
