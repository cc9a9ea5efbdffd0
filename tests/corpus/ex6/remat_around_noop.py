"""A decoy: a checkpoint around a function that does nothing (x * 1), then the block runs plainly.

loses: each_checkpoint_holds_a_whole_block: a checkpoint around a no-op
loses: full_remat_matches_per_block_remat: a checkpoint around a no-op
technique: none (every number right, the technique not doing the work)
"""

import jax
from flax import nnx

from reference.ex6_nnx_block_remat import Block, mse_loss, temp_memory_bytes  # right as they are

POLICIES = {"full": None, "dots": jax.checkpoint_policies.dots_saveable}


def run(block, x, policy):
    x = nnx.remat(lambda b, x: x * 1.0, policy=policy)(block, x)
    return block(x)


class Transformer(nnx.Module):
    def __init__(self, num_layers, d_model, num_heads, d_ff, *, remat=None, rngs):
        self.remat = remat
        self.blocks = nnx.List([Block(d_model, num_heads, d_ff, rngs=rngs) for _ in range(num_layers)])

    def __call__(self, x):
        for block in self.blocks:
            x = block(x) if self.remat is None else run(block, x, POLICIES[self.remat])
        return x
