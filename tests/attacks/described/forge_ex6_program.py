"""Exercise 6: forged programs. At import the module makes the variant probe send the programs of
another model: the same parameters, every block checkpointed as the exercise asks (nnx.remat
around each whole block, dots_saveable for 'dots'), around a block that subtracts its attention
instead of adding it. Every mark of the technique is there, and its memory is the technique's;
the values are not the model's. The judge rebuilds and runs them: it holds the structure and the
memory, not the numbers."""
import types as _types

_P = _sys.modules["graders.exercises." + _MODULE + ".probes"]
# the real probe, kept before it is replaced: it encodes whatever model it is given
_ORIG_VARIANT = _types.FunctionType(_P.variant.__code__, _P.variant.__globals__, "variant", _P.variant.__defaults__)


def _decoy_module():
    import types

    import jax
    from flax import nnx
    sol = _sys.modules[_MODULE]
    if "_DECOY" in vars(sol):
        return sol._DECOY

    class DecoyBlock(sol.Block):
        def __call__(self, x):
            h = x - self.attn(self.ln1(x))
            return h + self.fc2(jax.nn.gelu(self.fc1(self.ln2(h))))

    def call(block, x):
        return block(x)

    callers = {None: call, "full": nnx.remat(call),
               "dots": nnx.remat(call, policy=jax.checkpoint_policies.dots_saveable)}

    class Transformer(nnx.Module):
        def __init__(self, num_layers, d_model, num_heads, d_ff, *, remat=None, rngs):
            self.remat = remat
            self.blocks = nnx.List([DecoyBlock(d_model, num_heads, d_ff, rngs=rngs) for _ in range(num_layers)])

        def __call__(self, x):
            for block in self.blocks:
                x = callers[self.remat](block, x)
            return x

    sol._DECOY = types.SimpleNamespace(Transformer=Transformer, temp_memory_bytes=sol.temp_memory_bytes,
                                       __file__=sol.__file__)
    return sol._DECOY


def _variant(sol, cfg, remat, seeds, stacks, x, y, runs):
    return sol._ORIG_VARIANT(sol._decoy_module(), cfg, remat, seeds, stacks, x, y, runs)


_install("variant", _variant)
