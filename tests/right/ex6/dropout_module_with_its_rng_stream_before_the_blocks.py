"""Right: per-block nnx.remat (the reference), the Transformer holding an nnx.Dropout of its own made
with the model's nnx.Rngs (its dropout stream forked into the module's state: a key and a count),
deterministic=True as in evaluation, applied to the input before the blocks, outside every
checkpoint: the reference's numbers, and a model state that holds a PRNG key beside the parameters.

Full marks (20/20 with and without --sandbox at seeds 20261130, 7 and 0). (The same Dropout inside
the given Block, under nnx.remat, makes flax refuse the model when it is merged inside jax.grad, the
way temp_memory_bytes's docstring prescribes: "Cannot mutate RngCount from a different trace level".)
"""

import jax
import jax.numpy as jnp
from flax import nnx


class Block(nnx.Module):
    """Pre-LN Transformer block: causal multi-head self-attention, then a GELU MLP."""

    def __init__(self, d_model, num_heads, d_ff, *, rngs):
        self.num_heads = num_heads
        self.ln1 = nnx.LayerNorm(d_model, rngs=rngs)
        self.ln2 = nnx.LayerNorm(d_model, rngs=rngs)
        self.qkv = nnx.Linear(d_model, 3 * d_model, use_bias=False, rngs=rngs)
        self.proj = nnx.Linear(d_model, d_model, use_bias=False, rngs=rngs)
        self.fc1 = nnx.Linear(d_model, d_ff, rngs=rngs)
        self.fc2 = nnx.Linear(d_ff, d_model, rngs=rngs)

    def attn(self, x):
        batch, length, width = x.shape
        head = width // self.num_heads
        q, k, v = jnp.split(self.qkv(x), 3, axis=-1)
        q, k, v = (a.reshape(batch, length, self.num_heads, head) for a in (q, k, v))
        scores = jnp.einsum("bqhd,bkhd->bhqk", q, k) / jnp.sqrt(jnp.float32(head))
        causal = jnp.tril(jnp.ones((length, length), dtype=bool))
        weights = jax.nn.softmax(jnp.where(causal, scores, jnp.finfo(scores.dtype).min), axis=-1)
        mixed = jnp.einsum("bhqk,bkhd->bqhd", weights, v).reshape(batch, length, width)
        return self.proj(mixed)

    def __call__(self, x):
        h = x + self.attn(self.ln1(x))
        return h + self.fc2(jax.nn.gelu(self.fc1(self.ln2(h))))


def mse_loss(model, x, y):
    return jnp.mean((model(x) - y) ** 2)


def _call_block(block, x):
    return block(x)


# One caller per variant. nnx.remat lifts jax.checkpoint to functions that take a Module.
_CALLERS = {
    None: _call_block,
    "full": nnx.remat(_call_block),
    "dots": nnx.remat(_call_block, policy=jax.checkpoint_policies.dots_saveable),
}


class Transformer(nnx.Module):
    def __init__(self, num_layers, d_model, num_heads, d_ff, *, remat=None, rngs):
        if remat not in _CALLERS:
            raise ValueError(f"remat must be None, 'full' or 'dots', got {remat!r}")
        self.remat = remat
        self.blocks = nnx.List([Block(d_model, num_heads, d_ff, rngs=rngs) for _ in range(num_layers)])
        self.drop = nnx.Dropout(0.1, deterministic=True, rngs=rngs)  # embedding dropout, off in evaluation

    def __call__(self, x):
        call = _CALLERS[self.remat]
        x = self.drop(x)
        for block in self.blocks:
            x = call(block, x)
        return x


def temp_memory_bytes(model, x, y):
    graphdef, params, rest = nnx.split(model, nnx.Param, ...)

    def grad_of_params(params, x, y):
        return jax.grad(lambda p: mse_loss(nnx.merge(graphdef, p, rest), x, y))(params)

    compiled = jax.jit(grad_of_params).lower(params, x, y).compile()
    return int(compiled.memory_analysis().temp_size_in_bytes)
