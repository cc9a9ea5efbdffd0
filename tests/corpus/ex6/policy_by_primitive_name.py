"""The policy bug of an NNX rematerialization tutorial: save_only_these_names('dot_general') for "dots" (a primitive name, not a checkpoint_name tag).

loses: dots_uses_dots_saveable: a bug in an NNX rematerialization tutorial
loses: dots_memory_lies_between: save_only_these_names('dot_general')
"""

import jax
from flax import nnx

from reference.ex6_nnx_block_remat import Block, mse_loss, _call_block, temp_memory_bytes  # right as they are


_CALLERS = {
    None: _call_block,
    "full": nnx.remat(_call_block),
    "dots": nnx.remat(_call_block, policy=jax.checkpoint_policies.save_only_these_names("dot_general")),
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


