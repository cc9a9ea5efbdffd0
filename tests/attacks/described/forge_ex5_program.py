"""Exercise 5: a forged program. At import the module makes the program probe send the program of
another model: nn.checkpoint on the whole MLP class, Linen's own lift, the default policy, both
Dense layers and the output inside it, the gradient all through it; but a tanh between the layers
instead of the ReLU. Every mark of the technique is there; the values are not the MLP's. The judge
rebuilds and runs it at inputs of its own: it holds the structure, not the numbers."""
import types as _types

_P = _sys.modules["graders.exercises." + _MODULE + ".probes"]
# the real probe, kept before it is replaced: it traces and encodes whatever module it is given
_ORIG_PROGRAM = _types.FunctionType(_P.program.__code__, _P.program.__globals__, "program",
                                    _P.program.__defaults__, _P.program.__closure__)


def _decoy_module():
    import types

    import jax
    import jax.numpy as jnp
    import flax.linen as nn
    sol = _sys.modules[_MODULE]
    if "_DECOY" in vars(sol):
        return sol._DECOY

    class DecoyMLP(nn.Module):
        features: int

        @nn.compact
        def __call__(self, x):
            h = nn.Dense(self.features)(x)
            return nn.Dense(self.features)(jnp.tanh(h))

    def forward(seed, x, features):
        model = nn.checkpoint(DecoyMLP)(features=int(features))
        return model.apply(model.init(jax.random.PRNGKey(int(seed)), x), x).reshape(-1)

    sol._DECOY = types.SimpleNamespace(nn_checkpoint_forward=forward, __file__=sol.__file__)
    return sol._DECOY


def _with_one_free_variable(fn):
    """The probes are wrapped: a code swapped in must have one free variable, as theirs has."""
    cell = fn

    def forged(sol, *args, **kwargs):
        cell  # noqa: B018  (the free variable)
        return sol._ORIG_PROGRAM(sol._decoy_module(), *args[:3])
    return forged


_install("program", _with_one_free_variable(None))
