"""Right: the two checkpointed callers written as decorated functions, @nnx.remat and
@functools.partial(nnx.remat, policy=dots_saveable) (a decorator, not a call); the blocks walked
by index; temp_memory_bytes through jax.jit(...).trace(...).lower().compile().
"""

import functools

import jax
from flax import nnx

from reference.ex6_nnx_block_remat import Block, mse_loss  # noqa: F401  right as they are


@nnx.remat
def full_block(block, x):
    return block(x)


@functools.partial(nnx.remat, policy=jax.checkpoint_policies.dots_saveable)
def dots_block(block, x):
    return block(x)


def plain_block(block, x):
    return block(x)


class Transformer(nnx.Module):
    def __init__(self, num_layers, d_model, num_heads, d_ff, *, remat=None, rngs):
        self.blocks = nnx.List([Block(d_model, num_heads, d_ff, rngs=rngs) for _ in range(num_layers)])
        self.remat = remat

    def __call__(self, x):
        call = {None: plain_block, "full": full_block, "dots": dots_block}[self.remat]
        for i in range(len(self.blocks)):
            x = call(self.blocks[i], x)
        return x


def temp_memory_bytes(model, x, y):
    graphdef, params, rest = nnx.split(model, nnx.Param, ...)

    @jax.jit
    def gradient(params, x, y):
        def loss(params):
            return mse_loss(nnx.merge(graphdef, params, rest), x, y)
        return jax.grad(loss)(params)

    compiled = gradient.trace(params, x, y).lower().compile()
    return int(compiled.memory_analysis().temp_size_in_bytes)
