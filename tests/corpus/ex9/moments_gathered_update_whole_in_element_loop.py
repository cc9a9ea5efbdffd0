"""Wrong: no ZeRO-1 inside the step. Every device sums the whole gradient (lax.psum of many small
pieces), rebuilds the whole moments (every block passed round the ring with lax.ppermute, no
all-gather), and updates every parameter and moment whole, as one flat buffer walked 8 values at a
time in a lax.fori_loop (XLA's cost analysis counts the loop body once); then it keeps its block of
the moments and all-gathers its block of the new params (already whole on every device) for show.
Every number is right; the moments are stored split between steps, so it keeps the placement
points. (found by the red team of issue 31's judge)

loses: gradients_are_not_summed_whole: in pieces or as stacked copies
loses: only_the_updated_parameters_are_all_gathered: Moments sharded but gathered inside the step
loses: each_device_updates_only_its_blocks: Each device updates whole leaves
"""
import jax
import jax.numpy as jnp
from jax import lax
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

LN_EPS = 1e-5


def init_params(key, d_in, d_hidden, d_out):
    k1, k2 = jax.random.split(key)
    return {"dense1": {"kernel": jax.random.normal(k1, (d_in, d_hidden)) / jnp.sqrt(d_in),
                       "bias": jnp.zeros((d_hidden,))},
            "norm": {"scale": jnp.ones((d_hidden,))},
            "dense2": {"kernel": jax.random.normal(k2, (d_hidden, d_out)) / jnp.sqrt(d_hidden),
                       "bias": jnp.zeros((d_out,))}}


def mlp(params, x):
    h = x @ params["dense1"]["kernel"] + params["dense1"]["bias"]
    mean = jnp.mean(h, axis=-1, keepdims=True)
    var = jnp.mean((h - mean) ** 2, axis=-1, keepdims=True)
    h = (h - mean) * lax.rsqrt(var + LN_EPS) * params["norm"]["scale"]
    return jnp.tanh(h) @ params["dense2"]["kernel"] + params["dense2"]["bias"]


def loss(params, x, y):
    return jnp.mean((mlp(params, x) - y) ** 2)


def make_mesh(n=8):
    return jax.make_mesh((n,), ("data",), devices=jax.devices()[:n])


def decay_mask(params):
    return jax.tree.map(lambda p: p.ndim >= 2, params)


def adamw_step(params, grads, state, lr, b1, b2, eps, wd, mask):
    count = state["count"] + 1
    mu = jax.tree.map(lambda m, g: b1 * m + (1 - b1) * g, state["mu"], grads)
    nu = jax.tree.map(lambda v, g: b2 * v + (1 - b2) * g * g, state["nu"], grads)
    c1, c2 = 1 - b1 ** count, 1 - b2 ** count  # bias corrections for step t = count

    def update(p, m, v, decay):
        new = p - lr * (m / c1) / (jnp.sqrt(v / c2) + eps)  # the Adam step
        return new - lr * wd * p if decay else new          # decoupled decay, from theta_{t-1}

    return jax.tree.map(update, params, mu, nu, mask), {"mu": mu, "nu": nu, "count": count}


def split_axis(shape, n):
    """The first axis of a leaf that n divides, or None: the leaf then stays replicated."""
    return next((i for i, d in enumerate(shape) if d % n == 0), None)


def zero1_spec(shape, n):
    axis = split_axis(shape, n)
    return P() if axis is None else P(*([None] * axis), "data")


def piece_size(leaves, n):
    """The largest piece smaller than every leaf ZeRO-1 splits on n devices: no piece is a whole gradient."""
    return min(int(p.size) for p in leaves if split_axis(p.shape, n) is not None) - 1


def init_zero1_state(params, mesh):
    n = mesh.shape["data"]

    def zeros(p):
        return jax.device_put(jnp.zeros(p.shape, jnp.float32), NamedSharding(mesh, zero1_spec(p.shape, n)))

    return {"mu": jax.tree.map(zeros, params), "nu": jax.tree.map(zeros, params),
            "count": jax.device_put(jnp.zeros((), jnp.int32), NamedSharding(mesh, P()))}


ROW = 8


def make_zero1_step(mesh, lr=1e-3, b1=0.9, b2=0.999, eps=1e-8, wd=1e-2):
    n = mesh.shape["data"]
    size = [1]  # piece_size of the params step is traced with

    def summed(t):
        flat = t.reshape(-1)
        pieces = [flat[k:k + size[0]] for k in range(0, flat.size, size[0])]
        return jnp.concatenate(lax.psum(pieces, "data")).reshape(t.shape)

    @jax.jit
    def step(params, state, x, y):
        leaves, treedef = jax.tree.flatten(params)
        size[0] = piece_size(leaves, n)
        axes = [split_axis(p.shape, n) for p in leaves]
        specs = treedef.unflatten([zero1_spec(p.shape, n) for p in leaves])
        state_specs = {"mu": specs, "nu": specs, "count": P()}
        mask = jax.tree.leaves(decay_mask(params))

        def local(params, state, x, y):
            i = lax.axis_index("data")
            value, grads = jax.value_and_grad(loss)(params, x, y)
            g = [summed(t) / n for t in jax.tree.leaves(grads)]
            p = jax.tree.leaves(params)
            mus, nus = jax.tree.leaves(state["mu"]), jax.tree.leaves(state["nu"])
            count = state["count"] + 1
            c1, c2 = 1 - b1 ** count, 1 - b2 ** count

            def whole(b, a, shape):
                if a is None:
                    return b
                k = shape[a] // n
                out = lax.dynamic_update_slice_in_dim(jnp.zeros(shape, b.dtype), b, i * k, a)
                for s in range(1, n):
                    got = lax.ppermute(b, "data", perm=[(j, (j + s) % n) for j in range(n)])
                    out = lax.dynamic_update_slice_in_dim(out, got, ((i - s) % n) * k, a)
                return out

            m = [whole(b, a, q.shape) for b, a, q in zip(mus, axes, p)]
            v = [whole(b, a, q.shape) for b, a, q in zip(nus, axes, p)]
            sizes = [q.size for q in p]
            total = sum(sizes)
            pad = (-total) % ROW
            flat = lambda ts: jnp.concatenate([t.reshape(-1) for t in ts] + [jnp.zeros(pad)]).reshape(-1, ROW)  # noqa: E731
            decay = flat([jnp.full(q.shape, 1.0 if d else 0.0) for q, d in zip(p, mask)])
            P_, G_, M_, V_ = flat(p), flat(g), flat(m), flat(v)

            def body(r, carry):
                Pc, Mc, Vc = carry
                pr, gr, mr, vr, dr = (lax.dynamic_index_in_dim(t, r, 0, keepdims=False) for t in (P_, G_, M_, V_, decay))
                mr = b1 * mr + (1 - b1) * gr
                vr = b2 * vr + (1 - b2) * gr * gr
                new = pr - lr * (mr / c1) / (jnp.sqrt(vr / c2) + eps) - dr * (lr * wd) * pr
                return (lax.dynamic_update_index_in_dim(Pc, new, r, 0), lax.dynamic_update_index_in_dim(Mc, mr, r, 0),
                        lax.dynamic_update_index_in_dim(Vc, vr, r, 0))

            Pn, Mn, Vn = (t.reshape(-1)[:total] for t in lax.fori_loop(0, P_.shape[0], body, (P_, M_, V_)))

            def unflat(t):
                out, at = [], 0
                for q, s in zip(p, sizes):
                    out.append(t[at:at + s].reshape(q.shape))
                    at += s
                return out

            newP, newM, newV = unflat(Pn), unflat(Mn), unflat(Vn)
            outP, outM, outV = [], [], []
            for idx, a in enumerate(axes):
                if a is None:
                    outP.append(newP[idx]); outM.append(newM[idx]); outV.append(newV[idx])  # noqa: E702
                    continue
                k = p[idx].shape[a] // n
                mine = lambda t: lax.dynamic_slice_in_dim(t, i * k, k, a)  # noqa: E731
                outP.append(lax.all_gather(mine(newP[idx]), "data", axis=a, tiled=True))
                outM.append(mine(newM[idx])); outV.append(mine(newV[idx]))  # noqa: E702
            new_state = {"mu": treedef.unflatten(outM), "nu": treedef.unflatten(outV), "count": count}
            return treedef.unflatten(outP), new_state, lax.pmean(value, "data")

        return jax.shard_map(local, mesh=mesh, in_specs=(P(), state_specs, P("data"), P("data")),
                             out_specs=(P(), state_specs, P()), check_vma=False)(params, state, x, y)

    return step
