"""The reference loop without jax.jit around it.

loses: train_is_one_scan_in_one_jit: the scan is not inside jax.jit
"""
from reference.ex8_loss_scaling import (DynScale, all_finite, dyn_scale_step, fp16_loss,  # noqa: F401
                                        scaled_grads, train_fp16_dynamic as _jitted)

train_fp16_dynamic = _jitted.__wrapped__
