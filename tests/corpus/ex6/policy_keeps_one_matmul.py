"""remat='dots' checkpoints each block with a policy of its own that keeps only the first MLP
matmul's result (the one whose kernel is d_model x d_ff), not every matmul's: a policy between
'full' and 'dots', whose memory lies between theirs too. The judge cannot run the learner's policy;
it reads what the gradient keeps per checkpoint, which is not what dots_saveable keeps.

loses: dots_uses_dots_saveable: expected dots_saveable, which keeps every matmul result
"""

import jax
from flax import nnx

from reference.ex6_nnx_block_remat import Block, mse_loss, temp_memory_bytes  # noqa: F401  right as they are


def _call_block(block, x):
    return block(x)


class Transformer(nnx.Module):
    def __init__(self, num_layers, d_model, num_heads, d_ff, *, remat=None, rngs):
        self.remat = remat
        self.fc1_shape = (d_model, d_ff)
        self.blocks = nnx.List([Block(d_model, num_heads, d_ff, rngs=rngs) for _ in range(num_layers)])

    def __call__(self, x):
        fc1_shape = self.fc1_shape

        def keep_fc1(prim, *avals, **params):
            return prim is jax.lax.dot_general_p and tuple(avals[1].shape) == fc1_shape

        call = {None: _call_block, "full": nnx.remat(_call_block),
                "dots": nnx.remat(_call_block, policy=keep_fc1)}[self.remat]
        for block in self.blocks:
            x = call(block, x)
        return x
