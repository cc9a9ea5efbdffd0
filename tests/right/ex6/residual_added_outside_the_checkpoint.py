"""Right: each block's checkpoint computes block(x) - x, and the residual x is added outside it.
The loss's cotangent then reaches every block past the other blocks' checkpoints, and with it
what the loss keeps (the model's output); the grader once counted that for every block, not
only the last, as in its own stack (found by a red-team: 12/20 for a right solution).
"""

import jax
from flax import nnx

from reference.ex6_nnx_block_remat import Block, mse_loss, temp_memory_bytes  # noqa: F401  right as they are

CHANGES = {
    "full": nnx.remat(lambda block, x: block(x) - x),
    "dots": nnx.remat(lambda block, x: block(x) - x, policy=jax.checkpoint_policies.dots_saveable),
}


class Transformer(nnx.Module):
    def __init__(self, num_layers, d_model, num_heads, d_ff, *, remat=None, rngs):
        self.remat = remat
        self.blocks = nnx.List([Block(d_model, num_heads, d_ff, rngs=rngs) for _ in range(num_layers)])

    def __call__(self, x):
        for block in self.blocks:
            x = block(x) if self.remat is None else x + CHANGES[self.remat](block, x)
        return x
