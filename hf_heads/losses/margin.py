"""Large-margin softmax for language models: L-Softmax, ArcFace, CosFace with word- and context-vector norm scaling.

Paper: Huo, Gao, Wang, Schlüter, Ney, "Investigation of Large-Margin Softmax in Neural Language Modeling", Interspeech
2020 (shared/papers/large_margin_softmax_lm.md).

The logit of class c at position i is l(c, i) = g(i) · f(c) · φ_c(cos θ_{c,i}) + b_c (eq. 13), φ_c = cos but for the
target's margin (eqs. 5–8, 14), f the word-vector norm (eqs. 9, 11–12), g the context norm (eq. 10); `scale=s` is the
face-recognition setting ‖W‖ = 1, ‖h‖ = s (eqs. 5–6). The scorer and the choices where the paper is silent:
hf_heads.losses.scorer. Here: `margin_logits`, the dense logits, and `Full`, the candidates that are every class,
chunked, never the (N, V) logits at once.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch

from hf_heads.losses.chunks import ChunkOptions, cross_entropy_options, map_chunks, refuse_kernel, rows_per_chunk
from hf_heads.losses.fused_linear import (
    WeightGradSlot,
    check_no_kernel,
    chunked_loss,
    penalised,
    sharded_loss,
)
from hf_heads.losses.parts import Candidates, CrossEntropy, Impl
from hf_heads.losses.precision import autocast_off, compute_dtype
from hf_heads.losses.precision import loss_dtype as _loss_dtype
from hf_heads.losses.reduction import check_labels, check_reduction, linear_inputs, reduce_rows, valid_rows
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
from hf_heads.losses.vocab_parallel import sharded_margin_inputs, vocab_parallel_per_row, vocab_shard

# The scorer's names, re-exported.
__all__ = [
    "CONTEXT_NORMS",
    "MARGINS",
    "NEEDS_COUNTS",
    "WORD_NORMS",
    "Full",
    "Scorer",
    "arc_phi",
    "context_norm_values",
    "lsm_psi",
    "margin_logits",
    "target_phi",
    "validate_margin_options",
    "word_norm_values",
]


def target_phi(cos: torch.Tensor, margin: str | dict | Margin, m: float | None = None) -> torch.Tensor:
    """φ(θ_{y,i}) for the target class (eq. 14): the gradient-safe φ (`Margin.safe_phi`) of the margin `margin`."""
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
    """All logits l(c, i) of eq. 13, shape (*, V) for hidden (*, H), weight (V, H), bias (V,); with `target` (*,) the
    target class gets φ of eq. 14 (not on `ignore_index` rows), without it these are the inference logits. The scorer
    is `scorer`, or the one of `scorer_options`; `word_counts` (V,) feed f, `context_norm_value` replaces max-norm's
    batch maximum. Materialises (N, V): use `output_loss` for training. Computed in float32, returned in the dtype
    `hidden @ weight.T` would have."""
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


# ----------------------------------------------------------------------------- every class: the chunked loss


@dataclass(frozen=True)
class Full(Candidates):
    """Every class is a candidate: the criterion over the (N, V) logits of eq. 13 in chunks of rows, the gradient in
    the same pass. With a scorer's `posterior` the NLL of that distribution instead, its chunks recomputed in the
    backward."""

    runs_kernel = True

    def loss(self, inputs, scorer, criterion, returns, impl: Impl):
        if scorer.posterior is not None:
            return _posterior_nll(inputs, scorer, criterion, returns, impl)
        return _full_loss(inputs, scorer, criterion, returns, impl)


@autocast_off
def _full_loss(inputs, scorer: Scorer, criterion, returns, impl: Impl):
    """The chunked criterion of eq. 13's logits: the identity scorer's straight through the chunk engine, any other as
    a row scale a_i = g(i)/‖h_i‖, a column scale s_c = f(c)/‖W_c‖ and the target's replaced logit of each chunk
    (`Scorer.fused_factors`). With a vocabulary-sharded W, each process's rows (vocab_parallel)."""
    hidden, weight, bias, target = inputs.tensors()
    out_dtype = impl.loss_dtype or _loss_dtype(hidden, weight, bias)
    counting = dict(
        reduction=inputs.reduction, ignore_index=inputs.ignore_index, num_items_in_batch=inputs.num_items_in_batch
    )
    scorer.check_counts(scorer.word_counts, weight.shape[0])
    penalty = cross_entropy_options(criterion)[4]
    if penalty:  # the confidence penalty: the loss minus β · the rows' entropy, reduced as the loss
        plain = dataclasses.replace(criterion, confidence_penalty=0.0)
        out = _full_loss(inputs, scorer, plain, (*returns, "entropy"), impl)
        return penalised(
            out, penalty, target, inputs.reduction, inputs.ignore_index, inputs.num_items_in_batch, returns
        )
    shard = vocab_shard(weight)
    if shard is None and _is_linear(scorer):  # W h + b, the checkpoint's transform: the engine as it is
        return chunked_loss(
            hidden, weight, bias, target, criterion=criterion, logit_multiplier=scorer.logit_multiplier,
            softcap=scorer.softcap, chunk_size=impl.chunk_size, returns=returns, loss_dtype=out_dtype,
            kernel=impl.kernel, memory_budget=impl.memory_budget, **counting,
        )  # fmt: skip
    if shard is not None:  # W a DTensor sharded on its rows (tensor parallelism): hf_heads.losses.vocab_parallel
        check_no_kernel(impl.kernel)
        h, s, t, b, y, valid = sharded_margin_inputs(
            scorer, hidden, shard, bias, target, scorer.word_counts, scorer.context_norm_value, inputs.ignore_index
        )
        return sharded_loss(
            (h, y, valid), shard, b, target.shape, ChunkOptions.of(criterion, scorer.softcap, s), target_logit=t,
            returns=returns, out_dtype=out_dtype, chunk_size=impl.chunk_size, budget=impl.budget_bytes, **counting,
        )  # fmt: skip
    # h and W in their dtype (a half model's products stay in half: no float32 copy of W); the factors in float32
    h, w, b, y, valid = linear_inputs(
        hidden, weight, bias, target, inputs.ignore_index, inputs.reduction, keep_dtype=True
    )
    # every row, the ignored ones with a stand-in class (no host read of which rows count; the engine drops them)
    # W passed on through the norms' function, which adds their part of its gradient into the engine's
    w_grad = WeightGradSlot()
    a, s, t, b, w = scorer.fused_factors(
        h, w, b, torch.where(valid, y, 0), scorer.word_counts, scorer.context_norm_value, valid, w_grad
    )
    h2 = h if a is None else h * a[:, None]  # (N, H); the column scale s (V,) is applied chunk by chunk
    return chunked_loss(
        h2, w, b, y.reshape(target.shape), weight_grad=w_grad, column_scale=s, target_logit=t, softcap=scorer.softcap,
        criterion=criterion, chunk_size=impl.chunk_size, returns=returns, loss_dtype=out_dtype, kernel=impl.kernel,
        memory_budget=impl.memory_budget, **counting,
    )  # fmt: skip


def _is_linear(scorer: Scorer) -> bool:
    """Whether the scorer's logits are the linear layer's with the checkpoint's transform."""
    return scorer.without_margin() == Scorer(logit_multiplier=scorer.logit_multiplier, softcap=scorer.softcap) and (
        not scorer.margin.changes_target
    )


@autocast_off
def _posterior_nll(inputs, scorer: Scorer, criterion, returns, impl: Impl):
    """−log p(c_n|x_n) of softmax(posterior(l)) over every class, l the logits of eq. 13 without margin (the sampled
    family's evaluation loss), in chunks of rows recomputed in the backward; plain cross-entropy only."""
    if not (isinstance(criterion, CrossEntropy) and criterion.plain) or returns:
        raise ValueError(
            "a scorer's posterior takes plain cross-entropy (the NLL of the corrected distribution) and returns the "
            f"loss alone; got {criterion!r}, returns={returns}"
        )
    refuse_kernel(impl.kernel, "is not used by the NLL of a posterior, whose chunks run in eager PyTorch")
    hidden, weight, bias, target = inputs.tensors()
    out_dtype = impl.loss_dtype or _loss_dtype(hidden, weight, bias)
    check_reduction(inputs.reduction)
    plain = scorer.without_margin().given(posterior=None)
    plain.check_counts(scorer.word_counts, weight.shape[0])
    shard = vocab_shard(weight)
    if shard is not None:  # each process corrects its own classes' scores, normalised over all of them after
        h, f, _, b, y, valid = sharded_margin_inputs(
            plain, hidden, shard, bias, target, scorer.word_counts, scorer.context_norm_value, inputs.ignore_index
        )
        losses, _, _, _ = vocab_parallel_per_row(
            h, y, shard, b, ChunkOptions.of(CrossEntropy(), plain.softcap, f), chunk_size=impl.chunk_size,
            transform=lambda z: scorer.posterior(z, shard.offset), budget=impl.budget_bytes,
        )  # fmt: skip
        return reduce_rows(losses, valid, target.shape, inputs.reduction, inputs.num_items_in_batch, keep=valid).to(
            out_dtype
        )
    h_all, y_all, valid = valid_rows(hidden, target, inputs.ignore_index)
    check_labels(y_all, weight.shape[0], inputs.ignore_index)
    h, y = h_all[valid], y_all[valid]
    step = impl.chunk_size or rows_per_chunk(h.shape[0], weight.shape[0], impl.budget_bytes)
    data = dict(word_counts=scorer.word_counts, context_norm_value=scorer.context_norm_value)

    def nll(h_c, y_c, w_, b_):
        logits = scorer.posterior(margin_logits(h_c, w_, b_, None, scorer=plain, **data))  # (n, V)
        return -torch.log_softmax(logits, dim=-1).gather(1, y_c[:, None]).squeeze(1)

    per_row = map_chunks(nll, (h, y), (weight, bias), step, recompute=True)
    return reduce_rows(per_row, valid, target.shape, inputs.reduction, inputs.num_items_in_batch).to(out_dtype)
