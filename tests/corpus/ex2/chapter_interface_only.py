"""Only the chapter's interface: grouped_loss, without temp_memory_bytes or best_group_size.
What the README's "Differences from the chapter" says such a solution scores.

loses: temp_memory_bytes_matches_measurement: temp_memory_bytes
loses: best_group_size_is_the_measured_minimum: best_group_size
"""
from reference.ex2_sqrt_checkpointing import grouped_loss  # right as it is

__all__ = ["grouped_loss"]
