"""Right: per-block nnx.remat (the reference) whose checkpointed function takes a PRNG key as an
argument beside the block and x: the Transformer splits jax.random.key(0) into one key per block,
and each block multiplies its MLP output by a residual-dropout mask of keep probability 1.0
(every unit kept: the reference's numbers).

Full marks (20/20 with and without --sandbox at seeds 20261130, 7 and 0): each remat2 body has a key
input, which the policy's measurement (checkpoint_residuals) differentiates around.
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

    def __call__(self, x, key):
        h = x + self.attn(self.ln1(x))
        out = self.fc2(jax.nn.gelu(self.fc1(self.ln2(h))))
        keep = jax.random.bernoulli(key, 1.0, out.shape)  # residual dropout, keep probability 1.0 for now
        return h + out * keep


def mse_loss(model, x, y):
    return jnp.mean((model(x) - y) ** 2)


def _call_block(block, x, key):
    return block(x, key)


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
        keys = jax.random.split(jax.random.key(0), len(self.blocks))  # one dropout key per block
        for i, block in enumerate(self.blocks):
            x = call(block, x, keys[i])
        return x


def temp_memory_bytes(model, x, y):
    graphdef, params, rest = nnx.split(model, nnx.Param, ...)

    def grad_of_params(params, x, y):
        return jax.grad(lambda p: mse_loss(nnx.merge(graphdef, p, rest), x, y))(params)

    compiled = jax.jit(grad_of_params).lower(params, x, y).compile()
    return int(compiled.memory_analysis().temp_size_in_bytes)
