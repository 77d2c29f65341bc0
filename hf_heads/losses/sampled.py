"""Sampling-based training criteria (MCS, IS, CPS, NCE for CE and BCE; full MSE, BCE, CE) and the mapping of each
trained output back to the class posterior p(c|x).

Paper: Gao, Thulke, Gerstenberger, Tran, Schlüter, Ney, "On Sampling-Based Training Criteria for Neural Language
Modeling", Interspeech 2021 (shared/papers/sampling_criteria_lm.md).

s(c, x) is the scorer's logit; the model output is q = s for CE, σ(s) for BCE and MSE (sec. 3.1, 3.2.5), and
exp(s) for NCE, so q / (q + K·D(c)) = σ(s − log K·D(c)) (eqs. 19, 21).

Criteria, per position n with target c_n and K shared samples c̃_k ~ D (losses = −F / N):

    mse  full  Σ_c (σ(s_c) − δ(c, c_n))²                                          eq. 1
    bce  full  −log σ(s_cn) − Σ_{c≠cn} log(1 − σ(s_c))                              eq. 3
    ce   full  −s_cn + log Σ_c exp s_c                                              eq. 5
    bce  mcs   −log σ(s_cn) − Σ_k log(1 − σ(s_k))                                   eq. 7
    bce  is    −log σ(s_cn) − Σ_k log(1 − σ(s_k)) / (K·D(c̃_k))                      eq. 11
    bce  cps   −log σ(s_cn) − α Σ_k log(1 − σ(s_k)),  α = C / K                    eq. 15
    bce  nce   −log σ(z_cn) − Σ_k log(1 − σ(z_k)),  z = s − log(K·D(c))             eq. 19
    ce   mcs   −s_cn + log Σ_k exp s_k                                              eq. 9
    ce   is    −s_cn + log Σ_k exp(s_k) / (K·D(c̃_k))                                eq. 13
    ce   cps   −s_cn + log α Σ_k exp s_k                                            eq. 17
    ce   nce   −σ(z_cn) + log Σ_k exp σ(z_k)                                        eq. 21

Posterior corrections (`corrected_log_probs`), log p̃(c|x) before normalisation:

    mse/bce full   log σ(s)                 eqs. 2, 4      ce full, ce is   s             eqs. 6, 14
    bce mcs        s + log(K·D(c))          eq. 8          ce mcs, ce cps   s + log D(c)  eqs. 10, 18
    bce is         s                        eq. 12         ce nce           σ(z) + log D(c)  eq. 22
    bce cps        s + log(C·D(c))          eq. 16 (αK = C)
    bce nce        s                        eq. 20

A correction s + o(c) (`SamplingMethod.correction_is_additive`) is a linear output layer's with o(c) in its bias, which
is how a sampled head exports to its base architecture (hf_heads.modeling.base_export).

Each method is one registered component class (`SAMPLING_METHODS`) holding its column of both tables and its
`reference`; the criterion is a `Criterion` (hf_heads.losses.parts). `Sampled` (the candidates of `output_loss`) and
`Correction` (a `Scorer`'s `posterior`) apply them with no per-method case of their own.

Choices where the paper is silent (each is tested):
- The CE criteria keep the target among the candidates of the denominator, with the same per-class transform as a
  sample: written literally (target absent) eqs. 9/13/17 are unbounded on finite samples and diverge. The numerator is
  the paper's (s_cn, or σ(z_cn) for NCE).
- BCE criteria are literal: a sample equal to the target is a negative like any other, unless
  `remove_accidental_hits=True` (then such samples are dropped, for CE and BCE alike).
- Samples are drawn with replacement (hf_heads.losses.noise).
- `normalize=True` (the default, and what the heads return at inference) renormalises log p̃ over the full vocabulary,
  so perplexity and `generate()` use a proper distribution; `normalize=False` returns log p̃ itself (the paper's table
  4 scores without explicit normalisation).
- Arithmetic is float32 (float64 for float64 inputs), but the candidates' product (N, K) runs in the autocast or half
  dtype (float32 accumulation) and gathers only the K candidate rows of W.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import ClassVar

import torch
import torch.nn.functional as F

from hf_heads.components import REGISTRIES, Component, component_base, make_component, register
from hf_heads.losses.chunks import refuse_kernel
from hf_heads.losses.noise import check_noise_probs, draw_samples
from hf_heads.losses.parts import Candidates, Criterion, make_criterion
from hf_heads.losses.precision import autocast_off, compute_dtype, gemm_dtype
from hf_heads.losses.precision import loss_dtype as _loss_dtype
from hf_heads.losses.reduction import check_reduction, counted_rows, linear_inputs, reduce_rows
from hf_heads.losses.transforms import soft_cap
from hf_heads.losses.vocab_parallel import (
    same_samples,
    sharded_candidate_scores,
    sharded_margin_inputs,
    vocab_shard,
)
from hf_heads.validation import OptionError, check_number

# ----------------------------------------------------------------------------- the methods


@component_base("sampling_method")
@dataclass(frozen=True)
class SamplingMethod(Component, ABC):
    """One sampling method, a registered component: its candidate terms, its posterior corrections (module docstring
    tables) and `reference`, its criteria for one position from the paper's equations. Arguments: s are scores of
    candidates (any shape), `log_kd` log(K·D(c)) of their classes, K the number of samples, C the number of classes."""

    name: ClassVar[str] = ""
    draws_samples: ClassVar[bool] = True  # False: every class is a candidate (no noise)
    ce_is_softmax: ClassVar[bool] = False  # whether its CE is −log of a softmax (over V or the candidates)
    # whether the corrected scores can start at a checkpoint's posterior by a bias shift (`calibrate_bias`; CE-NCE's
    # σ-bounded output cannot represent it)
    ce_optimum_is_posterior: ClassVar[bool] = True
    # whether the correction of a softmax (CE) / a sigmoid (BCE) criterion uses log D
    ce_correction_uses_noise: ClassVar[bool] = False
    bce_correction_uses_noise: ClassVar[bool] = False
    # whether the correction of a softmax (CE) / sigmoid (BCE) criterion is s + o(c), an offset per class whatever
    # the score (`correction` of zero scores gives o): a linear output layer with o in its bias then has the
    # corrected posterior (hf_heads.modeling.base_export); the σ-based ones (log σ(s), σ(z) + log D) are not
    ce_correction_is_additive: ClassVar[bool] = False
    bce_correction_is_additive: ClassVar[bool] = False

    def correction_uses_noise(self, criterion: Criterion) -> bool:
        """Whether the posterior correction of this method for `criterion` uses log D (the noise)."""
        return self.ce_correction_uses_noise if criterion.softmax else self.bce_correction_uses_noise

    def correction_is_additive(self, criterion: Criterion) -> bool:
        """Whether the posterior correction of this method for `criterion` is the score plus a per-class offset."""
        return self.ce_correction_is_additive if criterion.softmax else self.bce_correction_is_additive

    def ce_candidate(self, s: torch.Tensor, log_kd: torch.Tensor, num_samples: int, num_classes: int):
        """A candidate's term in the CE denominator log Σ exp(·) (the target is a candidate too)."""
        return s

    def ce_numerator(self, t: torch.Tensor, target_term: torch.Tensor) -> torch.Tensor:
        """The CE numerator from the target's score t and its candidate term."""
        return t

    def bce_logit(self, s: torch.Tensor, log_kd: torch.Tensor) -> torch.Tensor:
        """z of the BCE terms −log σ(z_cn) (target) and −log(1 − σ(z_k)) (sample)."""
        return s

    def bce_weight(self, log_kd: torch.Tensor, num_samples: int, num_classes: int):
        """The weight of a sample's −log(1 − σ(z_k)), or None for 1."""
        return None

    def correction(self, s, criterion: Criterion, log_d, num_samples: int | None, num_classes: int) -> torch.Tensor:
        """log p̃(c|x) (before normalisation) from the trained scores s (*, C); log_d: log D (C,) or None."""
        raise NotImplementedError

    @abstractmethod
    def reference(
        self, criterion: Criterion, t: torch.Tensor, s: torch.Tensor, log_kd_t: torch.Tensor, log_kd: torch.Tensor,
        num_samples: int | None, num_classes: int,
    ) -> torch.Tensor:  # fmt: skip
        """The loss () of one position from its equation: the target's score t () and its log(K·D), the other
        candidates' scores s (M,) and log(K·D) (M,): the K samples (hits dropped where removed), or every other class
        for `full`."""


@register("sampling_method")
@dataclass(frozen=True)
class Full(SamplingMethod):
    """No sampling: MSE (eq. 1), BCE (eq. 3) and CE (eq. 5) over every class; p = σ(s) (eqs. 2, 4), softmax(s) (eq.
    6)."""

    name: ClassVar[str] = "full"
    draws_samples: ClassVar[bool] = False
    ce_is_softmax: ClassVar[bool] = True  # eq. 5
    ce_correction_is_additive: ClassVar[bool] = True  # eq. 6: s (BCE / MSE: log σ(s), eqs. 2, 4)

    def correction(self, s, criterion, log_d, num_samples, num_classes):
        return s if criterion.softmax else F.logsigmoid(s)

    def reference(self, criterion, t, s, log_kd_t, log_kd, num_samples, num_classes):
        if not criterion.softmax:  # eq. 1 (MSE) or eq. 3 (BCE): the criterion's own definition over every class
            return criterion.reference(torch.cat([t[None], s])[None], torch.zeros(1, dtype=torch.long))[0]
        return -t + torch.log(torch.exp(t) + torch.exp(s).sum())  # eq. 5


@register("sampling_method")
@dataclass(frozen=True)
class MCS(SamplingMethod):
    """Monte Carlo sampling: BCE eq. 7, CE eq. 9 with the scores as they are; corrections s + log(K·D(c))
    (eq. 8) and s + log D(c) (eq. 10)."""

    name: ClassVar[str] = "mcs"
    ce_is_softmax: ClassVar[bool] = True  # eq. 9: a softmax over the candidates
    ce_correction_uses_noise: ClassVar[bool] = True
    bce_correction_uses_noise: ClassVar[bool] = True
    ce_correction_is_additive: ClassVar[bool] = True  # eq. 10
    bce_correction_is_additive: ClassVar[bool] = True  # eq. 8

    def correction(self, s, criterion, log_d, num_samples, num_classes):
        return s + log_d if criterion.softmax else s + (log_d + math.log(num_samples))

    def reference(self, criterion, t, s, log_kd_t, log_kd, num_samples, num_classes):
        if not criterion.softmax:  # eq. 7
            return -torch.log(torch.sigmoid(t)) - torch.log(1 - torch.sigmoid(s)).sum()
        return -t + torch.log(torch.exp(t) + torch.exp(s).sum())  # eq. 9, the target among the candidates


@register("sampling_method")
@dataclass(frozen=True)
class IS(SamplingMethod):
    """Importance sampling: each sample weighted by 1 / (K·D(c̃)): BCE eq. 11, CE eq. 13 (exp(s) / (K·D), i.e.
    s − log(K·D) inside the log-sum-exp); corrections s (eqs. 12, 14)."""

    name: ClassVar[str] = "is"
    ce_correction_is_additive: ClassVar[bool] = True  # eq. 14: s
    bce_correction_is_additive: ClassVar[bool] = True  # eq. 12: s

    def ce_candidate(self, s, log_kd, num_samples, num_classes):
        return s - log_kd

    def bce_weight(self, log_kd, num_samples, num_classes):
        return torch.exp(-log_kd)

    def correction(self, s, criterion, log_d, num_samples, num_classes):
        return s

    def reference(self, criterion, t, s, log_kd_t, log_kd, num_samples, num_classes):
        kd_t, kd = torch.exp(log_kd_t), torch.exp(log_kd)  # K·D(c)
        if not criterion.softmax:  # eq. 11
            return -torch.log(torch.sigmoid(t)) - (torch.log(1 - torch.sigmoid(s)) / kd).sum()
        return -t + torch.log(torch.exp(t) / kd_t + (torch.exp(s) / kd).sum())  # eq. 13


@register("sampling_method")
@dataclass(frozen=True)
class CPS(SamplingMethod):
    """Compensated partial summation: each sample weighted by α = C / K: BCE eq. 15, CE eq. 17 (s + log α); corrections
    s + log(C·D(c)) (eq. 16, αK = C) and s + log D(c) (eq. 18).

    CE-CPS is CE-MCS plus the constant log α (α is one number for the run, sec. 3.2.3): same gradient, same correction
    (eq. 18 = eq. 10), so from the same samples it trains the same model, although the paper's tables report the two
    differently (docs/results/sampled_lm). α matters only in BCE-CPS (eqs. 15-16)."""

    name: ClassVar[str] = "cps"
    ce_correction_uses_noise: ClassVar[bool] = True
    bce_correction_uses_noise: ClassVar[bool] = True
    ce_correction_is_additive: ClassVar[bool] = True  # eq. 18
    bce_correction_is_additive: ClassVar[bool] = True  # eq. 16

    def ce_candidate(self, s, log_kd, num_samples, num_classes):
        return s + math.log(num_classes / num_samples)

    def bce_weight(self, log_kd, num_samples, num_classes):
        return num_classes / num_samples

    def correction(self, s, criterion, log_d, num_samples, num_classes):
        return s + log_d if criterion.softmax else s + log_d + math.log(num_classes)

    def reference(self, criterion, t, s, log_kd_t, log_kd, num_samples, num_classes):
        alpha = num_classes / num_samples
        if not criterion.softmax:  # eq. 15
            return -torch.log(torch.sigmoid(t)) - alpha * torch.log(1 - torch.sigmoid(s)).sum()
        return -t + torch.log(alpha * (torch.exp(t) + torch.exp(s).sum()))  # eq. 17


@register("sampling_method")
@dataclass(frozen=True)
class NCE(SamplingMethod):
    """Noise contrastive estimation, q = exp(s), z = s − log(K·D(c)): BCE eq. 19 on z, CE eq. 21 on σ(z) (the
    numerator σ(z_cn) too); corrections s (eq. 20) and σ(z) + log D(c) (eq. 22)."""

    name: ClassVar[str] = "nce"
    ce_is_softmax: ClassVar[bool] = True  # eq. 21: a softmax of σ(z) over the candidates
    ce_optimum_is_posterior: ClassVar[bool] = False
    ce_correction_uses_noise: ClassVar[bool] = True
    bce_correction_is_additive: ClassVar[bool] = True  # eq. 20: s (CE's eq. 22, σ(z) + log D(c), is not)

    def ce_candidate(self, s, log_kd, num_samples, num_classes):
        return torch.sigmoid(s - log_kd)

    def ce_numerator(self, t, target_term):
        return target_term

    def bce_logit(self, s, log_kd):
        return s - log_kd

    def correction(self, s, criterion, log_d, num_samples, num_classes):
        if criterion.softmax:
            return torch.sigmoid(s - (log_d + math.log(num_samples))) + log_d
        return s

    def reference(self, criterion, t, s, log_kd_t, log_kd, num_samples, num_classes):
        z_t, z = t - log_kd_t, s - log_kd
        if not criterion.softmax:  # eq. 19
            return -torch.log(torch.sigmoid(z_t)) - torch.log(1 - torch.sigmoid(z)).sum()
        q_t, q = torch.sigmoid(z_t), torch.sigmoid(z)
        return -q_t + torch.log(torch.exp(q_t) + torch.exp(q).sum())  # eq. 21


SAMPLING_METHODS: dict[str, type[SamplingMethod]] = REGISTRIES["sampling_method"]  # name -> class
METHODS = tuple(SAMPLING_METHODS)  # the built-in methods: ("full", "mcs", "is", "cps", "nce")


def register_sampling_method(cls: type[SamplingMethod]) -> type[SamplingMethod]:
    """Class decorator: make the `SamplingMethod` subclass `cls` the method `cls.name`."""
    return register("sampling_method")(cls)


def make_sampling_method(method: str | dict | SamplingMethod, field: str = "method") -> SamplingMethod:
    """The sampling method of a config value: a registered name, `{"type": name, **parameters}` or an object."""
    return make_component("sampling_method", method, field=field)


def validate_sampled_options(
    criterion: str | dict | Criterion, method: str | dict | SamplingMethod, num_samples: int | None,
    num_classes: int | None,
) -> SamplingMethod:  # fmt: skip
    """The sampling method of `method`, after checking it with the criterion and K (`OptionError` naming the field)."""
    criterion = make_criterion(criterion)
    sampler = make_sampling_method(method)
    if not criterion.softmax and not criterion.sampled_form and not isinstance(sampler, Full):
        raise OptionError(
            "method",
            method,
            f"is not allowed: criterion={criterion.name!r} has only method='full' (the paper defines no sampled "
            f"{criterion.name.upper()})",
        )
    if not sampler.draws_samples:
        if not isinstance(sampler, Full):  # the criteria over every class are the fused kernels' (`full`)
            raise OptionError("method", method, "draws no samples: only 'full' (or a subclass of Full) may")
        return sampler
    if num_samples is None:
        raise OptionError(
            "num_samples",
            None,
            f"is missing: method={method!r} needs num_samples=K (an integer, 1 <= K < number of classes)",
        )
    check_number("num_samples", num_samples, minimum=1, integer=True)
    if num_classes is not None and num_samples >= num_classes:
        raise OptionError("num_samples", num_samples, f"must be < the number of classes ({num_classes})")
    return sampler


def _correction_noise(sampler, criterion: Criterion, noise_probs, num_classes: int) -> torch.Tensor | None:
    """D (C,), checked, when the posterior correction of `criterion` × the method uses it, else None."""
    if not sampler.correction_uses_noise(criterion):
        return None
    if noise_probs is None:
        raise ValueError(f"method={sampler.name!r} needs noise_probs for its correction")
    check_noise_probs(noise_probs, num_classes)
    return noise_probs


@dataclass(frozen=True, eq=False)
class Correction:
    """The posterior of a model trained with `criterion` × `method` (eqs. 2-22), a `Scorer`'s `posterior`: its scores s
    (n, V_block), the first class `offset`, to log p̃(c|x) before normalisation, D (V,) given whole."""

    criterion: Criterion
    method: SamplingMethod
    num_samples: int | None = None
    noise_probs: torch.Tensor | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "criterion", make_criterion(self.criterion))
        object.__setattr__(self, "method", make_sampling_method(self.method))

    def __call__(self, scores: torch.Tensor, offset: int = 0) -> torch.Tensor:
        num_classes = self.noise_probs.shape[0] if self.noise_probs is not None else scores.shape[-1]
        s = scores.to(compute_dtype(scores))
        noise = _correction_noise(self.method, self.criterion, self.noise_probs, num_classes)
        log_d = None
        if noise is not None:
            log_d = noise[offset : offset + scores.shape[-1]].to(device=s.device, dtype=s.dtype).log()
        return self.method.correction(s, self.criterion, log_d, self.num_samples, num_classes)


def corrected_log_probs(
    scores: torch.Tensor,
    *,
    criterion: str | dict | Criterion,
    method: str | dict | SamplingMethod,
    noise_probs: torch.Tensor | None = None,
    num_samples: int | None = None,
    normalize: bool = True,
) -> torch.Tensor:
    """log p(c|x) over the full vocabulary from the trained scores s (*, C) (module docstring table); `normalize=False`
    returns the unnormalised log p̃."""
    validate_sampled_options(criterion, method, num_samples, scores.shape[-1])
    out = Correction(criterion, method, num_samples, noise_probs)(scores)
    return torch.log_softmax(out, dim=-1) if normalize else out


# ----------------------------------------------------------------------------- the criteria


def _candidate_scores(h, weight, bias, f, cands, softcap, gemm: torch.dtype):
    """cap(h · (f_k W_k) + b_k) (N, K) for the scaled rows h (N, H) and the candidates `cands` (K,), the product in
    `gemm` with only the K candidate rows of W gathered."""
    w = weight[cands] if f is None else weight[cands] * f[cands, None]  # (K, H)
    out = (h.to(gemm) @ w.to(gemm).T).to(h.dtype)  # (N, K)
    return soft_cap(out if bias is None else out + bias[cands], softcap)


def _log_kd(noise_probs: torch.Tensor, num_samples: int, like: torch.Tensor) -> torch.Tensor:
    """log(K·D(c)) (C,) in the dtype and on the device of `like`."""
    return noise_probs.to(device=like.device, dtype=like.dtype).log() + math.log(num_samples)


def _sampled_per_row(sampler: SamplingMethod, criterion, t, s_k, log_kd_t, log_kd_k, hit, num_samples, num_classes):
    """Per-row loss of a sampling criterion from the target scores t (N,) and the sample scores s_k (N, K)."""
    if criterion.softmax:
        u_t = sampler.ce_candidate(t, log_kd_t, num_samples, num_classes)  # (N,)
        u_k = sampler.ce_candidate(s_k, log_kd_k, num_samples, num_classes)  # (N, K)
        if hit is not None:
            u_k = u_k.masked_fill(hit, float("-inf"))
        denominator = torch.logsumexp(torch.cat([u_t[:, None], u_k], dim=1), dim=1)  # (N,)
        return denominator - sampler.ce_numerator(t, u_t)
    pos = F.softplus(-sampler.bce_logit(t, log_kd_t))  # −log σ(z_cn)
    neg = F.softplus(sampler.bce_logit(s_k, log_kd_k))  # −log(1 − σ(z_k)), (N, K)
    weight = sampler.bce_weight(log_kd_k, num_samples, num_classes)
    if weight is not None:
        neg = neg * weight
    if hit is not None:
        neg = neg.masked_fill(hit, 0.0)
    return pos + neg.sum(1)


@dataclass(frozen=True, eq=False)
class Sampled(Candidates):
    """The target and K classes drawn from the noise D (`noise_probs`, (C,)) once per batch (or given as `samples`
    (K,)), scored by the sampling `method` (eqs. 7-21); `remove_accidental_hits` drops a sample equal to the row's
    target."""

    method: str | dict | SamplingMethod
    num_samples: int
    noise_probs: torch.Tensor
    remove_accidental_hits: bool = False
    samples: torch.Tensor | None = None
    generator: torch.Generator | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "method", make_sampling_method(self.method))
        if not self.method.draws_samples:
            raise OptionError(
                "method", self.method.name, "draws no samples: every class is a candidate, use candidates=Full()"
            )
        check_number("num_samples", self.num_samples, minimum=1, integer=True)

    @autocast_off
    def loss(self, inputs, scorer, criterion, returns, impl):
        refuse_kernel(impl.kernel, "is for the chunked passes of Full candidates; a sampling method scores its K "
                      "candidates without a chunk kernel: leave it unset")  # fmt: skip
        if returns:
            raise OptionError("returns", list(returns), "is for Full candidates (a sampled criterion sees no softmax "
                              "over every class)")  # fmt: skip
        hidden, weight, bias, target = inputs.tensors()
        out_dtype = impl.loss_dtype or _loss_dtype(hidden, weight, bias)
        num_classes, sampler, num_samples = weight.shape[0], self.method, self.num_samples
        validate_sampled_options(criterion, sampler, num_samples, num_classes)
        check_reduction(inputs.reduction)
        scorer.check_counts(scorer.word_counts, num_classes)
        data = (scorer.word_counts, scorer.context_norm_value)
        check_noise_probs(self.noise_probs, num_classes)
        samples = self.samples  # the K samples, shared by every position
        if samples is None:
            samples = draw_samples(self.noise_probs.to(weight.device), num_samples, self.generator)
        elif samples.shape != (num_samples,):
            raise ValueError(f"samples has shape {tuple(samples.shape)}, expected ({num_samples},)")
        counting = (inputs.reduction, inputs.num_items_in_batch)
        shard = vocab_shard(weight)
        if shard is not None:  # W a DTensor sharded on its rows: each candidate's score from the process holding it
            samples = same_samples(samples, shard)  # the first process's draw: the noise is drawn once
            h, f, t, b, y, valid = sharded_margin_inputs(
                scorer, hidden, shard, bias, target, *data, inputs.ignore_index, target_logit=True
            )
            s_k = sharded_candidate_scores(h, shard, b, f, samples, scorer.softcap)  # (N, K)
            log_kd = _log_kd(self.noise_probs, num_samples, h)  # (C,)
            hit = samples[None, :] == y[:, None] if self.remove_accidental_hits else None
            per_row = _sampled_per_row(
                sampler, criterion, soft_cap(t, scorer.softcap), s_k, log_kd[y], log_kd[samples], hit, num_samples,
                num_classes,
            )  # fmt: skip
            return reduce_rows(per_row, valid, target.shape, *counting[:1], counting[1], keep=valid).to(out_dtype)
        # W in its dtype (a half model: no float32 copy of W; the K candidate rows gathered), the rows in float32
        h_all, w, b, y_all, valid = linear_inputs(
            hidden, weight, bias, target, inputs.ignore_index, inputs.reduction, keep_dtype=True
        )
        gemm = gemm_dtype(h_all, w)  # the candidates' product: the autocast or half dtype, else float32 / float64
        h_all = h_all.to(compute_dtype(h_all, w))
        h, y, keep = counted_rows(h_all, y_all, valid)  # compacted on a CPU; every row (keep) on an accelerator
        h2, f, t, b = scorer.scaled_inputs(h, w, b, y, *data, keep)  # (N, H), (C,), (N,), (C,)
        log_kd = _log_kd(self.noise_probs, num_samples, h)  # (C,)
        s_k = _candidate_scores(h2, w, b, f, samples, scorer.softcap, gemm)  # (N, K)
        hit = samples[None, :] == y[:, None] if self.remove_accidental_hits else None  # (N, K) accidental hits
        per_row = _sampled_per_row(
            sampler, criterion, t, s_k, log_kd[y], log_kd[samples], hit, num_samples, num_classes
        )
        return reduce_rows(per_row, valid, target.shape, *counting, keep).to(out_dtype)


def self_normalization(log_scores: torch.Tensor) -> tuple[float, float]:
    """Mean and std over rows of log Σ_c p̃(c|x) for log-scores (*, C) (0 when self-normalised)."""
    log_z = torch.logsumexp(log_scores.reshape(-1, log_scores.shape[-1]).float(), dim=-1)
    return float(log_z.mean()), float(log_z.std()) if log_z.numel() > 1 else 0.0
