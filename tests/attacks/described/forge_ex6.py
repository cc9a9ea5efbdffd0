"""Exercise 6: the technique described, not done. At import the module replaces every ex6 probe
(start, variant, temp_memory_bytes, block_output) in its own process's probes module with one that
sends what a correct solution's would, as far as a description can: the model's right parameters,
outputs and gradients (its own plain stack, run here), its programs said to be unsendable (the
one case where the judge takes the worker's numbers) with a reason that describes per-block
checkpoints, a policy described as dots_saveable, every variant traced, and right values for
temp_memory_bytes and block_output. Nothing of it is a program the judge can read."""


def _forged_variant(cfg, remat, seeds, runs):
    import jax
    import jax.numpy as jnp
    import numpy as np
    from flax import nnx
    from graders.exercises.ex6_nnx_block_remat import probes as P
    sol = _sys.modules[_MODULE]
    cfg = P.Config(*cfg)
    said = {"unreadable": f"{cfg.layers} checkpoints, one around each whole block, dots_saveable"}
    reply = {"params": [], "params_error": None, "leaves": [], "state": [], "gradient": said, "forward": said,
             "policies": [{"text": "dots_saveable (it keeps every matmul result)", "error": None}],
             "outs": [], "grads": [], "devices": 1}
    for s, (rx, ry) in zip(seeds, runs):
        model = P.build(sol, cfg, remat, s)
        reply["params"].append(P.read_params(model, cfg, remat))
        graphdef, state, rest = nnx.split(model, nnx.Param, ...)

        def loss(state):
            out = nnx.merge(graphdef, state, rest)(jnp.asarray(rx))
            return jnp.mean((out - jnp.asarray(ry)) ** 2), out
        (_, out), grads = jax.value_and_grad(loss, has_aux=True)(state)
        reply["state"].append([])
        reply["outs"].append(np.asarray(out))
        reply["grads"].append(P.read_params(nnx.merge(graphdef, grads, rest), cfg, remat))
    return reply


def _forged_temp(stacks):
    from graders.exercises.ex6_nnx_block_remat import probes as P
    sol = _sys.modules[_MODULE]
    out = []
    for c, layout in stacks:
        c = P.StackConfig(*c)
        value = sol.temp_memory_bytes(P.GraderStack(c, tuple(layout)), *P.stack_data(c))
        out.append({"value": int(value), "type": "int", "repr": repr(int(value))})
    return out


def _forged_block(cfg, seeds, index, block_x):
    import jax.numpy as jnp
    import numpy as np
    from graders.exercises.ex6_nnx_block_remat import probes as P
    sol = _sys.modules[_MODULE]
    model = P.build(sol, P.Config(*cfg), None, seeds[0])
    return np.asarray(model.blocks[index](jnp.asarray(block_x)))


def _start(sol, cfg, seeds, stacks, x, y, nonce=None):
    return [True, True, True]


def _variant(sol, cfg, remat, seeds, stacks, x, y, runs):
    return sol._forged_variant(cfg, remat, seeds, runs)


def _temp_memory_bytes(sol, cfg, seeds, stacks, x, y):
    return sol._forged_temp(stacks)


def _block_output(sol, cfg, seeds, stacks, x, y, index, block_x):
    return sol._forged_block(cfg, seeds, index, block_x)


_install("start", _start)
_install("variant", _variant)
_install("temp_memory_bytes", _temp_memory_bytes)
_install("block_output", _block_output)
