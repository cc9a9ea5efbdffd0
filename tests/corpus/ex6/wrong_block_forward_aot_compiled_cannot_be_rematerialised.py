"""WRONG: each Block's forward is a jax.stages.Compiled call (compiled ahead of time per graph and
argument types). Transformer(remat=None)(x) runs eagerly, but the remat variants (nnx.remat traces
the block) and temp_memory_bytes (a jit of the gradient) raise TypeError in any real use ("Cannot
apply JAX transformations to a function lowered and compiled for a particular signature"); so does
any gradient.

Scored 20/20 with and without --sandbox, seeds 20261130, 7 and 0: while a probe runs, every Compiled
made meanwhile and called with tracers is bound as the jit it was compiled from
(program.compiled_calls_traced), which JAX itself never does. Should score 2/20 (what it scored at
67c386f).

Now 2/20 at seed 20261130 without --sandbox (a Compiled is traced as its jit only where it is called at the top level of the step a training loop calls, not inside the learner's own jit, grad, scan or shard_map, where a real run refuses it too: program.compiled_calls_traced, probes.step_maker).

loses: gradients_match_a_plain_stack: lowered and compiled
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
        graphdef, state = nnx.split(self)
        return _compiled(graphdef, state, x)(state, x)

    def forward(self, x):
        h = x + self.attn(self.ln1(x))
        return h + self.fc2(jax.nn.gelu(self.fc1(self.ln2(h))))


_CACHE = {}


def _spec(a):
    return jax.ShapeDtypeStruct(jnp.shape(a), jnp.result_type(a))


def _compiled(graphdef, state, x):
    specs = jax.tree.map(_spec, (state, x))
    key = (graphdef, str(jax.tree.structure(specs)), tuple((s.shape, s.dtype) for s in jax.tree.leaves(specs)))
    if key not in _CACHE:
        def apply(state, x):
            return nnx.merge(graphdef, state).forward(x)
        _CACHE[key] = jax.jit(apply).trace(*specs).lower().compile()
    return _CACHE[key]


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
