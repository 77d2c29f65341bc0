"""A continuous-output loss with one parameter: a weighted cosine distance p · (1 − cos(û, u)) to the target's unit
embedding u, decoded by s·cos(û, E_c) like the margin losses."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch
import torch.nn.functional as F

from hf_heads.components import register
from hf_heads.losses.continuous_losses import ContinuousBatch, ContinuousLoss
from hf_heads.validation import check_number


@register("continuous_loss")
@dataclass(frozen=True)
class WeightedCosineDistance(ContinuousLoss):
    """p · (1 − cos(û, u)) (p > 0)."""

    name: ClassVar[str] = "toy-cosine-distance"
    title: ClassVar[str] = "weighted cosine distance to the target embedding"
    example: ClassVar[dict] = {"weight": 2.0}

    weight: float = 1.0

    def check(self) -> None:
        super().check()
        check_number("weight", self.weight, exclusive_minimum=0)

    def row_losses(self, batch: ContinuousBatch) -> torch.Tensor:
        return self.weight * (1 - F.cosine_similarity(batch.pred, batch.table[batch.ids], dim=-1))  # (n,)

    def reference(self, batch: ContinuousBatch) -> torch.Tensor:
        u_hat = batch.pred / batch.pred.norm(dim=-1, keepdim=True)
        return torch.stack([self.weight * (1 - u_hat[i] @ batch.table[y]) for i, y in enumerate(batch.ids.tolist())])
