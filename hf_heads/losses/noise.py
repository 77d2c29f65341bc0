"""Noise distributions D for the sampling-based criteria and the draw of the shared samples.

Paper: Gao, Thulke, Gerstenberger, Tran, Schlüter, Ney, "On Sampling-Based Training Criteria for Neural Language
Modeling", Interspeech 2021 (shared/papers/sampling_criteria_lm.md, sec. 3.2, 4.1).

- `uniform`: D(c) = 1 / C.
- `log-uniform`: D(r) = log((r + 2) / (r + 1)) / log(C + 1) over the frequency rank r (0 = most frequent), as
  TensorFlow's `log_uniform_candidate_sampler`; the rank comes from the counts, never silently from the token id.
- `unigram`: D(c) ∝ (count_c + add)^α, α = `smoothing` (the paper's table 4). D(c) = 0 would make the IS/NCE weights
  and MCS/CPS corrections infinite, so zero counts are refused unless `add > 0`.

Samples: K classes drawn once per batch with replacement (i.i.d. from D) and shared by every position, as the paper's
derivations assume (the expected number of copies of c is K·D(c), sec. 3.2.5).
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import ClassVar

import torch

from hf_heads.components import REGISTRIES, Component, component_base, make_component, register
from hf_heads.losses.reduction import host_reads_are_free
from hf_heads.validation import OptionError, check_number


def frequency_ranks(counts: torch.Tensor) -> torch.Tensor:
    """(C,) rank of each class by descending count (0 = most frequent; ties keep id order)."""
    counts = torch.as_tensor(counts)
    order = torch.sort(counts, descending=True, stable=True).indices
    ranks = torch.empty_like(order)
    ranks[order] = torch.arange(counts.numel(), device=counts.device)
    return ranks


@component_base("noise")
@dataclass(frozen=True)
class Noise(Component, ABC):
    """A noise distribution D, a registered component (hf_heads.components): `reference` is D from its definition,
    (C,) float64 summing to 1; `distribution` what the heads use (default: the reference)."""

    needs_counts: ClassVar[bool] = True  # whether D needs the training word counts (or the ranks)

    @abstractmethod
    def reference(self, num_classes: int, counts: torch.Tensor | None, ranks: torch.Tensor | None) -> torch.Tensor:
        """D (C,) float64 from the counts (C,) float64 (None when not given) or the frequency ranks (C,)."""

    def distribution(self, num_classes: int, counts: torch.Tensor | None, ranks: torch.Tensor | None) -> torch.Tensor:
        """D (C,) float64, summing to 1 and > 0 for every class the draw may return (default: the reference)."""
        return self.reference(num_classes, counts, ranks)


@register("noise")
@dataclass(frozen=True)
class UniformNoise(Noise):
    """D(c) = 1 / C."""

    name: ClassVar[str] = "uniform"
    needs_counts: ClassVar[bool] = False

    def reference(self, num_classes, counts, ranks):
        return torch.full((num_classes,), 1.0 / num_classes, dtype=torch.float64)


@register("noise")
@dataclass(frozen=True)
class LogUniformNoise(Noise):
    """The Zipfian D(r) = log((r + 2) / (r + 1)) / log(C + 1) over the frequency rank r (0 = most frequent)."""

    name: ClassVar[str] = "log-uniform"

    def reference(self, num_classes, counts, ranks):
        if ranks is None:
            if counts is None:
                raise OptionError(
                    "noise",
                    self.name,
                    "needs the frequency rank: pass counts (word_counts), or ranks=torch.arange(C) if the token "
                    "ids are already sorted by frequency",
                )
            ids = torch.arange(num_classes)
            ahead = (counts[None, :] > counts[:, None]) | ((counts[None, :] == counts[:, None]) & (ids < ids[:, None]))
            ranks = ahead.sum(1)  # (C,) the classes counted more often, or as often with a smaller id
        r = torch.as_tensor(ranks, dtype=torch.float64)
        if r.shape != (num_classes,):
            raise ValueError(f"ranks has shape {tuple(r.shape)}, expected ({num_classes},)")
        return torch.log1p(1.0 / (r + 1.0)) / torch.log(torch.tensor(num_classes + 1.0, dtype=torch.float64))

    def distribution(self, num_classes, counts, ranks):
        if ranks is None and counts is None:
            return self.reference(num_classes, counts, ranks)  # its refusal
        r = torch.as_tensor(frequency_ranks(counts) if ranks is None else ranks, dtype=torch.float64)  # one sort
        if r.shape != (num_classes,):
            raise ValueError(f"ranks has shape {tuple(r.shape)}, expected ({num_classes},)")
        return (torch.log(r + 2.0) - torch.log(r + 1.0)) / math.log(num_classes + 1.0)


@register("noise")
@dataclass(frozen=True)
class UnigramNoise(Noise):
    """D(c) ∝ (count_c + add)^smoothing (smoothing > 0, add >= 0); a class with D(c) = 0 is refused."""

    name: ClassVar[str] = "unigram"
    example: ClassVar[dict] = {"smoothing": 0.75, "add": 1.0}

    smoothing: float = 0.75
    add: float = 0.0

    def check(self) -> None:
        super().check()
        check_number("smoothing", self.smoothing, exclusive_minimum=0)
        check_number("add", self.add, minimum=0)

    def reference(self, num_classes, counts, ranks):
        if counts is None:
            raise OptionError("noise", self.name, "needs counts (hf_heads.data.word_counts or the training labels)")
        smoothed = counts + self.add
        zeros = int((smoothed <= 0).sum())
        if zeros:
            raise ValueError(
                f"noise='unigram' with noise_add={self.add!r}: {zeros} of {num_classes} classes have count 0 and "
                "would get D(c) = 0 (never sampled, infinite corrections); set noise_add > 0 or use another noise"
            )
        probs = smoothed.pow(self.smoothing)
        return probs / probs.sum()


NOISES = tuple(REGISTRIES["noise"])  # the built-in noises: ("uniform", "log-uniform", "unigram")


def make_noise(noise: str | dict | Noise, field: str = "noise") -> Noise:
    """The noise of a config value: a registered name, `{"type": name, **parameters}` or an object."""
    return make_component("noise", noise, field=field)


def noise_distribution(
    noise: str | dict | Noise,
    num_classes: int,
    *,
    counts: torch.Tensor | None = None,
    ranks: torch.Tensor | None = None,
) -> torch.Tensor:
    """D over `num_classes` classes, shape (C,), float64, summing to 1. `noise`: a config value (a name, a dict,
    `"unigram:smoothing=0.5,add=1"`) or a `Noise`."""
    component = make_noise(noise)
    check_number("num_classes", num_classes, minimum=2, integer=True)
    if counts is not None:
        counts = torch.as_tensor(counts, dtype=torch.float64)
        if counts.shape != (num_classes,):
            raise ValueError(f"counts has shape {tuple(counts.shape)}, expected ({num_classes},)")
        if not bool(torch.isfinite(counts).all()) or bool((counts < 0).any()):
            raise ValueError("counts must be finite and >= 0")
    return component.distribution(num_classes, counts, ranks)


def check_noise_probs(noise_probs: torch.Tensor, num_classes: int) -> None:
    """A valid D: shape (C,), finite, > 0 everywhere, summing to 1."""
    if noise_probs.dim() != 1 or noise_probs.shape[0] != num_classes:
        raise ValueError(f"noise_probs has shape {tuple(noise_probs.shape)}, expected ({num_classes},)")
    positive = torch.isfinite(noise_probs).all() & (noise_probs > 0).all()
    if not host_reads_are_free(noise_probs.device):  # a training step on an accelerator: no host sync
        sums_to_one = (noise_probs.double().sum() - 1.0).abs() <= 1e-4
        torch._assert_async(positive & sums_to_one, "noise_probs must be finite, > 0 for every class and sum to 1")
        return
    if not bool(positive):
        raise ValueError("noise_probs must be finite and > 0 for every class")
    total = float(noise_probs.double().sum())
    if abs(total - 1.0) > 1e-4:
        raise ValueError(f"noise_probs sums to {total:.6g}, must sum to 1")


def draw_samples(
    noise_probs: torch.Tensor, num_samples: int, generator: torch.Generator | None = None
) -> torch.Tensor:
    """(K,) class ids drawn i.i.d. from D with replacement (once per batch, shared by all positions)."""
    return torch.multinomial(noise_probs.float(), num_samples, replacement=True, generator=generator)
