"""Right: per-block nnx.remat with a jax.debug.print after every block, as a learner checking
shapes might leave it. jax.debug.print is a callback that returns nothing, so it cannot bring a
value back into the program: it is not counted among the ways around the program's dataflow that
the grader refuses (jax.pure_callback, buffer_callback, jax.new_ref, ...).
"""

import jax
from flax import nnx

from reference.ex6_nnx_block_remat import _CALLERS, Block, mse_loss, temp_memory_bytes  # noqa: F401  right as they are


class Transformer(nnx.Module):
    def __init__(self, num_layers, d_model, num_heads, d_ff, *, remat=None, rngs):
        self.remat = remat
        self.blocks = nnx.List([Block(d_model, num_heads, d_ff, rngs=rngs) for _ in range(num_layers)])

    def __call__(self, x):
        for i, block in enumerate(self.blocks):
            x = _CALLERS[self.remat](block, x)
            jax.debug.print("block {i}: mean {m}", i=i, m=x.mean())
        return x
