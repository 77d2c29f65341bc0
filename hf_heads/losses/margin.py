"""Large-margin softmax for language models: L-Softmax, ArcFace, CosFace with word- and
context-vector norm scaling.

Paper: Huo, Gao, Wang, Schlüter, Ney, "Investigation of Large-Margin Softmax in Neural Language
Modeling", Interspeech 2020 (shared/papers/large_margin_softmax_lm.md).

The logit of class c at position i is (eq. 13)

    l(c, i) = g(i) · f(c) · φ_c(cos θ_{c,i}) + b_c

with φ_c = cos for every non-target class and, for the target y (eq. 14):
`cos` cos θ − m (CosFace, eq. 5), `arc` cos(θ + m) (ArcFace, eq. 6), `lsm` ψ(θ) = (−1)^k cos(mθ) − 2k
(L-Softmax, eqs. 7–8), `none` cos θ. The word-vector norm f (eq. 9, with v and u of eqs. 11–12)
and the context norm g (eq. 10) are:

    f: no-mod ‖W_y‖ · uniform ‖W_amax‖ · log-rank log(exp‖W_amax‖ − v·rank_y)
       unigram ‖W_amin‖ + u·c_y · log-unigram log c_y
    g: no-mod ‖h_i‖ · max-norm max_j ‖h_j‖ over the batch

`scale=s` is the face-recognition setting of eqs. 5–6 / table 1: both vectors normalised, ‖W‖ = 1,
‖h‖ = s (then f and g must stay `no-mod`).

The scorer (φ, f, g, the warm-start gain and the checkpoint's output transform) is one frozen `Scorer` of
hf_heads.losses.scorer, where each margin type is one registered `Margin` class and where the choices made where
the paper is silent are listed. The losses here take it as `scorer`, or its options as keyword arguments
(`resolve_scorer` turns them into one). The margin is applied only when targets are given (training); inference
logits never carry it.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from hf_heads.losses._rows import autocast_off, check_labels, compute_dtype, linear_rows
from hf_heads.losses._rows import loss_dtype as _loss_dtype
from hf_heads.losses.chunks import ChunkKernel
from hf_heads.losses.fused_linear import (
    FusedOutputs,
    LinearCrossEntropyOutput,
    WeightGradSlot,
    check_no_kernel,
    fused_linear_cross_entropy,
    sharded_loss,
)
from hf_heads.losses.scorer import (
    CONTEXT_NORMS,
    MARGINS,
    NEEDS_COUNTS,
    WORD_NORMS,
    Margin,
    Scorer,
    arc_phi,
    context_norm_values,
    lsm_psi,
    make_margin,
    resolve_scorer,
    validate_margin_options,
    word_norm_values,
)
from hf_heads.losses.transforms import soft_cap
from hf_heads.losses.vocab_parallel import margin_rows, vocab_shard

# The scorer's names are re-exported here, where they lived before hf_heads.losses.scorer.
__all__ = [
    "CONTEXT_NORMS",
    "MARGINS",
    "NEEDS_COUNTS",
    "WORD_NORMS",
    "MarginCrossEntropy",
    "Scorer",
    "arc_phi",
    "context_norm_values",
    "lsm_psi",
    "margin_cross_entropy",
    "margin_logits",
    "target_phi",
    "validate_margin_options",
    "word_norm_values",
]


def target_phi(cos: torch.Tensor, margin: str | dict | Margin, m: float | None = None) -> torch.Tensor:
    """φ(θ_{y,i}) for the target class (eq. 14): the gradient-safe φ (`Margin.safe_phi`) of the margin `margin` (a
    registered name with the flat `m`, `{"type": name, **parameters}`, or a `Margin`)."""
    return make_margin(margin, m).safe_phi(cos)


def _scaled(hidden, weight, a, s):
    return (hidden if a is None else hidden * a[:, None]), (weight if s is None else weight * s[:, None])


# ----------------------------------------------------------------------------- logits


@autocast_off
def margin_logits(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    target: torch.Tensor | None = None,
    *,
    scorer: Scorer | None = None,
    word_counts: torch.Tensor | None = None,
    context_norm_value: float | torch.Tensor | None = None,
    ignore_index: int = -100,
    **scorer_options,
) -> torch.Tensor:
    """All logits l(c, i) of eq. 13, shape (*, V) for hidden (*, H), weight (V, H), bias (V,).

    With `target` (*,) the target class gets φ of eq. 14 (rows equal to `ignore_index` get no margin);
    without it, the logits are the inference logits (no margin). The scorer is `scorer` (a `Scorer`), or the one
    of the keyword `scorer_options` (`Scorer.from_options`: margin, m, scale, word_norm, context_norm, gain,
    logit_multiplier, softcap). `word_counts` (V,) feed f, `context_norm_value`
    replaces max-norm's batch maximum. Materialises (N, V): use `margin_cross_entropy` for training. Computed in
    float32 (float64 for float64 inputs, also under autocast) and returned in the dtype `hidden @ weight.T` would
    have outside autocast.
    """
    scorer = resolve_scorer(scorer, **scorer_options)
    scorer.check_counts(word_counts, weight.shape[0])
    lead = hidden.shape[:-1]
    out_dtype = torch.promote_types(hidden.dtype, weight.dtype)
    compute = compute_dtype(hidden, weight)
    h = hidden.reshape(-1, hidden.shape[-1]).to(compute)
    weight, bias = weight.to(compute), None if bias is None else bias.to(compute)
    y = None if target is None else target.reshape(-1)
    if y is not None:
        check_labels(y, weight.shape[0], ignore_index)
    safe_y = None if y is None else torch.where(y == ignore_index, 0, y)  # a class id on the ignored rows
    a, s, t, bias = scorer.factors(h, weight, bias, safe_y, word_counts, context_norm_value)
    h2, w2 = _scaled(h, weight, a, s)  # (N, H), (V, H)
    logits = h2 @ w2.T if bias is None else torch.addmm(bias, h2, w2.T)  # (N, V), the bias added in the product
    if t is not None:
        keep = y != ignore_index
        rows = torch.arange(h.shape[0], device=h.device)[keep]
        logits = logits.index_put((rows, y[keep]), t[keep])
    logits = soft_cap(logits, scorer.softcap)
    return logits.reshape(*lead, weight.shape[0]).to(out_dtype)


@autocast_off
def margin_cross_entropy(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    target: torch.Tensor,
    *,
    scorer: Scorer | None = None,
    word_counts: torch.Tensor | None = None,
    context_norm_value: float | torch.Tensor | None = None,
    reduction: str = "mean",
    ignore_index: int = -100,
    num_items_in_batch: int | torch.Tensor | None = None,
    chunk_size: int | None = None,
    top_k: int | None = None,
    label_smoothing: float = 0.0,
    criterion: str = "ce",
    z_loss: float = 0.0,
    class_weight: torch.Tensor | None = None,
    return_z_loss: bool = False,
    return_predictions: bool = False,
    return_target_rank: bool = False,
    return_entropy: bool = False,
    loss_dtype: torch.dtype | None = None,
    kernel: str | ChunkKernel | None = None,
    **scorer_options,
) -> torch.Tensor | LinearCrossEntropyOutput:
    """Cross-entropy (eq. 4) of the large-margin logits of eq. 13, computed in chunks of tokens without materialising
    the (N, V) logits. `z_loss` (λ · lse² of the margin logits, the target's φ included), `class_weight`,
    `return_z_loss`, `return_predictions` and `return_target_rank` (without the margin; with max-norm, g of the batch)
    and `return_entropy` (of the softmax over the margin logits) as in `fused_linear_cross_entropy`. The scorer and its
    data as in `margin_logits` (`scorer`, or the keyword `scorer_options`: margin, m, scale, word_norm, context_norm,
    gain); `reduction`, `ignore_index` as in `F.cross_entropy`; `num_items_in_batch` divides the sum instead of the
    number of non-ignored tokens (exact gradient accumulation); `top_k`, `label_smoothing` as in
    `fused_linear_cross_entropy`. With margin="none", scale=None and both norms no-mod this is
    `F.cross_entropy(hidden @ weight.T + bias, target)`. `criterion` "bce" or "mse": the sampling paper's full BCE /
    MSE over the same logits instead (`fused_linear_cross_entropy`). `loss_dtype`: None, torch's rule for hidden,
    weight and bias (`fused_linear_cross_entropy`), whatever dtype the margin's factors have. `kernel`: the chunk
    kernel, as in `fused_linear_cross_entropy`.
    """
    out_dtype = loss_dtype or _loss_dtype(hidden, weight, bias)
    scorer = resolve_scorer(scorer, **scorer_options)
    scorer.check_counts(word_counts, weight.shape[0])
    shard = vocab_shard(weight)
    if shard is not None:  # W a DTensor sharded on its rows (tensor parallelism): hf_heads.losses.vocab_parallel
        check_no_kernel(kernel)
        h, s, t, b, y, valid = margin_rows(
            scorer, hidden, shard, bias, target, word_counts, context_norm_value, ignore_index
        )
        return sharded_loss(
            (h, y, valid), shard, b, target.shape, target_logit=t, column_scale=s, top_k=top_k,
            label_smoothing=label_smoothing, softcap=scorer.softcap, criterion=criterion, z_loss=z_loss,
            class_weight=class_weight, return_z_loss=return_z_loss, return_predictions=return_predictions,
            return_target_rank=return_target_rank, return_entropy=return_entropy, out_dtype=out_dtype,
            reduction=reduction, ignore_index=ignore_index, num_items_in_batch=num_items_in_batch,
            chunk_size=chunk_size,
        )  # fmt: skip
    # h and W in their dtype (a half model's products stay in half: no float32 copy of W); the factors in float32
    h, w, b, y, valid = linear_rows(hidden, weight, bias, target, ignore_index, reduction, keep_dtype=True)
    # every row, the ignored ones with a stand-in class (no host read of which rows count; the fused loss drops them)
    # W passed on through the norms' function, which adds their part of its gradient into the fused loss's
    w_grad = WeightGradSlot()
    a, s, t, b, w = scorer.fused_factors(
        h, w, b, torch.where(valid, y, 0), word_counts, context_norm_value, valid, w_grad
    )
    h2 = h if a is None else h * a[:, None]  # (N, H); the column scale s (V,) is applied chunk by chunk
    loss = fused_linear_cross_entropy(
        h2,
        w,
        b,
        y.reshape(target.shape),  # per-row results in the labels' shape
        weight_grad=w_grad,
        column_scale=s,
        target_logit=t,
        softcap=scorer.softcap,
        top_k=top_k,
        label_smoothing=label_smoothing,
        criterion=criterion,
        z_loss=z_loss,
        class_weight=class_weight,
        return_z_loss=return_z_loss,
        return_predictions=return_predictions,
        return_target_rank=return_target_rank,
        return_entropy=return_entropy,
        loss_dtype=out_dtype,
        reduction=reduction,
        ignore_index=ignore_index,
        num_items_in_batch=num_items_in_batch,
        chunk_size=chunk_size,
        kernel=kernel,
    )
    return loss


class MarginCrossEntropy(nn.Module):
    """`margin_cross_entropy` as a module: the scorer at construction (`scorer`, or its keyword options, e.g.
    `MarginCrossEntropy(margin="arc", m=0.2)`), tensors at call time."""

    def __init__(
        self,
        *,
        scorer: Scorer | None = None,
        word_counts: torch.Tensor | None = None,
        reduction: str = "mean",
        ignore_index: int = -100,
        chunk_size: int | None = None,
        **scorer_options,
    ) -> None:
        super().__init__()
        self.scorer = resolve_scorer(scorer, **scorer_options)
        self.scorer.check_counts(word_counts)
        self.reduction, self.ignore_index, self.chunk_size = reduction, ignore_index, chunk_size
        self.register_buffer("word_counts", word_counts, persistent=False)

    def forward(self, hidden, weight, bias, target, num_items_in_batch=None, context_norm_value=None):
        return margin_cross_entropy(
            hidden,
            weight,
            bias,
            target,
            scorer=self.scorer,
            word_counts=self.word_counts,
            context_norm_value=context_norm_value,
            reduction=self.reduction,
            ignore_index=self.ignore_index,
            num_items_in_batch=num_items_in_batch,
            chunk_size=self.chunk_size,
        )


@dataclass(frozen=True, kw_only=True)
class LargeMarginLoss(FusedOutputs):
    """Cross-entropy (eq. 4) of the large-margin logits of eq. 13: `scorer` (a `Scorer`: the margin φ, the scale, the
    word and context norm scalings f, g; None: plain logits), `word_counts` (V,) for a word norm that reads them,
    `context_norm_value` the max-norm's value (None: the batch's maximum). `top_k` as in `SoftmaxLoss`."""

    scorer: Scorer | None = None
    word_counts: torch.Tensor | None = None
    context_norm_value: float | torch.Tensor | None = None
    top_k: int | None = None

    def __call__(self, rows, kernel=None):
        return margin_cross_entropy(*rows.tensors(), **self.options(), **rows.counting.kwargs(), kernel=kernel)
