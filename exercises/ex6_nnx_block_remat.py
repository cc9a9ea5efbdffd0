"""Exercise 6: per-block rematerialisation (nnx.remat) in an NNX Transformer.

Backpropagation needs every block's intermediate values (LayerNorm outputs, attention scores,
the MLP's hidden layer, ...). Without checkpointing they are all kept from the forward pass until
the backward pass reaches them, so activation memory grows with the number of layers.
Wrapping each block's call in `nnx.remat` (NNX's lifted `jax.checkpoint`) keeps only each
block's *input* and recomputes the rest when the backward pass needs it; with
`policy=jax.checkpoint_policies.dots_saveable` the matmul results are kept as well and only the
cheap elementwise work (LayerNorm, softmax, GELU) is recomputed.

`Block` and `mse_loss` below are given: the grader reads the block's parameters by these
attribute names and recomputes the block itself, so leave them as they are. You write
`Transformer` and `temp_memory_bytes`.

Pitfalls from an NNX rematerialization tutorial (do not copy them):
  * `jax.checkpoint(lambda b, x: b(x), block, x)` raises `TypeError: checkpoint() takes 1
    positional argument but 3 were given`: `jax.checkpoint` (like `nnx.remat`) takes a function
    and *returns* a new, checkpointed function; it does not call anything. The idea behind the
    line is right: checkpoint a function that runs *one* block, then call it for every block.
  * `@jax.remat(policy=...)` used as a decorator raises `TypeError: remat() missing 1 required
    positional argument: 'fun'`: the function is a required argument. Write
    `functools.partial(jax.remat, policy=...)` as the decorator, or call
    `jax.remat(fun, policy=...)`.
  * `jax.checkpoint_policies.save_only_these_names('dot_general')` raises nothing, but saves
    nothing either: the names it matches are tags you put on values with
    `checkpoint_name(value, "some_name")` (`from jax.ad_checkpoint import checkpoint_name`;
    `jax.ad_checkpoint.checkpoint_name` after a bare `import jax` raises AttributeError), not
    primitive names. No value in the block carries the tag 'dot_general', so the "policy"
    quietly turns into full recomputation.
  * "checkpointing each block takes activation memory from O(layers) to O(1)" is wrong: each
    block's *input* is still kept for the backward pass, so memory stays O(layers), with a much
    smaller constant (one activation per block instead of all of its intermediates).

What is checked (`make grade EX=ex6`), on a configuration the grader draws at grading time
(the report prints it; do not assume any particular shape):
  * every variant (remat=None, "full", "dots") built from the same `nnx.Rngs` holds the same
    parameters, and its outputs and its gradients with respect to every `nnx.Param` equal the
    grader's own plain (uncheckpointed) stack of the blocks, computed from those parameters;
  * the gradient of "full" and of "dots" holds exactly one working checkpoint (`remat2`) per
    block (a checkpoint whose result is discarded, multiplied by zero or cut off by
    stop_gradient does no work and is not counted), and none for None; the grader reads it in
    the gradient program it compiles and measures, where each block's parameter gradients must
    be computed inside that block's own checkpoint, which recomputes the block from its input
    (it may use no more of the forward pass's values than a jax.checkpoint around the block),
    as well as in model(x) traced alone; no jax.pure_callback, io_callback or jax.new_ref;
  * each checkpoint holds all of one block -- both residual halves, every matmul and LayerNorm
    -- and no block work runs outside the checkpoints;
  * the policy of every checkpoint: none (or nothing_saveable) for "full", `dots_saveable` for
    "dots" (judged by what it keeps of a block, measured: a policy written another way that
    keeps the same values is the same policy);
  * temporary memory, measured by the grader: "full" needs no more than the grader's own
    gradient with one `jax.checkpoint` around each block, and "dots" lies strictly between
    "full" and None (the report shows the figures);
  * `temp_memory_bytes` returns the grader's figure (within 3%; the temporary memory alone,
    not added to any other field of memory_analysis()) for a model of the
    grader's own, of three small blocks of its own, not Transformer blocks (one run plainly,
    one "full", one "dots", in an order drawn at grading time), of sizes drawn at grading time:
    measure the model you are given, whatever it is.
"""

import jax
import jax.numpy as jnp
from flax import nnx


class Block(nnx.Module):
    """Pre-LN Transformer block (given): causal multi-head self-attention, then a GELU MLP.

    x: (B, T, d_model) float32 -> (B, T, d_model).
        h   = x + attn(ln1(x))
        out = h + fc2(gelu(fc1(ln2(h))))
    """

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
    """Mean squared error of model(x) against y (given)."""
    return jnp.mean((model(x) - y) ** 2)


class Transformer(nnx.Module):
    """A stack of `num_layers` Blocks applied one after the other: x -> block_0 -> ... -> out.

    __init__(num_layers, d_model, num_heads, d_ff, *, remat=None, rngs):
      * store the blocks in `self.blocks`, an `nnx.List` of `Block(d_model, num_heads, d_ff,
        rngs=rngs)` in the order they are applied (a plain Python list of Modules is refused
        by NNX); create them the same way whatever `remat` is, so that the three variants built
        from the same `nnx.Rngs` hold the same parameters;
      * keep `remat` (None, "full" or "dots") for __call__.
    __call__(x): x (B, T, d_model) -> (B, T, d_model), applying every block once, in order:
      * remat=None:   call each block plainly;
      * remat="full": call each block through `nnx.remat` -- one checkpoint *per block*, not one
                      around the whole stack;
      * remat="dots": the same, with `policy=jax.checkpoint_policies.dots_saveable`.
    """

    def __init__(self, num_layers, d_model, num_heads, d_ff, *, remat=None, rngs):
        raise NotImplementedError

    def __call__(self, x):
        raise NotImplementedError


def temp_memory_bytes(model, x, y):
    """Temporary memory, in bytes (an int), of the compiled gradient of `mse_loss(model, x, y)`
    with respect to the model's `nnx.Param` state.

    Split the model into its graph definition and its parameters (`nnx.split(model, nnx.Param,
    ...)`), write a pure function of the parameters that merges them back (`nnx.merge`) and
    returns `jax.grad` of `mse_loss`, then read `temp_size_in_bytes` from
    `jax.jit(f).lower(...).compile().memory_analysis()`. Nothing is executed.
    """
    raise NotImplementedError
