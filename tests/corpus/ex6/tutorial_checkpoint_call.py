"""The call from an NNX rematerialization tutorial: jax.checkpoint(lambda b, x: b(x), block, x) -- jax.checkpoint takes only the function.

loses: outputs_match_a_plain_stack: checkpoint() takes 1 positional argument
"""

import jax
from flax import nnx

from reference.ex6_nnx_block_remat import Block, mse_loss, temp_memory_bytes  # right as they are


class Transformer(nnx.Module):
    def __init__(self, num_layers, d_model, num_heads, d_ff, *, remat=None, rngs):
        self.remat = remat
        self.blocks = nnx.List([Block(d_model, num_heads, d_ff, rngs=rngs) for _ in range(num_layers)])

    def __call__(self, x):
        for block in self.blocks:
            if self.remat is None:
                x = block(x)
            else:
                policy = jax.checkpoint_policies.dots_saveable if self.remat == "dots" else None
                x = jax.checkpoint(lambda b, x: b(x), block, x, policy=policy)
        return x


