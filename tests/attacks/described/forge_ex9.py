"""Exercise 9: the technique described, not done. At import the module replaces the probes that
describe the learner's ZeRO-1 state and step (init_state, start_steps, train) in its own process's
probes module with ones that send what a correct solution's probes sent before the programs were
the evidence: zero moments placed 1/N per device along the rule's axis, params replicated and the
moments split after every step, the module's own (right, single-device) losses, params and
moments, one all-gather per split parameter, a reduce-scatter and no psum, and per-device FLOPs of
the backward pass on a device's rows plus a 1/N share of AdamW. The judge rebuilds and runs
programs, never descriptions: none of this is read."""


def _pr(sol):
    return sol._sys.modules["graders.exercises." + sol._MODULE + ".probes"]


def _axis(shape, n):
    return next((i for i, d in enumerate(shape) if d % n == 0), None)


def _spec(shape, n):
    from jax.sharding import PartitionSpec as P
    a = next((i for i, d in enumerate(shape) if d % n == 0), None)
    return P() if a is None else P(*([None] * a), "data")


def _forged_init_state(sol, n, params):
    import jax
    import numpy as np
    from jax.sharding import NamedSharding
    pr = sol._pr(sol)
    m = pr.mesh(n)
    leaves = [(path, np.zeros(np.shape(v), np.float32)) for path, v in pr.leaves_with_paths(params)]
    rows = [{"path": path, "value": v, "placed": pr.placement(jax.device_put(v, NamedSharding(m, sol._spec(v.shape, n)))),
             "dtype": "float32"} for path, v in leaves]
    count = jax.device_put(np.int32(0), NamedSharding(m, sol._spec((), n)))
    return {"keys": ["count", "mu", "nu"], "mu": {"leaves": rows}, "nu": {"leaves": rows},
            "count": {"value": np.asarray(np.int32(0)), "placed": pr.placement(count), "dtype": "int32"}}


def _forged_start_steps(sol, *args):
    return None


def _forged_train(sol, runs, hyper, steps, compiled_n, n):
    import jax
    import jax.numpy as jnp
    import numpy as np
    import optax
    from jax.sharding import NamedSharding
    from graders.kit import costs
    pr = sol._pr(sol)
    size, params, x, y, _ = next(r for r in runs if int(r[0]) == int(n))
    m = pr.mesh(n)
    hp = [float(hyper[k]) for k in ("lr", "b1", "b2", "eps", "wd")]
    p = jax.tree.map(jnp.asarray, params)
    s = {"mu": jax.tree.map(jnp.zeros_like, p), "nu": jax.tree.map(jnp.zeros_like, p), "count": jnp.int32(0)}

    @jax.jit
    def one(p, s):
        value, grads = jax.value_and_grad(sol._loss)(p, jnp.asarray(x), jnp.asarray(y))
        p, s = sol.adamw_step(p, grads, s, *hp, sol.decay_mask(p))
        return p, s, value

    def put(tree, split):
        return jax.tree.map(lambda v: jax.device_put(np.asarray(v), NamedSharding(
            m, sol._spec(v.shape, n) if split else sol._spec((), n))), tree)

    found = {"losses": [], "layouts": []}
    for _ in range(int(steps)):
        p, s, value = one(p, s)
        found["losses"].append(np.asarray(value))
        placed = {"mu": put(s["mu"], True), "nu": put(s["nu"], True), "count": put(s["count"], False)}
        found["layouts"].append(pr._layout(put(p, False), placed, p))
    found["params"] = jax.tree.map(np.asarray, p)
    found["params_structure"] = str(jax.tree.structure(p))
    found["mu"], found["nu"] = jax.tree.map(np.asarray, s["mu"]), jax.tree.map(np.asarray, s["nu"])
    if int(n) == int(compiled_n):
        split = [(path, v) for path, v in pr.leaves_with_paths(params) if sol._axis(np.shape(v), n) is not None]
        found["collectives"] = {"all-gather": len(split), "reduce-scatter": len(split), "all-reduce": 1,
                                "all-to-all": 0, "collective-permute": 0}
        found["collective_shapes"] = [["all-gather", list(np.shape(v))] for _, v in split]
        found["psums"] = []
        rows = len(x) // n
        grad = costs.flops(costs.compile_fn(jax.value_and_grad(sol._loss), p, jnp.asarray(x[:rows]),
                                                  jnp.asarray(y[:rows])))
        share = 0.0
        for keep in (True, False):
            part = {k: {j: v for j, v in layer.items() if (sol._axis(v.shape, n) is not None) == keep}
                    for k, layer in p.items()}
            part = {k: layer for k, layer in part.items() if layer}
            if not part:
                continue
            tx = optax.adamw(hp[0], b1=hp[1], b2=hp[2], eps=hp[3], weight_decay=hp[4],
                             mask=jax.tree.map(lambda v: v.ndim >= 2, part))

            def update(q, g, t, tx=tx):
                u, t = tx.update(g, t, q)
                return optax.apply_updates(q, u), t

            f = costs.flops(costs.compile_fn(update, part, part, tx.init(part)))
            share += f / n if keep else f
        found["flops"] = grad + share
    return found


def _forged_init_program(sol, n, params):
    """The description in place of the program, where the probes send init_zero1_state's program."""
    return dict(sol._forged_init_state(sol, n, params), program=sol._forged_init_state(sol, n, params))


def _forged_step_programs(sol, runs, hyper):
    """The descriptions in place of the programs, where the probes send the step's programs."""
    return {str(r[0]): {"program": sol._forged_train(sol, runs, hyper, 5, 8, r[0])} for r in runs}


# Today's probes (descriptions) and those that send programs (issue 31), whichever the probes hold.
for _name, _fn in (("init_state", _forged_init_state), ("start_steps", _forged_start_steps),
                   ("train", _forged_train), ("init_program", _forged_init_program),
                   ("step_programs", _forged_step_programs)):
    if hasattr(_sys.modules["graders.exercises." + _MODULE + ".probes"], _name):
        _install(_name, _fn)
