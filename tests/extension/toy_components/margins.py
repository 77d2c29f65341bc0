"""A margin with two parameters: φ = cos(θ + m1) − m2, ArcFace's angular margin and CosFace's additive one at once
(the "combined margin" of InsightFace), continued as ArcFace is past θ + m1 > π (monotone and finite)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import torch

from hf_heads.components import register
from hf_heads.losses.scorer import Margin, arc_phi
from hf_heads.validation import check_number


@register("margin")
@dataclass(frozen=True)
class ArcCos(Margin):
    """φ(θ) = cos(θ + m1) − m2 (m1, m2 >= 0)."""

    name: ClassVar[str] = "toy-arc-cos"
    example: ClassVar[dict] = {"m1": 0.2, "m2": 0.1}  # what the contract suite runs it with

    m1: float = 0.0
    m2: float = 0.0

    def check(self) -> None:
        super().check()  # finite numbers
        check_number("m1", self.m1, minimum=0)
        check_number("m2", self.m2, minimum=0)

    def phi(self, theta: torch.Tensor) -> torch.Tensor:  # the definition, and the contract's reference
        shifted = torch.cos(theta + self.m1)
        return torch.where(theta + self.m1 > math.pi, -2.0 - shifted, shifted) - self.m2

    def safe_phi(self, cos: torch.Tensor) -> torch.Tensor:  # from cos θ without acos: finite gradients at ±1
        return arc_phi(cos, self.m1) - self.m2
