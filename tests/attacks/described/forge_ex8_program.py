"""Exercise 8: forged programs. At import the module makes the probes that send scaled_grads' and
the training loop's programs (scaled_grads_program, loop_sizes, lowered_sizes, train) send the
programs of other functions, with every mark of the technique, that compute something else: fp16
gradients of another loss (the targets doubled), and one lax.scan inside one jit whose body
computes the model's scaled fp16 gradients (fp16 matrix products), decides the skip from their
finite flag and runs the rule, but climbs the loss instead of descending it (Adam's updates
negated). The judge reads them and runs
them: it holds the structure, not the numbers."""


def _decoy_loss(params, x, y, target=2.0):
    """The model's fp16 loss, with fp16 matrix products, against target * y."""
    import jax.numpy as jnp
    f16 = jnp.float16
    h = jnp.tanh(x.astype(f16) @ params["w1"].astype(f16) + params["b1"].astype(f16))
    out = h @ params["w2"].astype(f16) + params["b2"].astype(f16)
    return 5e-5 * jnp.mean((out.astype(jnp.float32) - target * y) ** 2)


def _decoy_grads(params, x, y, scale, target=2.0):
    import jax
    grads = jax.grad(lambda p: _decoy_loss(p, x, y, target) * scale)(params)
    grads = jax.tree.map(lambda g: g / scale, grads)
    return grads, all_finite(grads)


def _decoy_train(params, x, y, ls0, steps, tx):
    import jax
    import jax.numpy as jnp
    import optax
    from jax import lax

    def step(carry, _):
        p, opt, ls = carry
        grads, finite = _decoy_grads(p, x, y, ls.scale, target=1.0)  # the right fp16 gradients
        updates, opt_new = tx.update(jax.tree.map(lambda g: jnp.where(finite, g, 0.0), grads), opt, p)
        climbed = optax.apply_updates(p, jax.tree.map(lambda u: -u, updates))
        keep = lambda new, old: jnp.where(finite, new, old)
        p, opt = jax.tree.map(keep, climbed, p), jax.tree.map(keep, opt_new, opt)
        return (p, opt, dyn_scale_step(ls, finite)), (ls.scale, finite, _decoy_loss(carry[0], x, y, 1.0))

    (p, _, ls), (scales, finites, losses) = lax.scan(step, (params, tx.init(params), ls0), None, length=steps)
    return p, ls, scales, finites, losses


def _decoy_program(params, x, y, scale, lr, steps, shape=False):
    import jax
    import jax.numpy as jnp
    import optax
    from graders.kit import program
    tx = optax.adam(lr)
    fn = jax.jit(lambda q, l, xx, yy: _decoy_train(q, xx, yy, l, steps, tx))
    ls = DynScale(jnp.float32(scale), jnp.int32(0))
    params, x, y = jax.tree.map(jnp.asarray, (params, x, y))
    closed, out = jax.make_jaxpr(fn, return_shape=True)(params, ls, x, y)
    return (program.encode(closed, "", forward=True), out) if shape else program.encode(closed, "", forward=True)


def _scaled_grads_program(sol, params, x, y, scale):
    import jax
    import jax.numpy as jnp
    from graders.kit import program
    params, x, y = jax.tree.map(jnp.asarray, (params, x, y))
    return program.encode(jax.make_jaxpr(sol._decoy_grads)(params, x, y, jnp.float32(scale)), "", forward=True)


def _loop_sizes(sol, params, x, y, scale, lr, steps_list):
    return {"programs": {n: sol._decoy_program(params, x, y, scale, lr, n) for n in steps_list}}


def _lowered_sizes(sol, params, x, y, scale, lr, steps_list):
    return {n: sol._decoy_program(params, x, y, scale, lr, n) for n in steps_list}


def _train(sol, params, x, y, scale, lr, steps):
    import sys
    sent, out = sol._decoy_program(params, x, y, scale, lr, steps, shape=True)
    return {"program": sent, "layout": sys.modules["graders.exercises.ex8_loss_scaling.probes"].layout(out)}


_install("scaled_grads_program", _scaled_grads_program)
_install("loop_sizes", _loop_sizes)
_install("lowered_sizes", _lowered_sizes)
_install("train", _train)
