"""Builds the checkpointed variants with a wider MLP (d_ff + 1) than remat=None: every variant is a
right stack of right blocks, but the variants do not hold the same parameters. remat=None's
second model no longer fits the checkpointed variants' programs, so the grader builds their own.

loses: variants_share_parameters: hold different parameters
"""

from flax import nnx

from reference.ex6_nnx_block_remat import _CALLERS, Block, mse_loss, temp_memory_bytes  # right as they are


class Transformer(nnx.Module):
    def __init__(self, num_layers, d_model, num_heads, d_ff, *, remat=None, rngs):
        self.remat = remat
        width = d_ff if remat is None else d_ff + 1
        self.blocks = nnx.List([Block(d_model, num_heads, width, rngs=rngs) for _ in range(num_layers)])

    def __call__(self, x):
        call = _CALLERS[self.remat]
        for block in self.blocks:
            x = call(block, x)
        return x
