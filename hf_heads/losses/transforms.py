"""Output transforms of Hub architectures, applied to the logits of every discrete family:

    z' = cap · tanh(multiplier · z / cap)        z = W h + b (the head's logits)

`multiplier` is the head option `logit_multiplier` (Cohere `logit_scale`, Granite `1 / logits_scaling`, T5's
d_model^-0.5), `cap` the option `logit_softcap` (Gemma 2 / 3; None: no cap), read by `HeadsFor*.from_base` from the
checkpoint's config. The order (multiplier, bias, cap) is each architecture's: none has both a multiplier and a bias.
"""

from __future__ import annotations

import torch

from hf_heads.validation import check_number


def check_transform(
    logit_multiplier: float, softcap: float | None, multiplier_field: str = "logit_multiplier"
) -> None:
    """Raise `OptionError` for a non-positive multiplier or cap (`multiplier_field`: the multiplier's name in the
    message)."""
    check_number(multiplier_field, logit_multiplier, exclusive_minimum=0)
    if softcap is not None:
        check_number("logit_softcap", softcap, exclusive_minimum=0)


def soft_cap(z: torch.Tensor, softcap: float | None) -> torch.Tensor:
    """cap · tanh(z / cap) (z itself without a cap)."""
    return z if softcap is None else torch.tanh(z / softcap) * softcap


def transform_logits(z: torch.Tensor, logit_multiplier: float = 1.0, softcap: float | None = None) -> torch.Tensor:
    """cap · tanh(multiplier · z / cap) of logits z (*, V) that already include the bias (module docstring)."""
    return soft_cap(z if logit_multiplier == 1.0 else z * logit_multiplier, softcap)
