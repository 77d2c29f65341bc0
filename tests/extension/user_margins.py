"""A component written outside hf_heads, as a user writes one in a module of their own: a margin type registered with
`register_margin` (docs/contributing.md). tests/project/test_components.py trains a head with it, saves it, and loads
it in a fresh process (this module imported from the recorded name) and where neither hf_heads nor this module can be
imported (`trust_remote_code=True`: the copy saved with the model)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import torch

from hf_heads.losses import OneParameterMargin, register_margin  # the public path


@register_margin
@dataclass(frozen=True)
class HalfArc(OneParameterMargin):
    """Half an ArcFace margin: φ = cos(θ + m/2), continued as −2 − cos(θ + m/2) past θ + m/2 > π (monotone)."""

    name: ClassVar[str] = "user-half-arc"

    def phi(self, theta: torch.Tensor) -> torch.Tensor:
        shifted = torch.cos(theta + self.m / 2)
        return torch.where(theta + self.m / 2 > math.pi, -2.0 - shifted, shifted)
