"""Exercise 3: FSDP written by hand with jax.shard_map.

FSDP (fully sharded data parallelism) stores each weight split by rows across the devices and
splits the batch the same way. To compute, every device gathers the full weights, runs the model
on its own rows of the batch, and the devices average their losses. Under jax.grad the gather's
transpose is a reduce-scatter: each device receives the summed gradient of its own rows only.
Here you write that by hand with jax.shard_map instead of leaving it to jit.

Model: loss(p, x, y) = mean((relu(x @ w1) @ w2 - y) ** 2), the mean over every element.

Shapes (float32), all split along dim 0 over the mesh axis "fsdp", i.e. P("fsdp", None):
  p = {"w1": (D, H), "w2": (H, D)}     x (B, D)     y (B, D)
On a mesh of N devices, each device sees w1 (D/N, H), w2 (H/N, D), x and y (B/N, D).

What is checked (`make grade EX=ex3`):
  * the loss and jax.grad of it equal a single-device computation, on meshes of 8, 4 and 2
    devices (the grader picks the sizes, other ones on each mesh; assume nothing about D, H, B
    or N);
  * the loss is the shard_map's own result (nothing computed on it outside), with out_specs P(),
    averaged over the devices inside it, as lax.pmean(local, "fsdp") does;
  * w1 and w2 enter that shard_map as they arrive, as P("fsdp", None), each is lax.all_gather'ed
    inside, and the loss is computed from those gathered weights (the grader re-runs your program
    with other weights entering the shard_map; a copy of the weights used beside them is caught);
  * on a mesh whose axis is Auto, both gradients come out as P("fsdp", None);
  * each device does only its share of the work: the per-device FLOPs of the compiled gradient
    are about 1/N of the single-device program's (so the batch must stay split);
  * the compiled gradient all-gathers both whole weights and reduce-scatters both gradients
    (each device receiving its own rows), and all-reduces no whole weight gradient;
  * the module-level fsdp_loss is a shard_map that gives the right loss and gradient under
    `with jax.set_mesh(mesh):` for meshes of 8, 4 and 2 devices (your module is imported afresh
    for each mesh, so do not call fsdp_loss at import time).
"""

import jax
import jax.numpy as jnp
from jax import lax
from jax.sharding import PartitionSpec as P


def make_fsdp_loss(mesh):
    """Return loss(p, x, y): the FSDP loss as one jax.shard_map over `mesh`'s axis "fsdp".

    Write a per-device function of (p_blk, x_blk, y_blk) that
      1. gathers each full weight with lax.all_gather(w_blk, "fsdp", tiled=True)
         ((D/N, H) -> (D, H) and (H/N, D) -> (H, D)); the batch is NOT gathered;
      2. computes the mean loss on its own rows x_blk, y_blk;
      3. averages it over the devices with lax.pmean(..., "fsdp") (every device holds the same
         number of rows, so the mean of the local means is the global mean).
    Wrap it with
      jax.shard_map(f, mesh=mesh,
                    in_specs=({"w1": P("fsdp", None), "w2": P("fsdp", None)},
                              P("fsdp", None), P("fsdp", None)),
                    out_specs=P())
    Write in_specs out: one check runs on an Auto mesh, where shard_map cannot infer them.
    The result is a replicated float32 scalar. `mesh` may be None: then shard_map takes the
    mesh set by `jax.set_mesh` when the loss is first called.
    """
    raise NotImplementedError


def fsdp_loss(p, x, y):
    """The chapter's interface, called under `with jax.set_mesh(mesh):`.

    Replace this whole function by one module-level line:
        fsdp_loss = make_fsdp_loss(None)
    """
    raise NotImplementedError
