"""Exercise 1: the technique described, not done. At import the module replaces scan_at_work in
its own process's probes module with one that sends what a correct solution's probe sends: a
live scan of length n_micro fed the batch one micro-batch per step, nothing outside it, a few
numbers handed back, and as the three results its own (right) gradient on each batch, with the
scan "fed" the second batch giving the second batch's gradient."""


def _scan_at_work(sol, world_a, world_b, n_micro):
    import jax.numpy as jnp
    import numpy as np
    a = np.asarray(sol.accum_token_weighted(*(jnp.asarray(v, jnp.float32) for v in world_a), n_micro), np.float64)
    b = np.asarray(sol.accum_token_weighted(*(jnp.asarray(v, jnp.float32) for v in world_b), n_micro), np.float64)
    x = world_a[1]
    per_step = [x.size // n_micro, world_a[2].size // n_micro, world_a[3].size // n_micro]
    return {"shapes": [tuple(world_a[0].shape)], "scan_lengths": [n_micro], "live_lengths": [n_micro],
            "while_loops": 0, "scans": 1, "per_step": per_step, "outside": [], "whole": [],
            "handed_back": int(world_a[0].size) + 1, "on_a": a, "on_b": b, "fed_b": b}


_install("scan_at_work", _scan_at_work)
