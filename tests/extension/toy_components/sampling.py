"""A sampling method with one parameter: tempered importance sampling, each sample weighted by (K·D(c))^−power.
power = 1 is importance sampling (the sampling paper's eqs. 11, 13), power = 0 Monte Carlo sampling (eqs. 7, 9);
in between, the weights of rare samples are damped. The posterior correction interpolates the two methods' ones
(s + (1 − power)·log D for CE, s + (1 − power)·log(K·D) for BCE): exact at both ends, a heuristic in between."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch

from hf_heads.components import register
from hf_heads.losses.sampled import SamplingMethod
from hf_heads.validation import OptionError, check_number


@register("sampling_method")
@dataclass(frozen=True)
class TemperedIS(SamplingMethod):
    """Importance sampling with weights (K·D(c))^−power, 0 <= power <= 1."""

    name: ClassVar[str] = "toy-tempered-is"
    example: ClassVar[dict] = {"power": 0.5}
    ce_correction_uses_noise: ClassVar[bool] = True
    bce_correction_uses_noise: ClassVar[bool] = True

    power: float = 1.0

    def check(self) -> None:
        super().check()
        check_number("power", self.power, minimum=0)
        if self.power > 1:
            raise OptionError("power", self.power, "must be <= 1")

    def ce_candidate(self, s, log_kd, num_samples, num_classes):
        return s - self.power * log_kd

    def bce_weight(self, log_kd, num_samples, num_classes):
        return torch.exp(-self.power * log_kd)

    def correction(self, s, criterion, log_d, num_samples, num_classes):
        if criterion.softmax:  # cross-entropy; else BCE
            return s + (1 - self.power) * log_d
        return s + (1 - self.power) * (log_d + torch.log(torch.tensor(float(num_samples), dtype=s.dtype)))

    def reference(self, criterion, t, s, log_kd_t, log_kd, num_samples, num_classes):
        w_t, w = torch.exp(-self.power * log_kd_t), torch.exp(-self.power * log_kd)  # (K·D)^−power
        if not criterion.softmax:
            return -torch.log(torch.sigmoid(t)) - (w * torch.log(1 - torch.sigmoid(s))).sum()
        return -t + torch.log(w_t * torch.exp(t) + (w * torch.exp(s)).sum())
