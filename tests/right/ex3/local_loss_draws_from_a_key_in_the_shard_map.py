"""Right: the reference's FSDP loss whose shard_map body makes a key (jax.random.key(0)) and draws
from it a keep scale of 1.0 for its batch slice (the dropout a larger model turns on, off for now):
the reference's numbers.

Full marks (12/12 with and without --sandbox at seeds 20261130, 7 and 0): random_seed and
random_bits are ordinary data in the program the judge reads. Was 0/12: the program encoding
refused the primitive random_seed, so no check could read the loss's program.
"""

import jax
import jax.numpy as jnp
from jax import lax
from jax.sharding import PartitionSpec as P

AXIS = "fsdp"
ROWS = P(AXIS, None)  # dim 0 split across the devices of the "fsdp" axis


def local_loss(p_blk, x_blk, y_blk):
    # a key for the dropout a larger model turns on; keep probability 1.0 for now
    keep = jnp.where(jax.random.bits(jax.random.key(0), (), jnp.uint32) >= 0, 1.0, 0.0)
    x_blk = x_blk * keep
    """One device's view: a slice of each weight's rows and a slice of the batch."""
    w1 = lax.all_gather(p_blk["w1"], AXIS, tiled=True)  # (D/N, H) -> (D, H)
    w2 = lax.all_gather(p_blk["w2"], AXIS, tiled=True)  # (H/N, D) -> (H, D)
    local = jnp.mean((jax.nn.relu(x_blk @ w1) @ w2 - y_blk) ** 2)
    # Every device holds B/N examples, so the mean of the local means is the global mean.
    return lax.pmean(local, AXIS)


def make_fsdp_loss(mesh):
    specs = ({"w1": ROWS, "w2": ROWS}, ROWS, ROWS)
    return jax.shard_map(local_loss, mesh=mesh, in_specs=specs, out_specs=P())


fsdp_loss = make_fsdp_loss(None)
