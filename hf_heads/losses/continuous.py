"""Continuous-output losses: the model predicts an embedding û (N, d) of the target word, whose pretrained,
L2-normalised embedding is u (N, d).

Papers: Bhat, Kumar & Tsvetkov, *A Margin-based Loss with Synthetic Negative Samples for Continuous-output
Machine Translation* (2019), and the vMF loss of Kumar & Tsvetkov, *Von Mises-Fisher Loss for Training
Sequence to Sequence Models with Continuous Outputs* (ICLR 2019), which it builds on.

- vMF NLL (Bhat et al. §2; Kumar & Tsvetkov eq. 3): −log p(u; û) = −log C_m(‖û‖) − ûᵀu with
  log C_m(κ) = (m/2−1) log κ − (m/2) log 2π − log I_{m/2−1}(κ). Kumar & Tsvetkov's two regularised forms
  are options: `lambda1` adds λ1‖û‖ (their NLLvMF_reg1) and `lambda2` scales the cosine term, −λ2 ûᵀu
  (NLLvMF_reg2); λ1 = 0, λ2 = 1 is the plain NLL.
- Margin loss (Bhat et al. eq. 1): max(0, λ + u'ᵀû − uᵀû) on unit vectors, with the negative u' chosen
  `random` (k uniform draws from the table, loss averaged over them), `most-informative` (Lazaridou et
  al. 2015: the table row nearest to û − u, the target's own row excluded), `projection` (SMP, §3.2: the
  unit vector along û − (ûᵀu)u) or `difference` (SMD: the unit vector along û − u). Synthetic negatives
  are detached, as the paper says.

`log_cmk` is computed in float64 with no SciPy: log I_v(κ) from the uniform (Debye) asymptotic expansion
at an order v + n ≥ 30, brought down to v by the stable backward recurrence of the ratios
r_ν = I_{ν+1}/I_ν (r_{ν−1} = 1/(2ν/κ + r_ν)); the backward pass uses d log C_m / dκ = −I_{m/2}(κ)/I_{m/2−1}(κ)
= −r_v. Relative error < 1e-9 against mpmath for κ in [1e-4, 1e5] and d in [2, 1024] (tested).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from hf_heads.losses._checks import check_choice, check_number
from hf_heads.losses._rows import autocast_off, check_reduction, compute_dtype, reduce_rows

NEGATIVES = ("projection", "difference", "random", "most-informative")
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
    reduction: str = "mean",
    min_kappa: float = 1e-4,
    num_items_in_batch: int | torch.Tensor | None = None,
) -> torch.Tensor:
    """−log C_m(‖û‖) − λ2 ûᵀu + λ1 ‖û‖ for predictions û (*, d) and unit targets u (*, d).

    ‖û‖ is clamped below at `min_kappa` (the density is undefined at κ = 0). Computed in float32 (float64
    stays float64); `reduction` over all leading positions, "mean" dividing the sum by `num_items_in_batch`
    when given."""
    _check_pair(pred, target_emb)
    check_number("lambda1", lambda1, minimum=0)
    check_number("lambda2", lambda2, minimum=0)
    check_reduction(reduction)
    compute = compute_dtype(pred)
    pred, target_emb = pred.to(compute), target_emb.to(compute)
    kappa = pred.norm(dim=-1).clamp_min(min_kappa)  # (*,)
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
    """max(0, λ + u'ᵀû − uᵀû) (Bhat et al. eq. 1) on unit vectors; û (*, d) is normalised here.

    Args:
        negative: `projection` (SMP), `difference` (SMD), `random` (`num_negatives` uniform rows of
            `embeddings`, averaged) or `most-informative` (row of `embeddings` nearest to û − u; needs
            `target_ids` to exclude the target's own row).
        margin: λ >= 0.
        embeddings: (V, d) unit-norm table, for `random` and `most-informative`.
        reduction: over all leading positions, "mean" dividing the sum by `num_items_in_batch` when given.
    """
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
