"""The facts Exercise 6's stub teaches about an NNX rematerialization tutorial's code, proven on
the installed JAX (the quiz's key tests prove the ones the quiz asks about)."""

import subprocess
import sys

import jax
import jax.numpy as jnp
from jax._src.ad_checkpoint import saved_residuals  # what print_saved_residuals prints


def test_checkpoint_name_needs_its_own_import():
    # In a fresh interpreter: nothing else has imported jax.ad_checkpoint yet (Flax would).
    program = ("import jax\n"
               "try:\n    jax.ad_checkpoint.checkpoint_name\n    print('attribute found')\n"
               "except AttributeError:\n    print('AttributeError')\n"
               "from jax.ad_checkpoint import checkpoint_name\n"
               "import jax.numpy as jnp\nprint(float(checkpoint_name(jnp.ones(()), 'h')))\n")
    out = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=120)
    assert out.stdout.split() == ["AttributeError", "1.0"], out.stdout + out.stderr


B, T, D = 6, 10, 4  # one block input is (B, T, D); every axis its own size


def _stack(layers: int, remat: bool):
    def block(w, x):
        return x + jnp.tanh(jnp.tanh(x @ w) @ w.T)

    step = jax.checkpoint(block) if remat else block

    def loss(ws, x):
        for w in ws:
            x = step(w, x)
        return jnp.sum(x ** 2)

    return loss, ([jnp.eye(D) * 0.5] * layers, jnp.ones((B, T, D)))


def _saved_activations(layers: int, remat: bool) -> int:
    loss, args = _stack(layers, remat)
    return sum(aval.shape == (B, T, D) for aval, _ in saved_residuals(loss, *args))


def test_per_block_checkpointing_still_keeps_every_blocks_input():
    # "checkpointing each block takes memory from O(layers) to O(1)" is wrong: the backward pass
    # still needs each block's input, so what is kept grows by one activation per block.
    kept = {layers: _saved_activations(layers, remat=True) for layers in (2, 4, 8)}
    assert kept[4] - kept[2] == 2 and kept[8] - kept[4] == 4, kept
    # ... a much smaller constant than keeping every intermediate of every block
    plain = {layers: _saved_activations(layers, remat=False) for layers in (2, 4, 8)}
    assert plain[8] - plain[4] > kept[8] - kept[4], (plain, kept)
