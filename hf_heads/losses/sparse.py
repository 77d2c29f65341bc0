"""Sparse-softmax: softmax over the k largest logits only, and its loss.

Paper: Sun, Zhang, et al., "Sparse-softmax: A Simpler and Faster Alternative Softmax Transformation"
(shared/papers/sparse_softmax.md), eqs. 4-5, with Ω_k the k largest logits of the row:

    sparse_softmax(z)_i = exp(z_i) / Σ_{j ∈ Ω_k} exp(z_j)  if z_i ∈ Ω_k, else 0       (eq. 4)
    L_sparse = log Σ_{i ∈ Ω_k} exp(z_i) − z_t                                         (eq. 5)

Choices where the paper is silent (each is tested): k ≥ the number of classes is plain softmax; ties at the k-th value
are broken by `torch.topk` (exactly k kept); a target outside Ω_k still gets eq. 5 (> 0), pushing its logit up and the
top k down; label smoothing ε mixes eq. 5 with the uniform distribution over Ω_k, (1 − ε)·L_sparse + ε·(log Σ_{Ω_k} exp
z − mean_{Ω_k} z). Of an output layer, eq. 5 is the `CrossEntropy(top_k=k)` criterion of `output_loss`.
"""

from __future__ import annotations

import torch
from torch import nn

from hf_heads.losses.precision import autocast_off, compute_dtype, loss_dtype
from hf_heads.losses.reduction import check_labels, check_reduction, reduce_rows
from hf_heads.validation import OptionError, check_number


def check_k(k) -> None:
    check_number("k", k, minimum=1, integer=True)


def sparse_log_softmax(z: torch.Tensor, k: int, dim: int = -1) -> torch.Tensor:
    """log of eq. 4: log-softmax over the top-k entries along `dim`, -inf elsewhere."""
    check_k(k)
    if k >= z.shape[dim]:
        return torch.log_softmax(z, dim=dim)
    vals, idx = torch.topk(z, k, dim=dim)
    out = torch.full_like(z, float("-inf"))
    return out.scatter(dim, idx, torch.log_softmax(vals, dim=dim))


def sparse_softmax(z: torch.Tensor, k: int, dim: int = -1) -> torch.Tensor:
    """Eq. 4: probabilities over the top-k entries along `dim`, exactly 0 elsewhere."""
    return sparse_log_softmax(z, k, dim).exp()


def truncate_to_top_k(z: torch.Tensor, k: int) -> torch.Tensor:
    """Logits (*, C) with every entry outside the row's top-k set to -inf (softmax of it is eq. 4)."""
    check_k(k)
    if k >= z.shape[-1]:
        return z
    vals, idx = torch.topk(z, k, dim=-1)
    return torch.full_like(z, float("-inf")).scatter(-1, idx, vals)


@autocast_off
def sparse_softmax_cross_entropy(
    z: torch.Tensor,
    target: torch.Tensor,
    k: int,
    *,
    reduction: str = "mean",
    ignore_index: int = -100,
    label_smoothing: float = 0.0,
    num_items_in_batch: int | torch.Tensor | None = None,
) -> torch.Tensor:
    """Eq. 5 for logits z (*, C) and targets (*); `reduction`, `ignore_index`, `label_smoothing` as in
    `F.cross_entropy`; `num_items_in_batch` divides the sum. Accumulated in float32 and returned in the dtype
    `F.cross_entropy` would return."""
    check_k(k)
    check_reduction(reduction)
    check_number("label_smoothing", label_smoothing, minimum=0)
    if label_smoothing > 1:
        raise OptionError("label_smoothing", label_smoothing, "must be <= 1")
    logits = z.reshape(-1, z.shape[-1])
    y = target.reshape(-1)
    check_labels(y, logits.shape[1], ignore_index)
    valid = y != ignore_index
    logits, y_v = logits[valid].to(compute_dtype(logits)), y[valid]
    vals = torch.topk(logits, min(k, logits.shape[1]), dim=1).values  # (n, k)
    lse = torch.logsumexp(vals, dim=1)  # (n,)
    loss = lse - logits.gather(1, y_v[:, None]).squeeze(1)
    if label_smoothing:
        loss = (1 - label_smoothing) * loss + label_smoothing * (lse - vals.mean(1))
    return reduce_rows(loss, valid, target.shape, reduction, num_items_in_batch).to(loss_dtype(z))


class SparseSoftmaxCrossEntropy(nn.Module):
    """`nn.Module` form of `sparse_softmax_cross_entropy`."""

    def __init__(self, k: int, *, reduction: str = "mean", ignore_index: int = -100, label_smoothing: float = 0.0):
        super().__init__()
        check_k(k)
        self.k, self.reduction, self.ignore_index, self.label_smoothing = k, reduction, ignore_index, label_smoothing

    def forward(self, z, target, num_items_in_batch=None):
        return sparse_softmax_cross_entropy(
            z,
            target,
            self.k,
            reduction=self.reduction,
            ignore_index=self.ignore_index,
            label_smoothing=self.label_smoothing,
            num_items_in_batch=num_items_in_batch,
        )
