"""A word norm with one parameter: f(c) = scale · log(1 + count_c), a log-unigram norm that stays finite and
positive for a word never seen in training."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch

from hf_heads.components import register
from hf_heads.losses.scorer import WordNorm
from hf_heads.validation import check_number


@register("word_norm")
@dataclass(frozen=True)
class ScaledLog1pUnigram(WordNorm):
    """f(c) = scale · log(1 + c_c) (scale > 0); needs the training word counts."""

    name: ClassVar[str] = "toy-log1p-unigram"
    example: ClassVar[dict] = {"scale": 0.5}

    scale: float = 1.0

    def check(self) -> None:
        super().check()
        check_number("scale", self.scale, exclusive_minimum=0)

    def reference(self, weight: torch.Tensor, counts: torch.Tensor | None) -> torch.Tensor:
        return self.scale * torch.log1p(counts)  # (V,)
