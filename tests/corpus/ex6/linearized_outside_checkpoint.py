"""No custom_vjp and no callback: differentiated (tracer sniffing), each block is linearised with
jax.linearize at stop_gradient'ed parameters and input, outside any checkpoint, and only the
linear map, applied to (p - sg(p), x - sg(x)), runs inside jax.checkpoint with the variant's
policy. Its inputs are the linearisation's residuals, so every activation is kept and nothing is
recomputed; four of the six matmuls are written as multiply-and-sum so that the work outside
checkpoints counts like one block's forward pass. Found by a red-team (17/20 before the
checkpoints' inputs were read).

loses: each_block_is_checkpointed_separately: the block's activations are kept for the backward pass, not recomputed
loses: each_checkpoint_holds_a_whole_block: bytes of the forward pass's values
loses: full_remat_matches_per_block_remat: remat='full' needs
technique: none (every number right, the technique not doing the work)
"""
import jax
import jax.numpy as jnp
from flax import nnx

from reference.ex6_nnx_block_remat import Block, mse_loss, temp_memory_bytes  # noqa: F401  right as they are


POLICIES = {"full": None, "dots": jax.checkpoint_policies.dots_saveable}
PATHS = ("ln1.scale", "ln1.bias", "qkv.kernel", "proj.kernel", "ln2.scale", "ln2.bias",
         "fc1.kernel", "fc1.bias", "fc2.kernel", "fc2.bias")


def differentiated(block) -> bool:
    return type(block.qkv.kernel[...]).__name__ in ("JVPTracer", "LinearizeTracer")


def mm_sum(a, w):  # a matmul without dot_general
    return (a[..., :, None] * w).sum(-2)


def ln(x, scale, bias):
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) * jax.lax.rsqrt(var + 1e-6) * scale + bias


def block_math(p, x, heads):
    b, t, d = x.shape
    hd = d // heads
    a = ln(x, p["ln1.scale"], p["ln1.bias"])
    q, k, v = (z.reshape(b, t, heads, hd) for z in jnp.split(mm_sum(a, p["qkv.kernel"]), 3, axis=-1))
    s = (q[:, :, None] * k[:, None]).sum(-1).transpose(0, 3, 1, 2) / jnp.sqrt(jnp.float32(hd))
    s = jnp.where(jnp.tril(jnp.ones((t, t), bool)), s, jnp.finfo(s.dtype).min)
    w = jax.nn.softmax(s, axis=-1)                                  # b h q k
    o = (w.transpose(0, 2, 3, 1)[..., None] * v[:, None]).sum(2).reshape(b, t, d)
    h = x + mm_sum(o, p["proj.kernel"])
    m = jax.nn.gelu(ln(h, p["ln2.scale"], p["ln2.bias"]) @ p["fc1.kernel"] + p["fc1.bias"])
    return h + m @ p["fc2.kernel"] + p["fc2.bias"]


def run(block, x, policy):
    if not differentiated(block):
        return nnx.remat(lambda b, x: b(x), policy=policy)(block, x)
    p = {k: getattr(getattr(block, k.split(".")[0]), k.split(".")[1])[...] for k in PATHS}
    sg = jax.lax.stop_gradient
    p0, x0 = jax.tree.map(sg, p), sg(x)
    y0, lin = jax.linearize(lambda p, x: block_math(p, x, block.num_heads), p0, x0)
    dp = jax.tree.map(lambda a, b: a - b, p, p0)
    return y0 + jax.checkpoint(lambda dp, dx: lin(dp, dx), policy=policy)(dp, x - x0)


class Transformer(nnx.Module):
    def __init__(self, num_layers, d_model, num_heads, d_ff, *, remat=None, rngs):
        self.remat = remat
        self.blocks = nnx.List([Block(d_model, num_heads, d_ff, rngs=rngs) for _ in range(num_layers)])

    def __call__(self, x):
        for block in self.blocks:
            x = block(x) if self.remat is None else run(block, x, POLICIES[self.remat])
        return x
