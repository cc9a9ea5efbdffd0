"""Only the chapter's interface: a module-level `fsdp_loss` (a shard_map without mesh=), no
make_fsdp_loss. What the README's "Differences from the chapter" says such a solution scores.

loses: loss_matches_single_device: make_fsdp_loss
"""
import jax
from jax.sharding import PartitionSpec as P

from reference.ex3_fsdp_shard_map import local_loss  # the per-device loss, right as it is

ROWS = P("fsdp", None)
fsdp_loss = jax.shard_map(local_loss, in_specs=({"w1": ROWS, "w2": ROWS}, ROWS, ROWS), out_specs=P())
