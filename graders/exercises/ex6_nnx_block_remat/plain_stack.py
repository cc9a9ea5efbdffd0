"""Exercise 6's expected values in NumPy float64: the block the stub gives, stacked plainly, its
output and the gradients of the mean squared error w.r.t. every parameter, written out by hand.

The checks compare the learner's outputs and gradients with these. Computed here rather than by a
JAX program, they are independent of JAX's autodiff, and they cost no program to trace and load
after every edit. tests/test_ex6_grader.py checks them against jax.grad of the probes' block_fn,
which is the same block written in JAX.
"""

import numpy as np

from graders.kit.expected import expected

LN_EPS = 1e-6  # nnx.LayerNorm's default epsilon
MASKED = -1e30  # what the block puts in place of a future position's score before the softmax
_GELU_C = np.sqrt(2.0 / np.pi)  # jax.nn.gelu's default, the tanh approximation


def _layer_norm(x, scale, bias):
    mean = x.mean(-1, keepdims=True)
    rstd = 1.0 / np.sqrt(((x - mean) ** 2).mean(-1, keepdims=True) + LN_EPS)
    xhat = (x - mean) * rstd
    return xhat * scale + bias, (xhat, rstd, scale)


def _layer_norm_back(dy, saved):
    xhat, rstd, scale = saved
    g = dy * scale
    dx = rstd * (g - g.mean(-1, keepdims=True) - xhat * (g * xhat).mean(-1, keepdims=True))
    return dx, (dy * xhat).sum((0, 1)), dy.sum((0, 1))


def _gelu(u):
    inner = _GELU_C * (u + 0.044715 * u ** 3)
    t = np.tanh(inner)
    return 0.5 * u * (1.0 + t), (u, t)


def _gelu_back(dm, saved):
    u, t = saved
    return dm * (0.5 * (1.0 + t) + 0.5 * u * (1.0 - t ** 2) * _GELU_C * (1.0 + 3 * 0.044715 * u ** 2))


def _block(p: dict, x, heads: int):
    """One block forward, and what its backward pass needs."""
    b, t, d = x.shape
    hd = d // heads
    a, ln1 = _layer_norm(x, p["ln1.scale"], p["ln1.bias"])
    q, k, v = (z.reshape(b, t, heads, hd) for z in np.split(a @ p["qkv.kernel"], 3, axis=-1))
    causal = np.tril(np.ones((t, t), bool))
    s = np.where(causal, np.einsum("bqhd,bkhd->bhqk", q, k) / np.sqrt(hd), MASKED)
    w = np.exp(s - s.max(-1, keepdims=True))
    w /= w.sum(-1, keepdims=True)
    o = np.einsum("bhqk,bkhd->bqhd", w, v).reshape(b, t, d)
    h = x + o @ p["proj.kernel"]
    n2, ln2 = _layer_norm(h, p["ln2.scale"], p["ln2.bias"])
    m, gelu = _gelu(n2 @ p["fc1.kernel"] + p["fc1.bias"])
    out = h + m @ p["fc2.kernel"] + p["fc2.bias"]
    return out, (a, ln1, q, k, v, causal, w, o, n2, ln2, m, gelu)


def _block_back(p: dict, dz, saved, heads: int):
    """d(loss)/d(block input) and d(loss)/d(each parameter), from d(loss)/d(block output)."""
    a, ln1, q, k, v, causal, w, o, n2, ln2, m, gelu = saved
    b, t, d = dz.shape
    hd = d // heads
    g = {"fc2.kernel": np.einsum("bti,btj->ij", m, dz), "fc2.bias": dz.sum((0, 1))}
    du = _gelu_back(dz @ p["fc2.kernel"].T, gelu)
    g["fc1.kernel"], g["fc1.bias"] = np.einsum("bti,btj->ij", n2, du), du.sum((0, 1))
    dh_ln, g["ln2.scale"], g["ln2.bias"] = _layer_norm_back(du @ p["fc1.kernel"].T, ln2)
    dh = dz + dh_ln
    g["proj.kernel"] = np.einsum("bti,btj->ij", o, dh)
    do = (dh @ p["proj.kernel"].T).reshape(b, t, heads, hd)
    dw = np.einsum("bqhd,bkhd->bhqk", do, v)
    dv = np.einsum("bhqk,bqhd->bkhd", w, do)
    ds = np.where(causal, w * (dw - (dw * w).sum(-1, keepdims=True)), 0.0) / np.sqrt(hd)
    dq = np.einsum("bhqk,bkhd->bqhd", ds, k)
    dk = np.einsum("bhqk,bqhd->bkhd", ds, q)
    dqkv = np.concatenate([z.reshape(b, t, d) for z in (dq, dk, dv)], axis=-1)
    g["qkv.kernel"] = np.einsum("bti,btj->ij", a, dqkv)
    dx_ln, g["ln1.scale"], g["ln1.bias"] = _layer_norm_back(dqkv @ p["qkv.kernel"].T, ln1)
    return dh + dx_ln, g


def _float64(p: dict) -> dict:
    return {name: np.asarray(value, np.float64) for name, value in p.items()}


@expected
def block_output(p: dict, x, heads: int) -> np.ndarray:
    """One block applied to x."""
    return _block(_float64(p), np.asarray(x, np.float64), heads)[0]


@expected
def out_and_grads(ps: list, x, y, heads: int) -> tuple[np.ndarray, list[dict]]:
    """The plain stack of blocks `ps` (each {path: array}) applied to x, and the gradients of
    mean((out - y)**2) w.r.t. every parameter of every block, all float64."""
    ps = [_float64(p) for p in ps]
    h, saved = np.asarray(x, np.float64), []
    for p in ps:
        h, s = _block(p, h, heads)
        saved.append(s)
    dh = 2.0 * (h - np.asarray(y, np.float64)) / h.size
    grads = [None] * len(ps)
    for i in reversed(range(len(ps))):
        dh, grads[i] = _block_back(ps[i], dh, saved[i], heads)
    return h, grads
