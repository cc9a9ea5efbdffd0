""""dots" uses dots_with_no_batch_dims_saveable, which looks like dots_saveable but keeps only the
matmuls without batch dimensions: the attention's two einsums (batched over B and the heads) are
recomputed. Judged by what it keeps of a block, it is not dots_saveable.

loses: dots_uses_dots_saveable: dots_with_no_batch_dims_saveable
"""

import jax
from flax import nnx

from reference.ex6_nnx_block_remat import Block, mse_loss, _call_block, temp_memory_bytes  # noqa: F401  right as they are


_CALLERS = {
    None: _call_block,
    "full": nnx.remat(_call_block),
    "dots": nnx.remat(_call_block, policy=jax.checkpoint_policies.dots_with_no_batch_dims_saveable),
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
