"""Rounds w to bf16 by keeping the upper 16 bits of its float32 (rounding toward zero). Between
half a step and a whole step above a power of two, w is then stored on the power instead of one
step above it, where the gap below is half as large.

loses: rounding_threshold_rounds_w_to_bf16_first: truncates
"""
import ml_dtypes
import numpy as np

from reference.ex4_master_weights import sgd_bf16, sgd_fp32_master, w_bf16, w_master  # noqa: F401  right as they are


def bf16_rounding_threshold(w):
    bits = np.array(w, np.float32).view(np.uint32)
    stored = np.array(bits >> np.uint32(16), np.uint16).view(ml_dtypes.bfloat16)
    below = np.nextafter(stored, np.zeros_like(stored))
    return (float(stored) - float(below)) / 2
