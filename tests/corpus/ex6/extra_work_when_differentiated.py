"""Checkpoints every block, but under jax.grad adds x @ I - x (exactly zero) to each block's
output outside its checkpoint: a matmul the per-block checkpointed gradient does not run, which
model(x) traced alone does not show.

loses: each_checkpoint_holds_a_whole_block: with each whole block in its own checkpoint only the forward pass runs there
"""

import jax
import jax.numpy as jnp
from flax import nnx

from reference.ex6_nnx_block_remat import Block, mse_loss, temp_memory_bytes  # right as they are

POLICIES = {"full": None, "dots": jax.checkpoint_policies.dots_saveable}


def differentiated(block) -> bool:
    return type(block.qkv.kernel[...]).__name__ in ("JVPTracer", "LinearizeTracer")


def run(block, x, policy):
    out = nnx.remat(lambda b, x: b(x), policy=policy)(block, x)
    if differentiated(block):
        out = out + (x @ jnp.eye(x.shape[-1], dtype=x.dtype) - x)
    return out


class Transformer(nnx.Module):
    def __init__(self, num_layers, d_model, num_heads, d_ff, *, remat=None, rngs):
        self.remat = remat
        self.blocks = nnx.List([Block(d_model, num_heads, d_ff, rngs=rngs) for _ in range(num_layers)])

    def __call__(self, x):
        for block in self.blocks:
            x = block(x) if self.remat is None else run(block, x, POLICIES[self.remat])
        return x
