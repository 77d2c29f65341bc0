"""A batch context norm other than max-norm: g(i) = the mean ‖h_j‖ over the batch's counted rows, one value for the
whole batch (a running value of it at evaluation, as max-norm's)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch

from hf_heads.components import register
from hf_heads.losses.scorer import ContextNorm


@register("context_norm")
@dataclass(frozen=True)
class MeanNorm(ContextNorm):
    """g(i) = mean_j ‖h_j‖ over the counted rows j of the batch."""

    name: ClassVar[str] = "toy-mean-norm"
    batch_dependent: ClassVar[bool] = True

    def reference(self, hidden: torch.Tensor, valid: torch.Tensor | None) -> torch.Tensor:
        norms = hidden.norm(dim=1)
        return (norms if valid is None else norms[valid]).mean().expand(hidden.shape[0])

    def values(self, hidden: torch.Tensor, valid: torch.Tensor | None) -> torch.Tensor:
        return self.batch_value(hidden, valid).expand(hidden.shape[0])

    def batch_value(self, hidden: torch.Tensor, valid: torch.Tensor | None) -> torch.Tensor:
        norms = hidden.norm(dim=1)
        if valid is None:
            return norms.mean() if norms.numel() else norms.new_zeros(())
        return (norms * valid).sum() / valid.sum().clamp_min(1)
