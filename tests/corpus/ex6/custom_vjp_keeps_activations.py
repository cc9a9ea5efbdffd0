"""Each block is a jax.custom_vjp: its forward rule runs jax.vjp of the block plainly, so every
activation is kept as a residual, and its backward rule applies that vjp inside a jax.checkpoint
with the variant's policy. The gradient has one checkpoint per block, with the right policy, that
computes each block's parameter gradients, but it recomputes nothing: it is computed from the
block's activations (about 20 times what a per-block checkpoint needs). Traced alone, the block
runs inside a checkpoint. Found by a red-team (17/20 before the checkpoints' inputs were read).

loses: each_block_is_checkpointed_separately: the block's activations are kept for the backward pass, not recomputed
loses: each_checkpoint_holds_a_whole_block: bytes of the forward pass's values
loses: full_remat_matches_per_block_remat: remat='full' needs
technique: none (every number right, the technique not doing the work)
"""
import jax
from flax import nnx

from reference.ex6_nnx_block_remat import Block, mse_loss, temp_memory_bytes  # right as they are

POLICIES = {"full": None, "dots": jax.checkpoint_policies.dots_saveable}


def make_call(graphdef, policy):
    def f(state, x):
        return nnx.merge(graphdef, state)(x)

    @jax.custom_vjp
    def g(state, x):
        return jax.checkpoint(f, policy=policy)(state, x)

    def fwd(state, x):
        out, vjp_fn = jax.vjp(f, state, x)
        return out, vjp_fn

    def bwd(vjp_fn, ct):
        return jax.checkpoint(lambda v, c: v(c), policy=policy)(vjp_fn, ct)

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
