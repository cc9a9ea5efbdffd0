"""Right: one nnx.jit(nnx.remat(...)) per variant, made once and called for every block. Every
call runs the same jitted program, so the gradient's checkpoints are one equation executed once
per block; the grader once counted them as one checkpoint for all blocks (found by a red-team:
14/20 for a right solution).
"""

import jax
from flax import nnx

from reference.ex6_nnx_block_remat import Block, mse_loss, temp_memory_bytes  # noqa: F401  right as they are

CALLERS = {None: lambda block, x: block(x)}
for _remat, _policy in {"full": None, "dots": jax.checkpoint_policies.dots_saveable}.items():
    CALLERS[_remat] = nnx.jit(nnx.remat(lambda block, x: block(x), policy=_policy))


class Transformer(nnx.Module):
    def __init__(self, num_layers, d_model, num_heads, d_ff, *, remat=None, rngs):
        self.remat = remat
        self.blocks = nnx.List([Block(d_model, num_heads, d_ff, rngs=rngs) for _ in range(num_layers)])

    def __call__(self, x):
        for block in self.blocks:
            x = CALLERS[self.remat](block, x)
        return x
