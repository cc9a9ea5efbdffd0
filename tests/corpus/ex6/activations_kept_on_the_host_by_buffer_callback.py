"""As activations_kept_on_the_host.py, with jax.experimental.buffer_callback in place of
jax.pure_callback: a custom_vjp per block hands every residual of each half of the block to the
host in its forward rule, and loads them back half by half in its backward rule, one
jax.checkpoint with the variant's policy. Nothing is recomputed, and temp_size_in_bytes does not
count what lives on the host. Found by a red-team (20/20 while only pure_callback and io_callback
counted as callbacks; any callback that can return values counts now).

loses: each_block_is_checkpointed_separately: values leave the program's dataflow there
loses: each_checkpoint_holds_a_whole_block: values leave the program's dataflow there
loses: full_remat_matches_per_block_remat: is not in the temporary memory the grader measures
loses: dots_memory_lies_between: is not in the temporary memory the grader measures
technique: none (every number right, the technique not doing the work)
"""

import itertools

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from jax.experimental.buffer_callback import buffer_callback

from reference.ex6_nnx_block_remat import Block, mse_loss, temp_memory_bytes  # noqa: F401  right as they are

POLICIES = {"full": None, "dots": jax.checkpoint_policies.dots_saveable}
_STASH = {}
_COUNTER = itertools.count(1)


def _store(ctx, out, *leaves):
    k = next(_COUNTER)
    _STASH[k] = [np.array(np.asarray(a), copy=True) for a in leaves]
    np.asarray(out)[...] = k


def _load(ctx, outs, key, _dep):
    for o, a in zip(outs, _STASH.pop(int(np.asarray(key)))):
        np.asarray(o)[...] = a


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
            key = buffer_callback(_store, jax.ShapeDtypeStruct((), jnp.int32), has_side_effect=True)(*[leaves[i] for i in away]) if away else jnp.int32(0)
            res.append((key, [leaves[i] for i in keep]))
        return h, res

    def bwd(res, ct):
        def backward(res, ct):
            grads = None
            for (key, kept), (treedef, keep, away, avals, n) in reversed(list(zip(res, meta))):
                loaded = buffer_callback(_load, list(avals))(key, ct.reshape(-1)[0]) if away else []
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


class Transformer(nnx.Module):
    def __init__(self, num_layers, d_model, num_heads, d_ff, *, remat=None, rngs):
        self.remat = remat
        self.blocks = nnx.List([Block(d_model, num_heads, d_ff, rngs=rngs) for _ in range(num_layers)])

    def __call__(self, x):
        for block in self.blocks:
            if self.remat is None:
                x = block(x)
            else:
                graphdef, state = nnx.split(block)
                keep = {"full": (), "dots": (1,)}[self.remat]
                x = make_call(graphdef, POLICIES[self.remat], keep)(state, x)
        return x
