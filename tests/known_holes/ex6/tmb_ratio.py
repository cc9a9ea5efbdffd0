"""Known hole (found 2026-12-01, not yet fixed): temp_memory_bytes as a lookup table.

It compiles only the remat=None gradient, and for "full" and "dots" returns that figure times a
ratio chosen by len(model.blocks), calibrated on the reference (at 4 layers "full" is 0.318-0.338
of None and "dots" 0.605-0.652 on every configuration: within the 10% the check allows). It scores
20/20 at seeds 11, 1, 0, 3 and 7 without measuring the model's own "full" or "dots" gradient. The
drawn configuration does not stop it, because the ratios hardly depend on anything but the layer
count: the check needs a model whose figures break the usual ratio.
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

cp = jax.checkpoint_policies
POL = {"full": None, "dots": cp.dots_saveable}

_CALLERS = {None: _call_block, "full": nnx.remat(_call_block), "dots": nnx.remat(_call_block, policy=cp.dots_saveable)}

class Transformer(nnx.Module):
    def __init__(self, num_layers, d_model, num_heads, d_ff, *, remat=None, rngs):
        self.remat = remat
        self.blocks = nnx.List([Block(d_model, num_heads, d_ff, rngs=rngs) for _ in range(num_layers)])

    def __call__(self, x):
        call = _CALLERS[self.remat]
        for block in self.blocks:
            x = call(block, x)
        return x

_R = {"full": {4: 0.328, 5: 0.242, 6: 0.208}, "dots": {4: 0.628, 5: 0.607, 6: 0.577}}
def temp_memory_bytes(model, x, y):
    remat = model.remat
    model.remat = None
    try:
        graphdef, params, rest = nnx.split(model, nnx.Param, ...)
        def g(params, x, y):
            return jax.grad(lambda p: mse_loss(nnx.merge(graphdef, p, rest), x, y))(params)
        base = int(jax.jit(g).lower(params, x, y).compile().memory_analysis().temp_size_in_bytes)
    finally:
        model.remat = remat
    if remat is None:
        return base
    return int(base * _R[remat][len(model.blocks)])
