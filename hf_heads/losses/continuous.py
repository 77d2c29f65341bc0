"""Continuous-output losses: the model predicts an embedding û (N, d) of the target word, whose pretrained,
L2-normalised embedding is u (N, d).

Papers: Bhat, Kumar & Tsvetkov, *A Margin-based Loss with Synthetic Negative Samples for Continuous-output Machine
Translation* (2019), and Kumar & Tsvetkov, *Von Mises-Fisher Loss for Training Sequence to Sequence Models with
Continuous Outputs* (ICLR 2019).

- vMF NLL (Bhat et al. §2; Kumar & Tsvetkov eq. 3): −log p(u; û) = −log C_m(‖û‖) − ûᵀu with log C_m(κ) = (m/2−1) log κ
  − (m/2) log 2π − log I_{m/2−1}(κ); `lambda1` / `lambda2` the regularised forms, `form="released"` the authors' code
  (Sachin19/seq2seq-con `_nllvmf`).
- Margin loss (Bhat et al. eq. 1): max(0, λ + u'ᵀû − uᵀû) on unit vectors, the negative u' `random`, `most-informative`
  (Lazaridou et al. 2015), `projection` (SMP, §3.2) or `difference` (SMD), detached as the paper says.

Not in the papers: cross-entropies over scaled cosines s·cos(û, E_c), which also push û away from the other words (the
losses above only pull it toward its target, so an unsure û lands near a frequent word): `cosine_softmax_loss`
(NormFace / CosFace with m = 0) and `in_batch_softmax_loss` (in-batch negatives, with Jean et al.'s correction).

`log_cmk` is computed in float64 with no SciPy: log I_v(κ) from the uniform (Debye) expansion at an order ≥ 30, brought
down by the stable backward recurrence of r_ν = I_{ν+1}/I_ν; its derivative is −r_v. Relative error < 1e-9 against
mpmath for κ in [1e-4, 1e5] and d in [2, 1024] (tested).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from hf_heads.losses.precision import autocast_off, compute_dtype
from hf_heads.losses.reduction import check_labels, check_reduction, reduce_rows, valid_rows
from hf_heads.validation import check_choice, check_number

NEGATIVES = ("projection", "difference", "random", "most-informative")
VMF_FORMS = ("nll", "released")
_DEBYE_MIN_ORDER = 30.0


def _debye_log_iv(v: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """log I_v(x) by the uniform asymptotic expansion (Abramowitz & Stegun 9.7.7, terms u1..u4), float64;
    accurate to ~1e-10 relative for v >= 30."""
    z = x / v
    s = torch.sqrt(1.0 + z * z)
    t = 1.0 / s
    eta = s + torch.log(z / (1.0 + s))
    t2 = t * t
    u1 = t * (3.0 - 5.0 * t2) / 24.0
    u2 = t2 * (81.0 - 462.0 * t2 + 385.0 * t2 * t2) / 1152.0
    u3 = t * t2 * (30375.0 - 369603.0 * t2 + 765765.0 * t2**2 - 425425.0 * t2**3) / 414720.0
    u4_poly = 4465125.0 - 94121676.0 * t2 + 349922430.0 * t2**2 - 446185740.0 * t2**3 + 185910725.0 * t2**4
    u4 = t2 * t2 * u4_poly / 39813120.0
    series = 1.0 + u1 / v + u2 / v**2 + u3 / v**3 + u4 / v**4
    return -0.5 * torch.log(2.0 * math.pi * v) + v * eta - 0.25 * torch.log1p(z * z) + torch.log(series)


def log_bessel_iv_and_ratio(v: float, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(log I_v(x), I_{v+1}(x) / I_v(x)) for order v >= 0 and x > 0, computed in float64."""
    x = x.double()
    n = max(0, math.ceil(_DEBYE_MIN_ORDER - v))
    top = torch.full_like(x, v + n)
    log_top = _debye_log_iv(top, x)
    ratio = torch.exp(_debye_log_iv(top + 1.0, x) - log_top)  # r_{v+n}
    log_iv = log_top
    for j in range(n, 0, -1):  # r_{ν-1} = 1 / (2ν/x + r_ν), from I_{ν-1} = I_{ν+1} + (2ν/x) I_ν
        ratio = 1.0 / (2.0 * (v + j) / x + ratio)
        log_iv = log_iv - torch.log(ratio)  # log I_{v+j-1} = log I_{v+j} - log r_{v+j-1}
    return log_iv, ratio


class _LogCmk(torch.autograd.Function):
    @staticmethod
    def forward(ctx, kappa: torch.Tensor, dim: int) -> torch.Tensor:
        v = dim / 2.0 - 1.0
        log_iv, ratio = log_bessel_iv_and_ratio(v, kappa)
        k = kappa.double()
        out = v * torch.log(k) - (dim / 2.0) * math.log(2.0 * math.pi) - log_iv
        ctx.save_for_backward(ratio)
        return out.to(kappa.dtype)

    @staticmethod
    def backward(ctx, grad):
        (ratio,) = ctx.saved_tensors
        return -grad * ratio.to(grad.dtype), None  # d log C_m / dκ = −I_{m/2}(κ) / I_{m/2−1}(κ)


def log_cmk(kappa: torch.Tensor, dim: int) -> torch.Tensor:
    """log C_m(κ) of the von Mises-Fisher density on the (m−1)-sphere in R^m, m = `dim` (Bhat et al. §2):
    C_m(κ) = κ^{m/2−1} / ((2π)^{m/2} I_{m/2−1}(κ)). `kappa` > 0, any shape; returned in its dtype."""
    check_number("dim", dim, minimum=2, integer=True)
    if bool((kappa <= 0).any()) or not bool(torch.isfinite(kappa).all()):
        raise ValueError("kappa must be finite and > 0 (the norm of the predicted embedding)")
    return _LogCmk.apply(kappa, dim)


def _reduce(loss: torch.Tensor, reduction: str, num_items_in_batch) -> torch.Tensor:
    """Every position is a row (the heads drop the ignored ones before calling)."""
    return reduce_rows(loss.reshape(-1), None, loss.shape, reduction, num_items_in_batch)


def _check_pair(pred: torch.Tensor, target_emb: torch.Tensor) -> None:
    if pred.shape != target_emb.shape:
        raise ValueError(f"pred has shape {tuple(pred.shape)} but target_emb has {tuple(target_emb.shape)}")


@autocast_off
def vmf_nll(
    pred: torch.Tensor,
    target_emb: torch.Tensor,
    *,
    lambda1: float = 0.0,
    lambda2: float = 1.0,
    form: str = "nll",
    reduction: str = "mean",
    min_kappa: float = 1e-4,
    num_items_in_batch: int | torch.Tensor | None = None,
) -> torch.Tensor:
    """−log C_m(‖û‖) − λ2 ûᵀu + λ1 ‖û‖ for predictions û (*, d) and unit targets u (*, d) (`form="nll"`), or the
    authors' −log C_m(κ) + log(1 + κ)·(0.2 − cos(û, u)) (`form="released"`, λ1 = 0, λ2 = 1). ‖û‖ is clamped at
    `min_kappa` (undefined at κ = 0). Float32 (float64 stays); "mean" divides by `num_items_in_batch` when given."""
    _check_pair(pred, target_emb)
    check_number("lambda1", lambda1, minimum=0)
    check_number("lambda2", lambda2, minimum=0)
    check_choice("form", form, VMF_FORMS)
    if form == "released" and (lambda1 != 0 or lambda2 != 1):
        raise ValueError(
            f"form='released' has no λ1 / λ2 terms: lambda1={lambda1!r}, lambda2={lambda2!r} must be 0, 1"
        )
    check_reduction(reduction)
    compute = compute_dtype(pred)
    pred, target_emb = pred.to(compute), target_emb.to(compute)
    kappa = pred.norm(dim=-1).clamp_min(min_kappa)  # (*,)
    if form == "released":
        cos = (pred * target_emb).sum(-1) / kappa  # (*,)
        loss = -log_cmk(kappa, pred.shape[-1]) + torch.log1p(kappa) * (0.2 - cos)
    else:
        loss = -log_cmk(kappa, pred.shape[-1]) - lambda2 * (pred * target_emb).sum(-1) + lambda1 * kappa
    return _reduce(loss, reduction, num_items_in_batch)


@autocast_off
def syn_margin_loss(
    pred: torch.Tensor,
    target_emb: torch.Tensor,
    *,
    negative: str = "projection",
    margin: float = 0.5,
    embeddings: torch.Tensor | None = None,
    target_ids: torch.Tensor | None = None,
    num_negatives: int = 5,
    generator: torch.Generator | None = None,
    reduction: str = "mean",
    num_items_in_batch: int | torch.Tensor | None = None,
) -> torch.Tensor:
    """max(0, λ + u'ᵀû − uᵀû) (Bhat et al. eq. 1) on unit vectors; û (*, d) is normalised here. `negative`:
    `projection` (SMP: along û − (ûᵀu)u), `difference` (SMD: along û − u), `random` (`num_negatives` uniform rows of
    `embeddings`, averaged) or `most-informative` (the row nearest to û − u, the target's own excluded: needs
    `target_ids`). `embeddings`: (V, d) unit rows. "mean" divides the sum by `num_items_in_batch` when given."""
    _check_pair(pred, target_emb)
    check_choice("negative", negative, NEGATIVES)
    check_number("margin", margin, minimum=0)
    check_reduction(reduction)
    compute = compute_dtype(pred)
    u_hat = F.normalize(pred.to(compute), dim=-1)  # (*, d)
    u = target_emb.to(compute)
    positive = (u_hat * u).sum(-1)  # (*,)
    if negative in ("projection", "difference"):
        with torch.no_grad():
            direction = u_hat - positive[..., None] * u if negative == "projection" else u_hat - u
            neg = F.normalize(direction, dim=-1)  # (*, d); zero where û = u (no orthogonal part)
        loss = F.relu(margin + (neg * u_hat).sum(-1) - positive)
        return _reduce(loss, reduction, num_items_in_batch)
    if embeddings is None:
        raise ValueError(f"negative={negative!r} needs embeddings=(V, d) table")
    table = embeddings.to(compute)
    if negative == "random":
        check_number("num_negatives", num_negatives, minimum=1, integer=True)
        draws = (*u_hat.shape[:-1], num_negatives)
        idx = torch.randint(0, table.shape[0], draws, device=table.device, generator=generator)  # (*, k)
        neg_sim = torch.einsum("...kd,...d->...k", table[idx], u_hat)  # (*, k)
        loss = F.relu(margin + neg_sim - positive[..., None]).mean(-1)
        return _reduce(loss, reduction, num_items_in_batch)
    if target_ids is None:
        raise ValueError("negative='most-informative' needs target_ids (to exclude the target's own row)")
    with torch.no_grad():
        scores = (u_hat - u) @ table.T  # (*, V): nearest to û − u in cosine, the table being unit-norm
        scores.scatter_(-1, target_ids[..., None].long(), float("-inf"))
        neg = table[scores.argmax(-1)]  # (*, d)
    loss = F.relu(margin + (neg * u_hat).sum(-1) - positive)
    return _reduce(loss, reduction, num_items_in_batch)


def _scale_value(scale: float | torch.Tensor) -> float | torch.Tensor:
    if isinstance(scale, torch.Tensor):
        if scale.dim() != 0:  # its value is not checked: that would synchronise with the device every step
            raise ValueError(f"scale must be a float or a 0-dim tensor, got shape {tuple(scale.shape)}")
        return scale
    check_number("scale", scale, exclusive_minimum=0)
    return scale


def _target_rows(pred: torch.Tensor, target: torch.Tensor, embeddings: torch.Tensor, ignore_index: int):
    """(û (n, d) unit rows of the valid positions in the compute dtype, y (n,), valid (N,), table (V, d))."""
    if pred.shape[:-1] != target.shape:
        raise ValueError(
            f"pred has shape {tuple(pred.shape)} but target has {tuple(target.shape)} (expected (*, d), (*))"
        )
    if embeddings.dim() != 2 or embeddings.shape[1] != pred.shape[-1]:
        raise ValueError(f"embeddings has shape {tuple(embeddings.shape)}, expected (V, {pred.shape[-1]})")
    h, y, valid = valid_rows(pred, target, ignore_index)
    check_labels(y, embeddings.shape[0], ignore_index)
    compute = compute_dtype(pred, embeddings)
    return F.normalize(h[valid].to(compute), dim=-1), y[valid], valid, embeddings.to(compute)


@autocast_off
def cosine_softmax_loss(
    pred: torch.Tensor,
    target: torch.Tensor,
    embeddings: torch.Tensor,
    *,
    scale: float | torch.Tensor = 20.0,
    candidates: torch.Tensor | None = None,
    ignore_index: int = -100,
    reduction: str = "mean",
    num_items_in_batch: int | torch.Tensor | None = None,
) -> torch.Tensor:
    """Cross-entropy over scaled cosines to the whole table (NormFace / CosFace with m = 0, the class vectors frozen):

        loss_i = −log [ exp(s·cos(û_i, E_{y_i})) / Σ_{c ∈ C ∪ {y_i}} exp(s·cos(û_i, E_c)) ]

    for pred û (*, d), target ids (*) (`ignore_index` rows count nothing), embeddings E (V, d) with unit rows, scale s
    = 1/τ > 0 (a float or a learned 0-dim tensor) and `candidates` (V,) bool, the output vocabulary C (default: every
    row). `reduction` as `F.cross_entropy`, "mean" over `num_items_in_batch` when given. The (n, V) scores are computed
    at once (no chunking)."""
    check_reduction(reduction)
    scale = _scale_value(scale)
    u_hat, y, valid, table = _target_rows(pred, target, embeddings, ignore_index)
    logits = scale * (u_hat @ table.T)  # (n, V)
    if candidates is not None:
        if candidates.shape != (table.shape[0],) or candidates.dtype != torch.bool:
            raise ValueError(f"candidates must be a ({table.shape[0]},) bool mask, got {tuple(candidates.shape)}")
        outside = ~candidates.to(logits.device)[None, :].expand_as(logits).clone()  # (n, V)
        outside[torch.arange(y.shape[0], device=y.device), y] = False  # the target is always a candidate
        logits = logits.masked_fill(outside, float("-inf"))
    rows = F.cross_entropy(logits, y, reduction="none") + 0.0 * u_hat.sum()  # (n,)
    return reduce_rows(rows, valid, target.shape, reduction, num_items_in_batch)


@autocast_off
def in_batch_softmax_loss(
    pred: torch.Tensor,
    target: torch.Tensor,
    embeddings: torch.Tensor,
    *,
    scale: float | torch.Tensor = 20.0,
    num_sampled: int = 0,
    sample_pool: torch.Tensor | None = None,
    generator: torch.Generator | None = None,
    ignore_index: int = -100,
    reduction: str = "mean",
    num_items_in_batch: int | torch.Tensor | None = None,
) -> torch.Tensor:
    """Cross-entropy over scaled cosines to the batch's distinct target words (in-batch negatives):

        C = unique(y) (U words), S = K words drawn i.i.d. uniformly from `sample_pool` (M ids), minus those in C
        z_ic = s·cos(û_i, E_c) for c ∈ C,   z_ij = s·cos(û_i, E_{S_j}) − log(K·D(S_j)) = s·cos(û_i, E_{S_j}) + log(M/K)
        loss_i = −z_{i y_i} + log Σ_{c ∈ C} exp(z_ic) + log Σ_j exp(z_ij)   (one log-sum-exp over C ∪ S)

    Arguments as `cosine_softmax_loss`; `num_sampled`: K >= 0 shared negatives drawn once per call with `generator`
    from `sample_pool` (M,). Cost n·(U + K)·d, independent of V; the loss depends on the batch's candidates, so it is
    not comparable across batch sizes."""
    check_reduction(reduction)
    scale = _scale_value(scale)
    check_number("num_sampled", num_sampled, minimum=0, integer=True)
    u_hat, y, valid, table = _target_rows(pred, target, embeddings, ignore_index)
    cand, index = torch.unique(y, return_inverse=True)  # (U,), (n,): row i's target is cand[index[i]]
    logits = scale * (u_hat @ table[cand].T)  # (n, U)
    if num_sampled:
        if sample_pool is None or sample_pool.dim() != 1 or sample_pool.numel() == 0:
            raise ValueError("num_sampled > 0 needs sample_pool, the (M,) ids of the output vocabulary to draw from")
        pool = sample_pool.to(cand.device)
        device = pool.device if generator is None else generator.device
        picks = torch.randint(0, pool.numel(), (num_sampled,), generator=generator, device=device)
        draws = pool[picks.to(pool.device)]  # (K,) with replacement
        correction = math.log(pool.numel() / num_sampled)  # −log(K·D(c)), D uniform over the pool
        sampled = scale * (u_hat @ table[draws].T) + correction  # (n, K)
        sampled = sampled.masked_fill(torch.isin(draws, cand)[None, :], float("-inf"))  # accidental hits
        logits = torch.cat([logits, sampled], dim=1)  # (n, U + K)
    rows = F.cross_entropy(logits, index, reduction="none") + 0.0 * u_hat.sum()  # (n,)
    return reduce_rows(rows, valid, target.shape, reduction, num_items_in_batch)


class CosineSoftmaxLoss(nn.Module):
    """`cosine_softmax_loss` as a module (`scale`, `ignore_index`, `reduction` fixed at construction)."""

    def __init__(self, scale: float = 20.0, ignore_index: int = -100, reduction: str = "mean") -> None:
        super().__init__()
        _scale_value(scale)
        check_reduction(reduction)
        self.scale, self.ignore_index, self.reduction = scale, ignore_index, reduction

    def forward(self, pred, target, embeddings, candidates=None, num_items_in_batch=None):
        return cosine_softmax_loss(
            pred, target, embeddings, scale=self.scale, candidates=candidates, ignore_index=self.ignore_index,
            reduction=self.reduction, num_items_in_batch=num_items_in_batch,
        )  # fmt: skip


class InBatchSoftmaxLoss(nn.Module):
    """`in_batch_softmax_loss` as a module (`scale`, `num_sampled`, `ignore_index`, `reduction` fixed)."""

    def __init__(
        self, scale: float = 20.0, num_sampled: int = 0, ignore_index: int = -100, reduction: str = "mean"
    ) -> None:
        super().__init__()
        _scale_value(scale)
        check_number("num_sampled", num_sampled, minimum=0, integer=True)
        check_reduction(reduction)
        self.scale, self.num_sampled, self.ignore_index, self.reduction = scale, num_sampled, ignore_index, reduction

    def forward(self, pred, target, embeddings, sample_pool=None, generator=None, num_items_in_batch=None):
        return in_batch_softmax_loss(
            pred, target, embeddings, scale=self.scale, num_sampled=self.num_sampled, sample_pool=sample_pool,
            generator=generator, ignore_index=self.ignore_index, reduction=self.reduction,
            num_items_in_batch=num_items_in_batch,
        )  # fmt: skip


@torch.no_grad()
def nearest_neighbour_diagnostics(
    pred: torch.Tensor, target_ids: torch.Tensor, embeddings: torch.Tensor, ks: tuple[int, ...] = (1, 2, 5, 10)
) -> dict[str, float]:
    """Bhat et al. table 2 for predictions (N, d) against the unit-norm table (V, d): accuracy@k of the
    cosine nearest neighbours, and the mean cosine similarity to the nearest neighbour (correct / wrong
    predictions) and to the target (wrong predictions)."""
    u_hat = F.normalize(pred.float(), dim=-1)
    sims = u_hat @ embeddings.float().T  # (N, V)
    top = sims.topk(max(ks), dim=-1)
    hit = top.indices == target_ids[:, None]  # (N, kmax)
    out = {f"accuracy@{k}": hit[:, :k].any(-1).float().mean().item() for k in ks}
    correct = hit[:, 0]
    nn_sim = top.values[:, 0]
    target_sim = sims.gather(1, target_ids[:, None].long()).squeeze(1)
    nan = float("nan")
    out["correct_similarity_to_nearest"] = nn_sim[correct].mean().item() if correct.any() else nan
    out["wrong_similarity_to_nearest"] = nn_sim[~correct].mean().item() if (~correct).any() else nan
    out["wrong_similarity_to_target"] = target_sim[~correct].mean().item() if (~correct).any() else nan
    return out
