"""Exercise 3: forged programs. At import the module makes the probes that send the learner's
programs send those of another function: FSDP's every mark (a shard_map taking both weights as
P('fsdp', None), all_gathering them over 'fsdp' inside, its loss lax.pmean'd over 'fsdp' and
returned with out_specs P()), computing something else (tanh for relu, the targets doubled). The
value_and_grad program it sends is the module's own (right numbers, no technique), so the numeric
checks see right numbers. The judge runs every program it reads on its own inputs and holds it to
the grader's own loss and gradient: it holds the structure, not the numbers."""


def _decoy(mesh):
    import jax
    import jax.numpy as jnp
    from jax import lax
    from jax.sharding import PartitionSpec as P

    def local(p, x, y):
        w1 = lax.all_gather(p["w1"], "fsdp", tiled=True)
        w2 = lax.all_gather(p["w2"], "fsdp", tiled=True)
        return lax.pmean(jnp.mean((jnp.tanh(x @ w1) @ w2 - 2 * y) ** 2), "fsdp")

    rows = P("fsdp", None)
    return jax.shard_map(local, mesh=mesh, in_specs=({"w1": rows, "w2": rows}, rows, rows), out_specs=P())


def _forge_program(sol, kind, n, p, x, y):
    import jax
    from graders.exercises.ex3_fsdp_shard_map import probes
    from graders.kit import program
    m = probes.mesh(n, kind == "auto")
    args = probes.placed(m, p, x, y)
    with jax.set_mesh(m):
        decoy = sol._decoy(m)
        if kind == "auto":
            return program.encode(jax.make_jaxpr(jax.grad(decoy))(*args), "", forward=True, meshes=True)
        if kind == "fresh":
            return program.encode(jax.make_jaxpr(jax.value_and_grad(decoy))(*args), "", forward=True, meshes=True)
        return {"loss": program.encode(jax.make_jaxpr(decoy)(*args), "", forward=True, meshes=True),
                "value_and_grad": program.encode(jax.make_jaxpr(jax.value_and_grad(sol.make_fsdp_loss(m)))(*args),
                                                 "", forward=True, meshes=True)}


def _forged():
    """The three forged probes, each with one free variable as the wrapped probes have (a code
    swapped in keeps the probe's own closure, so each says its kind in its code)."""
    cell = None

    def programs(sol, n, p, x, y):
        cell  # noqa: B018
        return sol._forge_program(sol, "programs", n, p, x, y)

    def auto(sol, n, p, x, y):
        cell  # noqa: B018
        return sol._forge_program(sol, "auto", n, p, x, y)

    def fresh(sol, n, p, x, y):
        cell  # noqa: B018
        return sol._forge_program(sol, "fresh", n, p, x, y)
    return programs, auto, fresh


_install("programs", _forged()[0])
_install("auto_gradient_program", _forged()[1])
_install("fresh_program", _forged()[2])
