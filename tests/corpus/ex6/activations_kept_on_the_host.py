"""Recomputes nothing and keeps the activations on the host: differentiated (a parameter is then a
JVPTracer or LinearizeTracer), each block is a jax.custom_vjp whose forward rule hands the
residuals of each half of the block to the host with jax.pure_callback, and whose backward rule,
one jax.checkpoint with the variant's policy, loads them back half by half. temp_size_in_bytes
does not count what lives on the host, so its memory looked like per-block remat's. Traced
alone, plain per-block nnx.remat. Found by a red-team (20/20, also under --sandbox, before
callbacks were refused).

loses: each_block_is_checkpointed_separately: values leave the program's dataflow there
loses: each_checkpoint_holds_a_whole_block: values leave the program's dataflow there
loses: full_remat_matches_per_block_remat: is not in the temporary memory the grader measures
loses: dots_memory_lies_between: is not in the temporary memory the grader measures
technique: none (every number right, the technique not doing the work)
"""
import itertools
import numpy as np
import jax
import jax.numpy as jnp
from flax import nnx

from reference.ex6_nnx_block_remat import Block, mse_loss, temp_memory_bytes  # noqa: F401  right as they are


POLICIES = {"full": None, "dots": jax.checkpoint_policies.dots_saveable}
_STASH = {}
_COUNTER = itertools.count(1)


def _store(*leaves):
    k = next(_COUNTER)
    _STASH[k] = [np.asarray(a).copy() for a in leaves]
    return np.int32(k)


def _load(key, _dep):
    return _STASH.pop(int(key))


def attn_stage(graphdef, state, x):
    b = nnx.merge(graphdef, state)
    return x + b.attn(b.ln1(x))


def mlp_stage(graphdef, state, h):
    b = nnx.merge(graphdef, state)
    return h + b.fc2(jax.nn.gelu(b.fc1(b.ln2(h))))


STAGES = (attn_stage, mlp_stage)


def make_call(graphdef, policy, keep_stages):
    def f(state, x):
        for s in STAGES:
            x = s(graphdef, state, x)
        return x

    @jax.custom_vjp
    def g(state, x):
        return jax.checkpoint(f, policy=policy)(state, x)

    meta = []

    def fwd(state, x):
        meta.clear()
        inputs = {id(a) for a in jax.tree_util.tree_leaves(state)}
        res = []
        h = x
        for k, s in enumerate(STAGES):
            h, vjp_fn = jax.vjp(lambda st, z, s=s: s(graphdef, st, z), state, h)
            leaves, treedef = jax.tree_util.tree_flatten(vjp_fn)
            keep = [i for i, a in enumerate(leaves) if id(a) in inputs or k in keep_stages]
            away = [i for i, a in enumerate(leaves) if i not in keep]
            meta.append((treedef, keep, away, [jax.ShapeDtypeStruct(leaves[i].shape, leaves[i].dtype) for i in away], len(leaves)))
            key = jax.pure_callback(_store, jax.ShapeDtypeStruct((), jnp.int32), *[leaves[i] for i in away]) if away else jnp.int32(0)
            res.append((key, [leaves[i] for i in keep]))
        return h, res

    def bwd(res, ct):
        def backward(res, ct):
            grads = None
            for (key, kept), (treedef, keep, away, avals, n) in reversed(list(zip(res, meta))):
                loaded = jax.pure_callback(_load, avals, key, ct.reshape(-1)[0]) if away else []
                leaves = [None] * n
                for i, a in zip(keep, kept):
                    leaves[i] = a
                for i, a in zip(away, loaded):
                    leaves[i] = a
                dstate, ct = jax.tree_util.tree_unflatten(treedef, leaves)(ct)
                grads = dstate if grads is None else jax.tree_util.tree_map(jnp.add, grads, dstate)
            return grads, ct
        return jax.checkpoint(backward, policy=policy)(res, ct)

    g.defvjp(fwd, bwd)
    return g


def differentiated(block) -> bool:
    return type(block.qkv.kernel[...]).__name__ in ("JVPTracer", "LinearizeTracer")


class Transformer(nnx.Module):
    def __init__(self, num_layers, d_model, num_heads, d_ff, *, remat=None, rngs):
        self.remat = remat
        self.blocks = nnx.List([Block(d_model, num_heads, d_ff, rngs=rngs) for _ in range(num_layers)])

    def __call__(self, x):
        for block in self.blocks:
            if self.remat is None:
                x = block(x)
            else:
                if not differentiated(block):
                    x = nnx.remat(lambda b, x: b(x), policy=POLICIES[self.remat])(block, x)
                    continue
                graphdef, state = nnx.split(block)
                keep = {"full": (), "dots": (1,)}[self.remat]
                x = make_call(graphdef, POLICIES[self.remat], keep)(state, x)
        return x
