"""Per-block nnx.remat with prevent_cse=False. The structure is right, but outside a scan XLA's
common-subexpression elimination merges each block's recomputation with its forward pass, so
"full" saves nothing (jax.checkpoint's documentation: prevent_cse defaults to True because under
a jit CSE can defeat the purpose of checkpointing; False suits a checkpoint inside a scan).

loses: full_remat_matches_per_block_remat: The checkpoints are made with prevent_cse=False
loses: dots_memory_lies_between: prevent_cse=False
"""

import jax
from flax import nnx

from reference.ex6_nnx_block_remat import Block, mse_loss, temp_memory_bytes  # noqa: F401  right as they are

CALLERS = {
    None: lambda block, x: block(x),
    "full": nnx.remat(lambda block, x: block(x), prevent_cse=False),
    "dots": nnx.remat(lambda block, x: block(x), policy=jax.checkpoint_policies.dots_saveable, prevent_cse=False),
}


class Transformer(nnx.Module):
    def __init__(self, num_layers, d_model, num_heads, d_ff, *, remat=None, rngs):
        self.remat = remat
        self.blocks = nnx.List([Block(d_model, num_heads, d_ff, rngs=rngs) for _ in range(num_layers)])

    def __call__(self, x):
        for block in self.blocks:
            x = CALLERS[self.remat](block, x)
        return x
