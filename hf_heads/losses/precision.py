"""The dtypes of the losses under mixed precision.

Every loss computes in float32 (float64 for float64 inputs, for gradcheck) whatever autocast context it is called in
(under `--bf16` / `--fp16` a matmul would otherwise return a half dtype mid-computation); gradients go back to each
input in its own dtype. `autocast_off` runs a loss with autocast switched off and keeps the dtype autocast had for
`gemm_dtype` (the dtype of an output layer's matrix products) and `loss_dtype` (the dtype of the returned loss).
"""

from __future__ import annotations

import contextlib
import functools
import threading
from collections.abc import Callable
from typing import TypeVar

import torch

F = TypeVar("F", bound=Callable)


def compute_dtype(*tensors: torch.Tensor | None) -> torch.dtype:
    """float64 if any input is float64, else float32."""
    return torch.float64 if any(t is not None and t.dtype == torch.float64 for t in tensors) else torch.float32


_OUTER = threading.local()  # the autocast dtype `autocast_off` switched off, for `gemm_dtype`
HALF_DTYPES = (torch.bfloat16, torch.float16)


def autocast_off(fn: F) -> F:
    """Run `fn` with autocast disabled on the device of its first tensor argument (a no-op outside autocast). The
    dtype autocast had is kept for `gemm_dtype` while `fn` runs."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        first = next((a for a in (*args, *kwargs.values()) if isinstance(a, torch.Tensor)), None)
        if first is None or not torch.is_autocast_enabled(first.device.type):
            return fn(*args, **kwargs)
        previous, _OUTER.dtype = getattr(_OUTER, "dtype", None), torch.get_autocast_dtype(first.device.type)
        try:
            with torch.autocast(first.device.type, enabled=False):
                return fn(*args, **kwargs)
        finally:
            _OUTER.dtype = previous

    return wrapper  # type: ignore[return-value]


@contextlib.contextmanager
def full_precision():
    """Inside an `autocast_off` function: forget the autocast dtype it switched off and run CUDA float32 matmuls in
    IEEE float32, so that a kernel's self-check compares two implementations at float32 tolerances (TF32 rounding
    alone differs by ~1e-4)."""
    matmul = torch.backends.cuda.matmul
    previous, _OUTER.dtype = getattr(_OUTER, "dtype", None), None
    precision, matmul.fp32_precision = matmul.fp32_precision, "ieee"
    try:
        yield
    finally:
        _OUTER.dtype = previous
        matmul.fp32_precision = precision


def loss_dtype(*tensors: torch.Tensor | None) -> torch.dtype:
    """torch's dtype for the loss of these inputs' logits, as `F.cross_entropy(hidden @ weight.T + bias, ...)` gives
    it: float32 under autocast (also inside an `autocast_off` function called under autocast), else the inputs'
    promoted dtype. The losses accumulate in float32 whatever this is and round once at the end."""
    present = [t for t in tensors if t is not None]
    if getattr(_OUTER, "dtype", None) is not None or torch.is_autocast_enabled(present[0].device.type):
        return torch.float32
    return functools.reduce(torch.promote_types, (t.dtype for t in present))


def gemm_dtype(*tensors: torch.Tensor | None) -> torch.dtype:
    """The dtype of an output layer's matrix products: float64 when an input is float64 (gradcheck); else the autocast
    dtype the loss was called under, else a half dtype of the inputs, else float32. Half products accumulate in
    float32; the softmax and margin math after them stays in float32."""
    dtypes = {t.dtype for t in tensors if t is not None}
    if torch.float64 in dtypes:
        return torch.float64
    outer = getattr(_OUTER, "dtype", None)
    if outer in HALF_DTYPES:
        return outer
    return next((d for d in HALF_DTYPES if d in dtypes), torch.float32)
