"""The peer-style loss functions, each `hf_heads.losses.output_loss` with its parts filled in: keyword arguments as in
`F.cross_entropy` and the fused linear cross-entropy of Liger-Kernel and torch, for a call without building parts.
`impl`, in every one: the chunk kernel (a name, a `ChunkKernel`) or an `Impl`, as in `output_loss`.
"""

from __future__ import annotations

import torch

from hf_heads.losses.entry import output_loss
from hf_heads.losses.margin import Full
from hf_heads.losses.parts import CrossEntropy, LossResult, make_criterion
from hf_heads.losses.sampled import Correction, Sampled, make_sampling_method, validate_sampled_options
from hf_heads.losses.scorer import Scorer, resolve_scorer
from hf_heads.losses.sparse import check_k


def fused_linear_cross_entropy(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    target: torch.Tensor,
    *,
    label_smoothing: float = 0.0,
    z_loss: float = 0.0,
    class_weight: torch.Tensor | None = None,
    softcap: float | None = None,
    reduction: str = "mean",
    ignore_index: int = -100,
    num_items_in_batch: int | torch.Tensor | None = None,
    return_z_loss: bool = False,
    impl=None,
) -> torch.Tensor | LossResult:
    """`F.cross_entropy(hidden @ weight.T + bias, target, ...)` without the (N, V) logits: `label_smoothing` and
    `class_weight` as there; `z_loss` λ adds λ · lse² per row (PaLM); `softcap` caps every logit cap · tanh(z / cap)
    (Gemma 2 / 3); `num_items_in_batch` divides the sum. `return_z_loss`: a `LossResult` with the z-loss and the
    lse."""
    return output_loss(
        hidden, weight, bias, target, scorer=Scorer(softcap=softcap),
        criterion=CrossEntropy(label_smoothing=label_smoothing, z_loss=z_loss, class_weight=class_weight),
        reduction=reduction, ignore_index=ignore_index, num_items_in_batch=num_items_in_batch,
        returns=("z_loss", "lse") if return_z_loss else (), impl=impl,
    )  # fmt: skip


def sparse_linear_cross_entropy(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    target: torch.Tensor,
    k: int,
    *,
    label_smoothing: float = 0.0,
    reduction: str = "mean",
    ignore_index: int = -100,
    num_items_in_batch: int | torch.Tensor | None = None,
    impl=None,
) -> torch.Tensor:
    """Eq. 5 of the sparse-softmax paper, log Σ_{top k} exp z − z_y, of `hidden @ weight.T + bias` without the (N, V)
    logits; label smoothing over the top-k support."""
    check_k(k)
    return output_loss(
        hidden, weight, bias, target, criterion=CrossEntropy(top_k=k, label_smoothing=label_smoothing),
        reduction=reduction, ignore_index=ignore_index, num_items_in_batch=num_items_in_batch, impl=impl,
    )  # fmt: skip


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
    impl=None,
    **scorer_options,
) -> torch.Tensor:
    """Cross-entropy (eq. 4) of the large-margin logits of eq. 13, in chunks of rows: the scorer `scorer`, or the one
    of `scorer_options`; `word_counts` (V,) and `context_norm_value` feed f and g. With the identity scorer this is
    `F.cross_entropy(hidden @ weight.T + bias, target)`."""
    scorer = resolve_scorer(scorer, **scorer_options).given(
        word_counts=word_counts, context_norm_value=context_norm_value
    )
    return output_loss(
        hidden, weight, bias, target, scorer=scorer, reduction=reduction, ignore_index=ignore_index,
        num_items_in_batch=num_items_in_batch, impl=impl,
    )  # fmt: skip


def sampled_loss(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    target: torch.Tensor,
    *,
    criterion,
    method,
    num_samples: int | None = None,
    noise_probs: torch.Tensor | None = None,
    remove_accidental_hits: bool = False,
    samples: torch.Tensor | None = None,
    generator: torch.Generator | None = None,
    scorer: Scorer | None = None,
    word_counts: torch.Tensor | None = None,
    reduction: str = "mean",
    ignore_index: int = -100,
    num_items_in_batch: int | torch.Tensor | None = None,
    impl=None,
    **scorer_options,
) -> torch.Tensor:
    """The training criterion `criterion` × `method` (sampling paper eqs. 7-21): K = `num_samples` classes drawn from
    `noise_probs` (C,) once per batch (or given as `samples` (K,)); method "full" is the criterion over every class
    (eqs. 1, 3, 5). The scorer as in `margin_cross_entropy`, its margin on the target's logit."""
    scorer = resolve_scorer(scorer, **scorer_options).given(word_counts=word_counts)
    criterion = make_criterion(criterion)
    sampler = validate_sampled_options(criterion, method, num_samples, weight.shape[0])
    if sampler.draws_samples:
        if noise_probs is None:
            raise ValueError(f"method={sampler.name!r} needs noise_probs (C,) to draw its samples from")
        candidates = Sampled(sampler, num_samples, noise_probs, remove_accidental_hits, samples, generator)
    else:
        candidates = Full()
    return output_loss(
        hidden, weight, bias, target, scorer=scorer, candidates=candidates, criterion=criterion, reduction=reduction,
        ignore_index=ignore_index, num_items_in_batch=num_items_in_batch, impl=impl,
    )  # fmt: skip


def corrected_nll(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    target: torch.Tensor,
    *,
    criterion,
    method,
    noise_probs: torch.Tensor | None = None,
    num_samples: int | None = None,
    scorer: Scorer | None = None,
    word_counts: torch.Tensor | None = None,
    context_norm_value: float | torch.Tensor | None = None,
    reduction: str = "mean",
    ignore_index: int = -100,
    num_items_in_batch: int | torch.Tensor | None = None,
    impl=None,
    **scorer_options,
) -> torch.Tensor:
    """−log p(c_n|x_n) of the corrected, normalised posterior of `criterion` × `method` (sampling paper eqs. 2-22: a
    sampled head's evaluation loss), no margin, in chunks of rows; the scorer as in `margin_cross_entropy`."""
    validate_sampled_options(criterion, method, num_samples, weight.shape[0])
    posterior = Correction(make_criterion(criterion), make_sampling_method(method), num_samples, noise_probs)
    scorer = resolve_scorer(scorer, **scorer_options).without_margin()
    scorer = scorer.given(word_counts=word_counts, context_norm_value=context_norm_value, posterior=posterior)
    return output_loss(
        hidden, weight, bias, target, scorer=scorer, reduction=reduction, ignore_index=ignore_index,
        num_items_in_batch=num_items_in_batch, impl=impl,
    )  # fmt: skip
