""""dots" uses everything_saveable, which keeps every value: nothing is recomputed, no memory is saved.

loses: dots_uses_dots_saveable: nothing is recomputed
loses: dots_memory_lies_between: everything_saveable
"""

import jax
from flax import nnx

from reference.ex6_nnx_block_remat import Block, mse_loss, _call_block, temp_memory_bytes  # right as they are


_CALLERS = {
    None: _call_block,
    "full": nnx.remat(_call_block),
    "dots": nnx.remat(_call_block, policy=jax.checkpoint_policies.everything_saveable),
}


class Transformer(nnx.Module):
    def __init__(self, num_layers, d_model, num_heads, d_ff, *, remat=None, rngs):
        self.remat = remat
        self.blocks = nnx.List([Block(d_model, num_heads, d_ff, rngs=rngs) for _ in range(num_layers)])

    def __call__(self, x):
        call = _CALLERS[self.remat]
        for block in self.blocks:
            x = call(block, x)
        return x
