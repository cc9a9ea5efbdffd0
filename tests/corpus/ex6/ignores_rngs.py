"""Builds the blocks from its own nnx.Rngs(0), ignoring the rngs it is given.

loses: variants_share_parameters: the rngs argument is not used
"""

import jax
from flax import nnx

from reference.ex6_nnx_block_remat import Block, mse_loss  # the given code, unchanged


def _call_block(block, x):
    return block(x)


_CALLERS = {
    None: _call_block,
    "full": nnx.remat(_call_block),
    "dots": nnx.remat(_call_block, policy=jax.checkpoint_policies.dots_saveable),
}


class Transformer(nnx.Module):
    def __init__(self, num_layers, d_model, num_heads, d_ff, *, remat=None, rngs):
        self.remat = remat
        self.blocks = nnx.List([Block(d_model, num_heads, d_ff, rngs=nnx.Rngs(0)) for _ in range(num_layers)])

    def __call__(self, x):
        call = _CALLERS[self.remat]
        for block in self.blocks:
            x = call(block, x)
        return x


def temp_memory_bytes(model, x, y):
    graphdef, params, rest = nnx.split(model, nnx.Param, ...)

    def grad_of_params(params, x, y):
        return jax.grad(lambda p: mse_loss(nnx.merge(graphdef, p, rest), x, y))(params)

    compiled = jax.jit(grad_of_params).lower(params, x, y).compile()
    return int(compiled.memory_analysis().temp_size_in_bytes)
