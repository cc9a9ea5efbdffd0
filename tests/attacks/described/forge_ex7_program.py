"""Exercise 7: forged programs. At import the module makes the probes that send the learner's
programs send those of other functions with Megatron's every mark, computing something else: a
tp_mlp whose second matmul contracts the hidden units split over 'model' and states
out_sharding=P('data', None) (one all-reduce compiled), a shard_map whose body returns one psum
over 'model' of the (B/data, D) partial sums, a jitted step of that model with Megatron's
collectives and an update that keeps every array split like its parameter, and an init_tp_state
that places the parameters and Adam moments Megatron-style; but tanh for relu, and the placed
parameters doubled. The judge runs every program it reads on its own inputs and holds it to its
own single-device computation: it holds the structure, not the numbers."""


def _decoy_forward(w1, w2, x):
    import jax.numpy as jnp
    from jax.sharding import PartitionSpec as P
    return jnp.matmul(jnp.tanh(x @ w1), w2, out_sharding=P("data", None))


def _decoy_shard_map(mesh):
    import jax
    import jax.numpy as jnp
    from jax.sharding import PartitionSpec as P

    def body(w1, w2, x):
        return jax.lax.psum(jnp.tanh(x @ w1) @ w2, "model")
    return jax.shard_map(body, mesh=mesh, in_specs=(P(None, "model"), P("model", None), P("data", None)),
                         out_specs=P("data", None))


def _decoy_step(sol, tx):
    import jax
    import jax.numpy as jnp
    import optax

    def loss(params, x, y):
        return jnp.mean((sol._decoy_forward(params["w1"], params["w2"], x) - y) ** 2)

    @jax.jit
    def step(params, opt_state, x, y):
        value, grads = jax.value_and_grad(loss)(params, x, y)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, value
    return step


def _decoy_init(mesh, tx, params):
    import jax
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P
    specs = {"w1": P(None, "model"), "w2": P("model", None)}
    placed = {k: jax.device_put(2 * v, NamedSharding(mesh, specs[k])) for k, v in params.items()}
    return placed, tx.init(placed)


def _send(closed):
    from graders.kit import program
    return program.encode_or_reason(closed, "", forward=True, meshes=True)


def _forge_forward_program(sol, version, shape, w1, w2, x):
    import jax
    from graders.exercises.ex7_megatron_tp import probes
    m = probes.mesh(tuple(shape))
    fn = sol._decoy_forward if version == "tp_mlp" else sol._decoy_shard_map(m)
    with jax.set_mesh(m):
        return sol._send(jax.make_jaxpr(fn)(*probes.forward_args(m, w1, w2, x)))


def _forge_step_program(sol, optimizer, shape, w1, w2, x, y):
    import jax
    from graders.exercises.ex7_megatron_tp import probes
    m = probes.mesh(tuple(shape))
    with jax.set_mesh(m):
        step = sol._decoy_step(sol, probes.make_tx(optimizer))
        return sol._send(jax.make_jaxpr(step)(*probes.placed_training(m, optimizer, w1, w2, x, y)))


def _forge_init_programs(sol, optimizer, shape, params, x, y):
    import jax
    import numpy as np
    from graders.exercises.ex7_megatron_tp import probes
    m = probes.mesh(tuple(shape))
    tx = probes.make_tx(optimizer)
    host = {k: np.asarray(params[k], np.float32) for k in ("w1", "w2")}
    paths = lambda tree: [jax.tree_util.keystr(p) for p, _ in jax.tree_util.tree_flatten_with_path(tree)[0]]  # noqa: E731
    with jax.set_mesh(m):
        init, (placed, state) = jax.make_jaxpr(lambda p: sol._decoy_init(m, tx, p), return_shape=True)(host)
        reply = {"init": sol._send(init), "init_paths": paths(state)}
        if x is not None:
            after, out = jax.make_jaxpr(sol._decoy_step(sol, tx), return_shape=True)(
                placed, state, probes.put(m, x, probes.X_SPEC), probes.put(m, y, probes.X_SPEC))
            reply.update(step=sol._send(after), step_paths=paths(out[1]))
    return reply


def _forged():
    """The forged probes, each with no free variable, as the probes have."""
    def forward_program(sol, version, shape, w1, w2, x):
        return sol._forge_forward_program(sol, version, shape, w1, w2, x)

    def step_program(sol, optimizer, shape, w1, w2, x, y):
        return sol._forge_step_program(sol, optimizer, shape, w1, w2, x, y)

    def init_programs(sol, optimizer, shape, params, x, y):
        return sol._forge_init_programs(sol, optimizer, shape, params, x, y)
    return {f.__name__: f for f in (forward_program, step_program, init_programs)}


for _name, _fn in _forged().items():
    _install(_name, _fn)
