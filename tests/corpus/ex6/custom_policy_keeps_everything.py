"""remat='dots' checkpoints each block with a policy of its own that answers True for every
equation: it keeps every value of the block, so nothing is recomputed and nothing is saved. A
policy of the learner's own travels to the judge as a number (it is never run there): what it
keeps is read from the gradient's dataflow, which keeps far more than dots_saveable does.

loses: dots_uses_dots_saveable: expected dots_saveable, which keeps every matmul result
"""

from flax import nnx

from reference.ex6_nnx_block_remat import Block, mse_loss, _call_block, temp_memory_bytes  # right as they are


def keep_everything(prim, *avals, **params):
    return True


_CALLERS = {None: _call_block, "full": nnx.remat(_call_block), "dots": nnx.remat(_call_block, policy=keep_everything)}


class Transformer(nnx.Module):
    def __init__(self, num_layers, d_model, num_heads, d_ff, *, remat=None, rngs):
        self.remat = remat
        self.blocks = nnx.List([Block(d_model, num_heads, d_ff, rngs=rngs) for _ in range(num_layers)])

    def __call__(self, x):
        for block in self.blocks:
            x = _CALLERS[self.remat](block, x)
        return x
