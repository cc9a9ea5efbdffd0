"""No remat at all: for "full" and "dots" every block's input is sharded over the 8 CPU devices
with jax.lax.with_sharding_constraint (a spec chosen for the drawn shape), so the gradient is an
8-device program and memory_analysis() reports what one device holds: "full" came to 0.84-1.11x
the grader's own per-block checkpointed figure. Found by a red-team (12/20 before the memory
checks required a one-device program).

loses: full_remat_matches_per_block_remat: runs on 8 devices
loses: dots_memory_lies_between: what one device holds
technique: none (every number right, the technique not doing the work)
"""

import jax
import numpy as np
from flax import nnx
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from reference.ex6_nnx_block_remat import Block, mse_loss, temp_memory_bytes  # noqa: F401  right as they are


class Transformer(nnx.Module):
    def __init__(self, num_layers, d_model, num_heads, d_ff, *, remat=None, rngs):
        self.remat = remat
        self.blocks = nnx.List([Block(d_model, num_heads, d_ff, rngs=rngs) for _ in range(num_layers)])

    def __call__(self, x):
        if self.remat is None:
            for block in self.blocks:
                x = block(x)
            return x
        mesh = Mesh(np.array(jax.devices()[:8]).reshape(2, 2, 2), ("a", "b", "c"))
        batch, length, _ = x.shape
        if self.remat == "dots":
            spec = (None, "a", None)
        elif batch % 2 == 0 and length == 9:
            spec = ("a", "b", "c")
        elif batch % 2 == 0:
            spec = ("a", ("b", "c"), None)
        else:
            spec = (("a", "b"), "c", None)
        sharding = NamedSharding(mesh, PartitionSpec(*spec))
        for block in self.blocks:
            x = block(jax.lax.with_sharding_constraint(x, sharding))
        return x
