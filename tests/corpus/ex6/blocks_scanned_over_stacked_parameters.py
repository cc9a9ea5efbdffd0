"""The blocks' states stacked and run by jax.lax.scan over a checkpointed body: one checkpoint,
run by the loop for every block, instead of one nnx.remat per block of self.blocks. Stacking
copies every parameter and, in the gradient, every parameter's gradient: at these sizes "full"
needs far more memory than per-block remat (the memory checks show it).

loses: each_block_is_checkpointed_separately: run inside a loop
loses: each_checkpoint_holds_a_whole_block: run inside a loop
loses: full_remat_matches_per_block_remat: the grader's own gradient with one jax.checkpoint around each whole block
"""

import jax
import jax.numpy as jnp
from flax import nnx

from reference.ex6_nnx_block_remat import Block, mse_loss, temp_memory_bytes  # noqa: F401

POLICIES = {"full": None, "dots": jax.checkpoint_policies.dots_saveable}


class Transformer(nnx.Module):
    def __init__(self, num_layers, d_model, num_heads, d_ff, *, remat=None, rngs):
        self.remat = remat
        self.blocks = nnx.List([Block(d_model, num_heads, d_ff, rngs=rngs) for _ in range(num_layers)])

    def __call__(self, x):
        if self.remat is None:
            for block in self.blocks:
                x = block(x)
            return x
        graphdef = nnx.graphdef(self.blocks[0])
        states = [nnx.state(b) for b in self.blocks]
        stacked = jax.tree.map(lambda *a: jnp.stack(a), *states)

        def body(x, state):
            return nnx.merge(graphdef, state)(x), None

        x, _ = jax.lax.scan(jax.checkpoint(body, policy=POLICIES[self.remat]), x, stacked)
        return x
