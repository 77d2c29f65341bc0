"""Row bookkeeping shared by every loss: the compute dtype and mixed precision.

Every loss computes in float32 (float64 when its inputs are float64, for gradcheck), whatever the dtype
of its inputs, and whatever autocast context it is called in: under `torch.autocast` (the Trainer's
`--bf16` / `--fp16`) a matmul would otherwise return bfloat16/float16 in the middle of a float32
computation. Gradients go back to each input in its own dtype (the upcast is an autograd op).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TypeVar

import torch

F = TypeVar("F", bound=Callable)


def compute_dtype(*tensors: torch.Tensor | None) -> torch.dtype:
    """float64 if any input is float64, else float32."""
    return torch.float64 if any(t is not None and t.dtype == torch.float64 for t in tensors) else torch.float32


def autocast_off(fn: F) -> F:
    """Run `fn` with autocast disabled on the device of its first tensor argument (a no-op outside autocast)."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        first = next((a for a in (*args, *kwargs.values()) if isinstance(a, torch.Tensor)), None)
        if first is None or not torch.is_autocast_enabled(first.device.type):
            return fn(*args, **kwargs)
        with torch.autocast(first.device.type, enabled=False):
            return fn(*args, **kwargs)

    return wrapper  # type: ignore[return-value]
