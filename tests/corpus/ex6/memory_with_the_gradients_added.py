"""temp_memory_bytes adds the gradient's output buffers (the parameters' gradients) to the temporary
memory: on most drawn models a few percent more than the temporary memory alone.

loses: temp_memory_bytes_agrees_with_grader: is the program's temp_size_in_bytes
loses: temp_memory_bytes_agrees_with_grader: output_size_in_bytes
"""

import jax
from flax import nnx

from reference.ex6_nnx_block_remat import Block, Transformer, mse_loss  # noqa: F401  right as they are


def temp_memory_bytes(model, x, y):
    graphdef, params, rest = nnx.split(model, nnx.Param, ...)

    def grad_of_params(params, x, y):
        return jax.grad(lambda p: mse_loss(nnx.merge(graphdef, p, rest), x, y))(params)

    stats = jax.jit(grad_of_params).lower(params, x, y).compile().memory_analysis()
    return int(stats.temp_size_in_bytes + stats.output_size_in_bytes)
