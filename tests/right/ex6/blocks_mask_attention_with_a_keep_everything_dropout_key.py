"""Right: per-block nnx.remat (the reference), each block masking its attention output with a
dropout mask of keep probability 1.0 (every value kept: the reference's numbers), drawn by
jax.random.bernoulli from a typed key made in the block (jax.random.key(0) folded with the
sequence length), as a model does before its dropout is turned on.

Full marks (20/20 with and without --sandbox at seeds 20261130, 7 and 0): the key, its fold_in and
the mask's bits are ordinary data in the programs the judge reads. Was 8/20: the program encoding
refused the primitive random_seed, so no gradient program could be read.
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
        keep = jax.random.bernoulli(jax.random.fold_in(jax.random.key(0), x.shape[1]), 1.0, x.shape)  # keep probability 1.0 for now
        h = x + jnp.where(keep, self.attn(self.ln1(x)), 0.0)
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

    def __call__(self, x):
        call = _CALLERS[self.remat]
        for block in self.blocks:
            x = call(block, x)
        return x


def temp_memory_bytes(model, x, y):
    graphdef, params, rest = nnx.split(model, nnx.Param, ...)

    def grad_of_params(params, x, y):
        return jax.grad(lambda p: mse_loss(nnx.merge(graphdef, p, rest), x, y))(params)

    compiled = jax.jit(grad_of_params).lower(params, x, y).compile()
    return int(compiled.memory_analysis().temp_size_in_bytes)
