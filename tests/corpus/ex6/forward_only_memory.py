"""temp_memory_bytes measures the forward pass (the loss), not its gradient.

loses: temp_memory_bytes_agrees_with_grader: what the forward pass alone needs
"""

import jax
from flax import nnx

from reference.ex6_nnx_block_remat import Block, mse_loss, _call_block  # right as they are


_CALLERS = {
    None: _call_block,
    "full": nnx.remat(_call_block),
    "dots": nnx.remat(_call_block, policy=jax.checkpoint_policies.dots_saveable),
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


def temp_memory_bytes(model, x, y):
    graphdef, params, rest = nnx.split(model, nnx.Param, ...)

    def loss_of_params(params, x, y):
        return mse_loss(nnx.merge(graphdef, params, rest), x, y)

    compiled = jax.jit(loss_of_params).lower(params, x, y).compile()
    return int(compiled.memory_analysis().temp_size_in_bytes)
