"""Under jax.grad, checkpoints every block but the last, which runs plainly, followed by one
checkpoint around a no-op; traced alone, model(x) checkpoints every block. Its memory is as low
as one checkpoint per block needs (the last block's activations are the first the backward pass
uses), so only what the gradient program holds shows it.

loses: each_block_is_checkpointed_separately: the parameter gradients of blocks[
loses: each_checkpoint_holds_a_whole_block: in the gradient of remat=
"""

import jax
from flax import nnx

from reference.ex6_nnx_block_remat import Block, mse_loss, temp_memory_bytes  # right as they are

POLICIES = {"full": None, "dots": jax.checkpoint_policies.dots_saveable}


def differentiated(block) -> bool:
    return type(block.qkv.kernel[...]).__name__ in ("JVPTracer", "LinearizeTracer")


class Transformer(nnx.Module):
    def __init__(self, num_layers, d_model, num_heads, d_ff, *, remat=None, rngs):
        self.remat = remat
        self.blocks = nnx.List([Block(d_model, num_heads, d_ff, rngs=rngs) for _ in range(num_layers)])

    def __call__(self, x):
        if self.remat is None:
            for block in self.blocks:
                x = block(x)
            return x
        policy = POLICIES[self.remat]
        call = nnx.remat(lambda b, x: b(x), policy=policy)
        *first, last = self.blocks
        for block in first:
            x = call(block, x)
        if not differentiated(last):
            return call(last, x)
        return nnx.remat(lambda b, x: x * 1.0, policy=policy)(last, last(x))
