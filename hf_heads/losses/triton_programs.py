"""The Triton programs of hf_heads/losses/_triton_program.py, loaded on first use in the mode triton was imported in
(compiled, or Triton's CPU interpreter under `TRITON_INTERPRET=1`), and `scale_in_place`, the backward's multiply by
d loss on the device. Every triton import sits in a function, so a model's saved code that carries this module loads
where triton is not installed."""

from __future__ import annotations

import os
import warnings

import torch

_PROGRAMS: dict[str, object] = {}  # the jitted programs of hf_heads/losses/_triton_program.py, loaded on first use


def _triton():
    """The `triton` package, or None where it does not import (every triton import sits in a `try`, so a model's saved
    code that carries them loads without triton)."""
    try:
        import triton
        import triton.language  # noqa: F401
    except ImportError:
        return None
    return triton


def triton_available() -> bool:
    """Whether the `triton` package imports."""
    return _triton() is not None


def _interpreting() -> bool:
    """Whether triton was imported under its CPU interpreter (`TRITON_INTERPRET=1` set before the first import)."""
    return type(_triton().language.sum).__name__ == "InterpretedFunction"


def program(name: str = "ce_per_row"):
    """The `triton.jit` program `name` of hf_heads/losses/_triton_program.py, decorated in the mode triton was imported
    in."""
    if name not in _PROGRAMS:
        previous = os.environ.get("TRITON_INTERPRET")
        os.environ["TRITON_INTERPRET"] = "1" if _interpreting() else "0"  # read by `triton.jit` as it decorates
        try:
            from hf_heads.losses._triton_program import ce_per_row, scale_unless_one
        finally:
            if previous is None:
                del os.environ["TRITON_INTERPRET"]
            else:
                os.environ["TRITON_INTERPRET"] = previous
        _PROGRAMS.update(ce_per_row=ce_per_row, scale_unless_one=scale_unless_one)
    return _PROGRAMS[name]


def scale_in_place(x: torch.Tensor, factor: torch.Tensor, block: int = 4096) -> torch.Tensor:
    """x *= factor (a one-element tensor, d loss) without reading factor on the host: on a device Triton runs on (and
    a contiguous x) a program that leaves x untouched when factor is 1 — the usual d loss of a mean loss, where the
    multiply would read and write all of x (the (V, H) weight gradient: 4.7 GB at V=256k, H=2304 in float32) — and
    multiplies it otherwise; elsewhere, and on a device where the program failed its first check (a warning says so),
    `x.mul_`. Returns x."""
    if factor.numel() != 1 or not x.is_contiguous() or not _scales_on(x.device):
        return x.mul_(factor.to(x.dtype))
    numel = x.numel()
    factor = factor.to(device=x.device, dtype=x.dtype)  # rounded by torch, as `x.mul_` rounds it
    program("scale_unless_one")[(-(-numel // block),)](x, factor, numel, BLOCK=block)
    return x


_SCALES_ON: dict[torch.device, bool] = {}  # per device: whether `scale_unless_one` passed its first check there


def _scales_on(device: torch.device) -> bool:
    """Whether `scale_in_place` runs its Triton program on `device`: Triton runs there, and on first use the program
    multiplied a small tensor as torch does and left it alone for a factor of 1 (else a warning, and torch)."""
    if device not in _SCALES_ON:
        runs = triton_available() and (device.type != "cpu" or _interpreting())
        _SCALES_ON[device] = runs and _check_scaling(device)
    return _SCALES_ON[device]


def _check_scaling(device: torch.device) -> bool:
    x = torch.linspace(-3, 3, 5003, device=device)
    try:
        program("scale_unless_one")[(2,)](got := x.clone(), torch.tensor(2.5, device=device), 5003, BLOCK=4096)
        program("scale_unless_one")[(2,)](same := x.clone(), torch.tensor(1.0, device=device), 5003, BLOCK=4096)
        ok = torch.equal(got, x * 2.5) and torch.equal(same, x)
        detail = "a result other than torch's"
    except Exception as error:  # noqa: BLE001 - any failure of the program means torch's multiply is used
        ok, detail = False, f"{type(error).__name__}: {error}"
    if not ok:
        warnings.warn(
            f"hf_heads: the Triton program that scales gradients by d loss gave {detail} on {device}; "
            "the backward multiplies with torch there (the same gradients, one more pass over the weight's)",
            stacklevel=3,
        )
    return ok
