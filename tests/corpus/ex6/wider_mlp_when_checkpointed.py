"""Builds the checkpointed variants with a wider MLP (d_ff + 1) than remat=None: every variant is a
right stack of right blocks, but not the same parameters, and remat=None's models no longer fit
their programs (the grader then builds their second models as well, and says so of the first).

loses: variants_share_parameters: hold different parameters
"""

import jax
from flax import nnx

from reference.ex6_nnx_block_remat import Block, mse_loss, _call_block, temp_memory_bytes  # right as they are


_CALLERS = {
    None: _call_block,
    "full": nnx.remat(_call_block),
    "dots": nnx.remat(_call_block, policy=jax.checkpoint_policies.dots_saveable),
}


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
