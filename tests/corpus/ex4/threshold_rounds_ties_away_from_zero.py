"""Rounds w to bf16 by hand on the float32 bit pattern (add 0x8000, cut the low 16 bits): ties go
away from zero. Just above a power of two, a tie is then stored one step above the power instead of
on it, and the gap below it is twice too large.

loses: rounding_threshold_rounds_w_to_bf16_first: rounds ties away from zero
"""
import ml_dtypes
import numpy as np

from reference.ex4_master_weights import sgd_bf16, sgd_fp32_master, w_bf16, w_master  # noqa: F401  right as they are


def bf16_rounding_threshold(w):
    bits = np.array(w, np.float32).view(np.uint32)
    stored = np.array((bits + np.uint32(0x8000)) >> np.uint32(16), np.uint16).view(ml_dtypes.bfloat16)
    below = np.nextafter(stored, np.zeros_like(stored))
    return (float(stored) - float(below)) / 2
