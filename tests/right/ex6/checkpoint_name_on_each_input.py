"""Right: per-block nnx.remat, with each block's input tagged by checkpoint_name first. The tag
makes the model's input x a value of the program's own, which blocks[0]'s checkpoint is then
computed from; the grader's own blocks[0] keeps nothing (its input is the model's), and once
failed this (found by a red-team: 12/20 for a right solution; jax.lax.optimization_barrier on x
did the same).
"""

from jax.ad_checkpoint import checkpoint_name
from flax import nnx

from reference.ex6_nnx_block_remat import _CALLERS, Block, mse_loss, temp_memory_bytes  # noqa: F401  right as they are


class Transformer(nnx.Module):
    def __init__(self, num_layers, d_model, num_heads, d_ff, *, remat=None, rngs):
        self.remat = remat
        self.blocks = nnx.List([Block(d_model, num_heads, d_ff, rngs=rngs) for _ in range(num_layers)])

    def __call__(self, x):
        for block in self.blocks:
            x = _CALLERS[self.remat](block, checkpoint_name(x, "block_input"))
        return x
