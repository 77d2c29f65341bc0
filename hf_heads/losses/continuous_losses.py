"""The continuous family's losses as components (`register("continuous_loss")`): one small class each, chosen by the
head's `loss` option, and the way to add one of your own (hf_heads.components).

A loss maps the kept positions of a batch (`ContinuousBatch`) to one loss per position (n,) in `row_losses`; its
`reference` is the naive computation from the definition, which the contract suite holds `row_losses` to. The equations
are those of hf_heads.losses.continuous (Kumar & Tsvetkov 2019 eq. 3 for vMF; Bhat et al. 2019 eq. 1 for the margin
losses; the two cross-entropies over scaled cosines are not in the papers). A loss's parameters are its dataclass
fields: a config writes `{"type": "vmf", "lambda1": 0.1}`, a flag `--loss vmf:lambda1=0.1`.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import ClassVar

import torch
import torch.nn.functional as F

from hf_heads.components import Component, component_base, register
from hf_heads.losses.continuous import VMF_FORMS, cosine_softmax_loss, in_batch_softmax_loss, syn_margin_loss, vmf_nll
from hf_heads.validation import OptionError, check_choice, check_number


@dataclass(frozen=True)
class ContinuousBatch:
    """What a continuous loss sees: the kept positions of one batch (the loss's parameters are its own fields)."""

    pred: torch.Tensor  # (n, d) û, any norm
    ids: torch.Tensor  # (n,) target word ids
    table: torch.Tensor  # (V, d) E, unit rows, frozen
    scale: float | torch.Tensor = 10.0  # s of the scaled cosines (a 0-dim tensor when learned)
    candidates: torch.Tensor | None = None  # (V,) bool output vocabulary, None: every row


@component_base("continuous_loss")
@dataclass(frozen=True)
class ContinuousLoss(Component, ABC):
    """Base of the continuous losses. `title`: the loss's name in cards and logs; `cosine_scores`: decoding by s·cos(û,
    E_c) (else by û·E_c); `learns_scale`: `learn_logit_scale` may learn s; `exact_gradient`: False where a term depends
    on û without a gradient (a detached synthetic negative), so a numerical gradient differs."""

    title: ClassVar[str] = ""
    cosine_scores: ClassVar[bool] = True
    learns_scale: ClassVar[bool] = False
    exact_gradient: ClassVar[bool] = True
    variants: ClassVar[tuple[dict, ...]] = ()  # more parameter sets the contract suite runs (besides `example`)

    @abstractmethod
    def row_losses(self, batch: ContinuousBatch) -> torch.Tensor:
        """(n,) the loss of each position."""

    @abstractmethod
    def reference(self, batch: ContinuousBatch) -> torch.Tensor:
        """(n,) the same losses computed naively from the definition (the contract suite's reference)."""


def _naive_unit(x: torch.Tensor) -> torch.Tensor:
    """x / ‖x‖ (the references only)."""
    return x / x.norm(dim=-1, keepdim=True)


def _naive_log_bessel_iv(v: float, x: torch.Tensor, terms: int = 4000) -> torch.Tensor:
    """log I_v(x) from its power series Σ_k (x/2)^(2k+v) / (k! Γ(k+v+1)) in float64 (the reference only)."""
    k = torch.arange(terms, dtype=torch.float64)
    x = x.to(torch.float64)[..., None]
    return torch.logsumexp((2 * k + v) * torch.log(x / 2) - torch.lgamma(k + 1) - torch.lgamma(k + v + 1), dim=-1)


def _naive_vmf(batch: ContinuousBatch, released: bool, lambda1: float, lambda2: float) -> torch.Tensor:
    d = batch.pred.shape[-1]
    kappa = batch.pred.norm(dim=-1).clamp_min(1e-4)  # (n,) as vmf_nll clamps it
    log_c = (d / 2 - 1) * torch.log(kappa) - (d / 2) * math.log(2 * math.pi) - _naive_log_bessel_iv(d / 2 - 1, kappa)
    target = batch.table[batch.ids]  # (n, d)
    if released:
        return -log_c + torch.log(1 + kappa) * (0.2 - (batch.pred * target).sum(-1) / kappa)
    return -log_c - lambda2 * (batch.pred * target).sum(-1) + lambda1 * kappa


@register("continuous_loss")
@dataclass(frozen=True)
class VMF(ContinuousLoss):
    """The vMF NLL of the target embedding (Kumar & Tsvetkov eq. 3): −log C_m(‖û‖) − λ2 ûᵀu + λ1 ‖û‖, or with `form`
    "released" the authors' code (`_nllvmf`: −log C_m(κ) + log(1 + κ)(0.2 − cos(û, u))); decoding by û·E_c."""

    name: ClassVar[str] = "vmf"
    title: ClassVar[str] = "vMF NLL of the target embedding"
    cosine_scores: ClassVar[bool] = False
    example: ClassVar[dict] = {"lambda1": 0.1, "lambda2": 0.5}
    variants: ClassVar[tuple[dict, ...]] = ({"form": "released"},)

    lambda1: float = 0.0  # + λ1 ‖û‖
    lambda2: float = 1.0  # − λ2 ûᵀu (1: the plain NLL)
    form: str = "nll"  # "nll" (eq. 3 with λ1, λ2) or "released"

    def check(self) -> None:
        check_number("lambda1", self.lambda1, minimum=0)
        check_number("lambda2", self.lambda2, exclusive_minimum=0)
        check_choice("form", self.form, VMF_FORMS)
        if self.form == "released" and (self.lambda1 != 0 or self.lambda2 != 1):
            raise OptionError("form", self.form, "has no λ1 / λ2 terms: leave lambda1=0 and lambda2=1")

    def row_losses(self, batch: ContinuousBatch) -> torch.Tensor:
        target = batch.table[batch.ids]  # (n, d)
        return vmf_nll(
            batch.pred, target, lambda1=self.lambda1, lambda2=self.lambda2, form=self.form, reduction="none"
        )

    def reference(self, batch: ContinuousBatch) -> torch.Tensor:
        return _naive_vmf(batch, self.form == "released", self.lambda1, self.lambda2)


@dataclass(frozen=True)
class _MarginLoss(ContinuousLoss):
    """max(0, λ + u'ᵀû − uᵀû) on unit vectors (Bhat et al. eq. 1), λ = `margin`; the subclass chooses u'."""

    negative: ClassVar[str] = ""
    example: ClassVar[dict] = {"margin": 0.3}

    margin: float = 0.5  # λ

    def check(self) -> None:
        check_number("margin", self.margin, minimum=0)

    def _num_negatives(self) -> int:
        return 1

    def row_losses(self, batch: ContinuousBatch) -> torch.Tensor:
        return syn_margin_loss(
            batch.pred,
            batch.table[batch.ids],
            negative=self.negative,
            margin=self.margin,
            embeddings=batch.table,
            target_ids=batch.ids,
            num_negatives=self._num_negatives(),
            reduction="none",
        )

    def reference(self, batch: ContinuousBatch) -> torch.Tensor:
        u_hat, u = _naive_unit(batch.pred), batch.table[batch.ids]  # (n, d)
        positive = (u_hat * u).sum(-1)
        draws = self.draws(batch)
        out = []
        for i in range(u_hat.shape[0]):  # one position at a time, from the definition
            negatives = self.negatives(u_hat[i].detach(), u[i], batch, i, draws)  # (k, d), no gradient
            out.append(torch.stack([F.relu(self.margin + n @ u_hat[i] - positive[i]) for n in negatives]).mean())
        return torch.stack(out)

    def draws(self, batch: ContinuousBatch) -> torch.Tensor | None:
        """The random rows the reference's negatives come from (None: no draw)."""
        return None

    def negatives(self, u_hat, u, batch: ContinuousBatch, i: int, draws) -> torch.Tensor:
        """(k, d) the negatives of position i (the reference's)."""
        raise NotImplementedError


@register("continuous_loss")
@dataclass(frozen=True)
class SynMarginProjection(_MarginLoss):
    """SMP (§3.2): u' the unit vector along û − (ûᵀu)u, the part of û orthogonal to the target."""

    name: ClassVar[str] = "syn-margin-projection"
    title: ClassVar[str] = "syn-margin-projection margin loss"
    negative: ClassVar[str] = "projection"

    def negatives(self, u_hat, u, batch, i, draws):
        return _naive_unit(u_hat - (u_hat @ u) * u)[None]


@register("continuous_loss")
@dataclass(frozen=True)
class SynMarginDifference(_MarginLoss):
    """SMD (§3.2): u' the unit vector along û − u."""

    name: ClassVar[str] = "syn-margin-difference"
    title: ClassVar[str] = "syn-margin-difference margin loss"
    negative: ClassVar[str] = "difference"
    exact_gradient: ClassVar[bool] = False  # u' moves with û but is detached (d u'/d û ⟂̸ û, unlike SMP's)

    def negatives(self, u_hat, u, batch, i, draws):
        return _naive_unit(u_hat - u)[None]


@register("continuous_loss")
@dataclass(frozen=True)
class MarginRandom(_MarginLoss):
    """`num_negatives` rows of the table drawn uniformly per position, the hinge averaged over them. The reference
    draws the same rows only when it runs from the same random state as `row_losses` (the contract suite seeds
    both)."""

    name: ClassVar[str] = "margin-random"
    title: ClassVar[str] = "margin-random margin loss"
    negative: ClassVar[str] = "random"
    example: ClassVar[dict] = {"margin": 0.3, "num_negatives": 3}

    num_negatives: int = 5  # rows drawn per position

    def check(self) -> None:
        super().check()
        check_number("num_negatives", self.num_negatives, minimum=1, integer=True)

    def _num_negatives(self) -> int:
        return self.num_negatives

    def draws(self, batch: ContinuousBatch) -> torch.Tensor:
        return torch.randint(0, batch.table.shape[0], (batch.pred.shape[0], self.num_negatives))  # (n, k)

    def negatives(self, u_hat, u, batch, i, draws):
        return batch.table[draws[i]]


@register("continuous_loss")
@dataclass(frozen=True)
class MarginMostInformative(_MarginLoss):
    """Lazaridou et al. 2015: u' the table row nearest to û − u in cosine, the target's own row excluded."""

    name: ClassVar[str] = "margin-most-informative"
    title: ClassVar[str] = "margin-most-informative margin loss"
    negative: ClassVar[str] = "most-informative"

    def negatives(self, u_hat, u, batch, i, draws):
        direction = _naive_unit(u_hat - u)
        others = [c for c in range(batch.table.shape[0]) if c != int(batch.ids[i])]  # the target's own row excluded
        return batch.table[max(others, key=lambda c: float(direction @ batch.table[c]))][None]  # first of a tie


def _naive_cross_entropy(logits: list[torch.Tensor], target: int) -> torch.Tensor:
    return -(logits[target] - torch.logsumexp(torch.stack(logits), 0))


@register("continuous_loss")
@dataclass(frozen=True)
class CosineSoftmax(ContinuousLoss):
    """Cross-entropy over s·cos(û, E_c) to every row of the output vocabulary (the target always among them)."""

    name: ClassVar[str] = "cosine-softmax"
    title: ClassVar[str] = "cross-entropy over s·cos(û, E) to every word"
    learns_scale: ClassVar[bool] = True

    def row_losses(self, batch: ContinuousBatch) -> torch.Tensor:
        return cosine_softmax_loss(
            batch.pred, batch.ids, batch.table, scale=batch.scale, candidates=batch.candidates, reduction="none"
        )

    def reference(self, batch: ContinuousBatch) -> torch.Tensor:
        out = []
        for i, y in enumerate(batch.ids.tolist()):
            classes = [
                c for c in range(batch.table.shape[0]) if batch.candidates is None or batch.candidates[c] or c == y
            ]
            logits = [batch.scale * (_naive_unit(batch.pred[i]) @ batch.table[c]) for c in classes]
            out.append(_naive_cross_entropy(logits, classes.index(y)))
        return torch.stack(out)


@register("continuous_loss")
@dataclass(frozen=True)
class InBatchSoftmax(ContinuousLoss):
    """Cross-entropy over s·cos(û, E_c) to the batch's distinct targets, plus `num_sampled` uniform draws (+
    log(M/K))."""

    name: ClassVar[str] = "in-batch-softmax"
    title: ClassVar[str] = "cross-entropy over s·cos(û, E) to the batch's target words"
    learns_scale: ClassVar[bool] = True
    example: ClassVar[dict] = {"num_sampled": 4}

    num_sampled: int = 0  # K extra negatives drawn per batch

    def check(self) -> None:
        check_number("num_sampled", self.num_sampled, minimum=0, integer=True)

    def _pool(self, batch: ContinuousBatch) -> torch.Tensor | None:
        if not self.num_sampled:
            return None
        if batch.candidates is not None:
            return batch.candidates.nonzero().squeeze(1)
        return torch.arange(batch.table.shape[0], device=batch.table.device)

    def row_losses(self, batch: ContinuousBatch) -> torch.Tensor:
        return in_batch_softmax_loss(
            batch.pred,
            batch.ids,
            batch.table,
            scale=batch.scale,
            num_sampled=self.num_sampled,
            sample_pool=self._pool(batch),
            reduction="none",
        )

    def reference(self, batch: ContinuousBatch) -> torch.Tensor:
        words = sorted(set(batch.ids.tolist()))
        extra: list[int] = []
        vocab = range(batch.table.shape[0])
        pool = [c for c in vocab if batch.candidates is None or batch.candidates[c]]  # the output vocabulary
        if self.num_sampled:  # drawn as `row_losses` draws them (the contract suite seeds both alike)
            extra = [pool[j] for j in torch.randint(0, len(pool), (self.num_sampled,)).tolist()]
        out = []
        for i, y in enumerate(batch.ids.tolist()):
            u_hat = _naive_unit(batch.pred[i])
            logits = [batch.scale * (u_hat @ batch.table[c]) for c in words]
            logits += [
                batch.scale * (u_hat @ batch.table[c]) + math.log(len(pool) / self.num_sampled)
                for c in extra
                if c not in words  # an accidental hit is dropped
            ]
            out.append(_naive_cross_entropy(logits, words.index(y)))
        return torch.stack(out)
