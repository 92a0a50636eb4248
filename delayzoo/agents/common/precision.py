"""Mixed precision shared by the agents: the autocast a ``mixed_precision`` setting means on a device.

``False`` is float32; ``True`` is bfloat16 on a CPU and float16 elsewhere, whose updates need a gradient
scaler (:func:`grad_scaler`; the EfficientZero reference's ``torch_amp``); ``"bfloat16"`` is bfloat16 on
every device (no scaler). The parameters stay float32 in all three.
"""

from __future__ import annotations

import functools
import warnings
from typing import Any

import torch

__all__ = ["MIXED_PRECISION", "autocast", "autocast_dtype", "check_mixed_precision", "cpu_has_bf16", "grad_scaler"]

MIXED_PRECISION = (False, True, "bfloat16")
"""The accepted values of ``mixed_precision``."""


@functools.cache
def cpu_has_bf16() -> bool:
    """Whether this CPU computes bfloat16 natively (AVX512-BF16 or AMX); without, bfloat16 is emulated and slower."""
    checks = ("_is_avx512_bf16_supported", "_is_amx_tile_supported")
    return any(bool(getattr(torch.cpu, name, lambda: False)()) for name in checks)


def check_mixed_precision(value: Any) -> bool | str:
    """``value`` if it is one of :data:`MIXED_PRECISION`, else a ``ValueError`` naming it."""
    if isinstance(value, bool) or (isinstance(value, str) and value == "bfloat16"):
        return value
    raise ValueError(f"mixed_precision must be False, True or 'bfloat16', got {value!r}")


def autocast_dtype(device: torch.device, mixed_precision: bool | str) -> torch.dtype | None:
    """The autocast dtype of ``mixed_precision`` on ``device`` (``None``: off)."""
    if mixed_precision is False:
        return None
    if mixed_precision == "bfloat16" or device.type == "cpu":
        return torch.bfloat16
    return torch.float16


def autocast(device: torch.device, mixed_precision: bool | str, cache_enabled: bool = True) -> torch.autocast:
    """The autocast context of ``mixed_precision`` on ``device`` (a no-op when it is off); warns once per
    caller on a CPU without native bfloat16, where it is slower than float32.

    :param cache_enabled: cast each trainable weight once per region (torch's default). Torch keeps one cache
        for all threads and empties it whenever a thread leaves its outermost region, so beside another
        thread under autocast, whether a weight's uses share one cast (their gradients then summed in low
        precision) depends on timing: turn it off there to keep training reproducible
    """
    dtype = autocast_dtype(device, mixed_precision)
    if dtype is torch.bfloat16 and device.type == "cpu" and not cpu_has_bf16():
        warnings.warn(
            "mixed_precision: this CPU has no native bfloat16 (AVX512-BF16 / AMX), so it is slower", stacklevel=3
        )
    enabled = dtype is not None
    return torch.autocast(device.type, dtype=dtype or torch.bfloat16, enabled=enabled, cache_enabled=cache_enabled)


def grad_scaler(device: torch.device, mixed_precision: bool | str) -> torch.amp.GradScaler:
    """The update's gradient scaler: active under float16 autocast, a pass-through otherwise."""
    return torch.amp.GradScaler(device.type, enabled=autocast_dtype(device, mixed_precision) is torch.float16)
