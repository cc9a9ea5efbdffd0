"""RIGHT (flat partition buffers, DeepSpeed's layout of a ZeRO-1 partition): ZeRO-1 in shard_map, each
leaf's gradient reduce-scattered with lax.psum_scatter; then each device ravels its blocks of the split
leaves and concatenates them into one buffer for the decayed leaves and one for the others, runs
adamw_step once on those two buffers (mask {decay: True, rest: False}), cuts them back into blocks and
all-gathers those leaf by leaf. Leaves the mesh does not split are updated whole, as they are.

Scored before the grader's fix (seed 20261130): 16/19 with and without --sandbox; seed 7: 16/19 and 16/19.
Should score: 19/19.
Checks failed then: each_device_updates_only_its_blocks (3): FLOPs on 4 devices "2.2 times" a 1/4 share
(bound 2); the values it counts read 1.82 / 1.83 times the share on 8 / 4 (bounds pass).
Why: each device does touch only its blocks (the collectives are the reference's). XLA duplicates the
moments' update into each fusion that consumes the new flat moments (the slices back to blocks for the
state, and the parameter update), and its cost analysis counts every copy. Since the grader's fix the FLOPs
read are XLA's less those duplicates (checks.duplicated_flops), for the grader's own programs too:
1.07 times the share on 8 and 4 devices, as the reference.
Grade: put this file as ex9_zero1_adamw.py in a folder D; .venv/bin/python -m graders ex9 --solutions D -v --seed 20261130 [--sandbox]
"""
import math
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


def init_zero1_state(params, mesh):
    n = mesh.shape["data"]

    def zeros(p):
        return jax.device_put(jnp.zeros(p.shape, jnp.float32), NamedSharding(mesh, zero1_spec(p.shape, n)))

    return {"mu": jax.tree.map(zeros, params), "nu": jax.tree.map(zeros, params),
            "count": jax.device_put(jnp.zeros((), jnp.int32), NamedSharding(mesh, P()))}


def make_zero1_step(mesh, lr=1e-3, b1=0.9, b2=0.999, eps=1e-8, wd=1e-2):
    n = mesh.shape["data"]

    @jax.jit
    def step(params, state, x, y):
        axes = jax.tree.map(lambda p: split_axis(p.shape, n), params)
        specs = jax.tree.map(lambda p: zero1_spec(p.shape, n), params)
        state_specs = {"mu": specs, "nu": specs, "count": P()}
        mask = decay_mask(params)
        leaves, treedef = jax.tree.flatten(params)
        ax = treedef.flatten_up_to(axes)
        dm = treedef.flatten_up_to(mask)
        groups = {"decay": [i for i, a in enumerate(ax) if a is not None and dm[i]],
                  "rest": [i for i, a in enumerate(ax) if a is not None and not dm[i]]}
        whole = [i for i, a in enumerate(ax) if a is None]

        def local(params, blocks, state, x, y):
            value, grads = jax.value_and_grad(loss)(lax.pcast(params, "data", to="varying"), x, y)

            def reduce(g, axis):
                if axis is None:
                    return lax.psum(g, "data") / n
                return lax.psum_scatter(g, "data", scatter_dimension=axis, tiled=True) / n

            grads = jax.tree.map(reduce, grads, axes)
            flat = lambda t: treedef.flatten_up_to(t)
            b, g, m, v = flat(blocks), flat(grads), flat(state["mu"]), flat(state["nu"])
            pack = lambda ls: {k: jnp.concatenate([ls[i].ravel() for i in idx]) if idx else jnp.zeros((0,))
                               for k, idx in groups.items()}
            shapes = [blk.shape for blk in b]
            fp, fs = adamw_step(pack(b), pack(g), {"mu": pack(m), "nu": pack(v), "count": state["count"]},
                                lr, b1, b2, eps, wd, {"decay": True, "rest": False})
            kp, ks = adamw_step([b[i] for i in whole], [g[i] for i in whole],
                                {"mu": [m[i] for i in whole], "nu": [v[i] for i in whole], "count": state["count"]},
                                lr, b1, b2, eps, wd, [dm[i] for i in whole])

            def unpack(buffers, kept):
                out = [None] * len(b)
                for k, idx in groups.items():
                    at = 0
                    for i in idx:
                        size = math.prod(shapes[i])
                        out[i] = buffers[k][at:at + size].reshape(shapes[i])
                        at += size
                for i, w in zip(whole, kept):
                    out[i] = w
                return out

            new_b = unpack(fp, kp)
            new_state = {"mu": treedef.unflatten(unpack(fs["mu"], ks["mu"])),
                         "nu": treedef.unflatten(unpack(fs["nu"], ks["nu"])), "count": fs["count"]}
            gathered = [w if a is None else lax.all_gather(w, "data", axis=a, tiled=True, to="invarying")
                        for w, a in zip(new_b, ax)]
            return treedef.unflatten(gathered), new_state, lax.pmean(value, "data")

        blocks = jax.tree.map(jax.reshard, params, specs)
        return jax.shard_map(local, mesh=mesh, in_specs=(P(), specs, state_specs, P("data"), P("data")),
                             out_specs=(P(), state_specs, P()))(params, blocks, state, x, y)

    return step
