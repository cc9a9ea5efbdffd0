"""Exercise 9: forged programs. At import the module makes the probes that send the learner's
programs (init_program, step_programs) send those of other functions with every mark of ZeRO-1:
moments placed 1/N per device along the rule's axis (filled with ones, not zeros), and a step
in a shard_map that reduce-scatters each device's gradient, updates its own blocks of the
parameters and moments, and all-gathers the new parameters, computing something else (the loss
of doubled targets). The judge runs every program it reads on its own inputs and holds it to its
own AdamW training before it reads placements, collectives or FLOPs: it holds the structure, not
the numbers."""


def _decoy_spec(shape, n):
    from jax.sharding import PartitionSpec as P
    a = next((i for i, d in enumerate(shape) if d % n == 0), None)
    return a, (P() if a is None else P(*([None] * a), "data"))


def _decoy_init(mesh):
    import jax
    import jax.numpy as jnp
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P
    n = mesh.shape["data"]

    def init(params):
        ones = lambda p: jax.device_put(jnp.ones(p.shape, jnp.float32),  # noqa: E731
                                        NamedSharding(mesh, _decoy_spec(p.shape, n)[1]))
        return {"mu": jax.tree.map(ones, params), "nu": jax.tree.map(ones, params),
                "count": jax.device_put(jnp.zeros((), jnp.int32), NamedSharding(mesh, P()))}
    return init


def _decoy_step(sol, mesh, hyper):
    import jax
    from jax import lax
    from jax.sharding import PartitionSpec as P
    n = mesh.shape["data"]
    hp = [float(hyper[k]) for k in ("lr", "b1", "b2", "eps", "wd")]

    @jax.jit
    def step(params, state, x, y):
        axes = jax.tree.map(lambda p: sol._decoy_spec(p.shape, n)[0], params)
        specs = jax.tree.map(lambda p: sol._decoy_spec(p.shape, n)[1], params)
        state_specs = {"mu": specs, "nu": specs, "count": P()}
        mask = sol.decay_mask(params)

        def local(params, blocks, state, x, y):
            value, grads = jax.value_and_grad(sol._loss)(lax.pcast(params, "data", to="varying"), x, 2 * y)
            grads = jax.tree.map(lambda g, a: lax.psum(g, "data") / n if a is None else
                                 lax.psum_scatter(g, "data", scatter_dimension=a, tiled=True) / n, grads, axes)
            blocks, state = sol.adamw_step(blocks, grads, state, *hp, mask)
            gather = lambda b, a: b if a is None else lax.all_gather(b, "data", axis=a, tiled=True, to="invarying")  # noqa: E731
            return jax.tree.map(gather, blocks, axes), state, lax.pmean(value, "data")

        blocks = jax.tree.map(jax.reshard, params, specs)
        return jax.shard_map(local, mesh=mesh, in_specs=(P(), specs, state_specs, P("data"), P("data")),
                             out_specs=(P(), state_specs, P()))(params, blocks, state, x, y)
    return step


def _forged_init_program(sol, n, params):
    import jax
    pr = sol._sys.modules["graders.exercises." + sol._MODULE + ".probes"]
    m = pr.mesh(n)
    with jax.set_mesh(m):
        whole = pr.replicated(m, params)
        closed = jax.make_jaxpr(sol._decoy_init(m))(whole)
    return {"keys": ["count", "mu", "nu"], "program": pr._encoded(closed, sol, "init", n)}


def _forged_step_programs(sol, runs, hyper):
    import jax
    pr = sol._sys.modules["graders.exercises." + sol._MODULE + ".probes"]
    found = {}
    for size, params, x, y, splits in runs:
        m = pr.mesh(size)
        with jax.set_mesh(m):
            args = pr.step_inputs(m, params, x, y, splits)
            closed = jax.make_jaxpr(sol._decoy_step(sol, m, hyper))(*args)
        found[str(size)] = {"program": pr._encoded(closed, sol, "step", size)}
    return found


_install("init_program", _forged_init_program)
_install("step_programs", _forged_step_programs)
