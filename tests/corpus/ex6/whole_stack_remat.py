"""One nnx.remat around the whole stack of blocks instead of one per block.

loses: each_block_is_checkpointed_separately: one nnx.remat wraps the whole stack
loses: full_remat_matches_per_block_remat: one nnx.remat wraps the whole stack
"""

import jax
from flax import nnx

from reference.ex6_nnx_block_remat import Block, mse_loss, temp_memory_bytes  # right as they are


class Transformer(nnx.Module):
    def __init__(self, num_layers, d_model, num_heads, d_ff, *, remat=None, rngs):
        self.remat = remat
        self.blocks = nnx.List([Block(d_model, num_heads, d_ff, rngs=rngs) for _ in range(num_layers)])

    def __call__(self, x):
        def run_all(blocks, x):
            for block in blocks:
                x = block(x)
            return x

        if self.remat == "full":
            run_all = nnx.remat(run_all)
        elif self.remat == "dots":
            run_all = nnx.remat(run_all, policy=jax.checkpoint_policies.dots_saveable)
        return run_all(self.blocks, x)


