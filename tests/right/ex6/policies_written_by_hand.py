"""Right: the policies written by hand rather than taken from jax.checkpoint_policies: "dots"
keeps the result of every dot_general and nothing else (what dots_saveable keeps), "full" keeps
nothing (save_from_both_policies of two policies that keep nothing); the checkpointed callers made
in __call__, per call; temp_memory_bytes from nnx.grad of the model merged from its whole state.
"""

import jax
from flax import nnx

from reference.ex6_nnx_block_remat import Block, mse_loss  # noqa: F401  right as they are

cp = jax.checkpoint_policies


def keep_matmuls(prim, *_, **__):
    return prim is jax.lax.dot_general_p


KEEP_NOTHING = cp.save_from_both_policies(cp.save_only_these_names(), lambda *_, **__: False)


class Transformer(nnx.Module):
    def __init__(self, num_layers, d_model, num_heads, d_ff, *, remat=None, rngs):
        self.remat = remat
        self.blocks = nnx.List([Block(d_model, num_heads, d_ff, rngs=rngs) for _ in range(num_layers)])

    def __call__(self, x):
        if self.remat is None:
            for block in self.blocks:
                x = block(x)
            return x
        policy = keep_matmuls if self.remat == "dots" else KEEP_NOTHING
        step = nnx.remat(lambda block, x: block(x), policy=policy)
        for block in self.blocks:
            x = step(block, x)
        return x


def temp_memory_bytes(model, x, y):
    graphdef, state = nnx.split(model)

    def gradient(state, x, y):
        return nnx.grad(mse_loss)(nnx.merge(graphdef, state), x, y)

    return int(jax.jit(gradient).lower(state, x, y).compile().memory_analysis().temp_size_in_bytes)
