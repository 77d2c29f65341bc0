"""Chunked ("fused") linear cross-entropy that never materialises the (N, V) logits.

The memory core every discrete head shares. For rows i (tokens) and classes c it computes, over chunks of rows, the
softmax cross-entropy of the logits

    z[i, c] = h[i] · w[c] + b[c]            for c != y_i
    z[i, y_i] = t[i]                        (a replaced target logit, when `target_logit` is given)

and the gradients of h, w, b and t in the same pass (fused linear cross-entropy: Liger-Kernel, Cut Cross-Entropy,
torch's `F.linear_cross_entropy`). Replacing the target logit lets every large-margin softmax (margin paper,
eq. 13–14) share the kernel; the norm scalings g(i), f(c) are rescalings of h and w done by the caller.

`softcap` applies z -> cap·tanh(z / cap) (Gemma 2 / 3) to every logit, the replaced target included (a margin acts on
the raw logit, the cap on the result). `top_k` restricts the log-sum-exp to each row's k largest logits
(sparse-softmax paper, eq. 5): the backward gathers k+1 rows of W per token instead of two dense products.
`criterion="bce"` / `"mse"` are the sampling paper's full sigmoid criteria: BCE (eq. 3) Σ_c softplus(z_c) − z_y,
MSE (eq. 1) Σ_c (σ(z_c) − δ_cy)².

The per-chunk work is a chunk kernel (hf_heads.losses.kernels, hf_heads.losses.triton_kernel) chosen by
hf_heads.losses.chunks. "sum" / "mean" compute all gradients in the forward pass (the loss alone when no gradient is
needed); "none" returns per-row losses and recomputes each chunk in the backward.
"""

from __future__ import annotations

import dataclasses
import weakref
from typing import NamedTuple

import torch

from hf_heads.losses.chunks import (
    ChunkKernel,
    ChunkOptions,
    Grads,
    chunk_kernel,
    cross_entropy_options,
    eval_rows_per_chunk,
    map_chunks,
    refuse_kernel,
    rows_per_chunk,
)
from hf_heads.losses.parts import Criterion, LossResult, check_chunking, make_criterion
from hf_heads.losses.precision import autocast_off, compute_dtype, gemm_dtype
from hf_heads.losses.precision import loss_dtype as _loss_dtype
from hf_heads.losses.reduction import check_labels as check_labels  # re-exported: hf_heads.losses.check_labels
from hf_heads.losses.reduction import check_reduction, host_reads_are_free, linear_inputs, mean_divisor, reduce_rows
from hf_heads.losses.transforms import check_transform
from hf_heads.losses.triton_programs import scale_in_place
from hf_heads.losses.vocab_parallel import (
    VocabShard,
    reduce_sharded,
    sharded_cross_entropy,
    sharded_row_weights,
    sharded_rows,
    vocab_parallel_per_row,
    vocab_shard,
)
from hf_heads.validation import OptionError


class WeightGradSlot:
    """Where the fused loss leaves a weak reference to the (V, H) gradient of its weight as it hands it to autograd, so
    that the backward of whatever produced that weight (the margin scorer, hf_heads.losses.scorer) can recognise
    that buffer and add its own part in place instead of into a second (V, H) buffer. Only the tensor the fused loss
    created is recognised: a gradient autograd summed out of place is left alone."""

    def __init__(self) -> None:
        self._ref: weakref.ref | None = None

    def hand_over(self, grad: torch.Tensor | None) -> None:
        """Record `grad`, the fused loss's weight gradient, as it goes to autograd."""
        self._ref = None if grad is None else weakref.ref(grad)

    def take(self, grad: torch.Tensor | None) -> bool:
        """Whether `grad` is the tensor last handed over (then forgotten: it is the caller's to extend)."""
        mine = grad is not None and self._ref is not None and self._ref() is grad
        self._ref = None
        return mine


@autocast_off
def _run(
    h, w, b, y, t, opts: ChunkOptions, chunk_size, gemm: torch.dtype, row_weight=None, needs=None, z_weight=None,
    want_lse: bool = False, want_pred: int = 0, want_ent: bool = False, ent_weight=None, *, kernel: ChunkKernel,
):  # fmt: skip
    """(losses (N,), gradients, lse (N,) or None, predictions (N, want_pred) or None, entropies (N,) or None), chunk by
    chunk through the chunk engine.

    With `row_weight` (N,) the gradients (h, w, b, t, s) of Σ_i row_weight_i · loss_i + Σ_i z_weight_i · λ · lse_i²
    (λ = `opts.z_loss`, `z_weight` None: the row weights; the losses never include λ · lse²); without it the loss
    alone, one matmul per chunk. With the column scale s the kernels accumulate A = Σ d zᵀ h (s applied per chunk or
    through one copy s ∘ w, see `_scale_by_copy`); then d w = s ∘ A and d s_c = A_c · w_c. `needs`: autograd's
    `needs_input_grad` for (h, w, b, t, s); when neither w nor s needs one (a frozen output layer) the (V, H)
    accumulator is skipped. `want_pred`: 1 the argmax, 2 also the target's rank; `ent_weight` (N,) adds the
    gradients of Σ_i ent_weight_i · H_i."""
    h_g, w_g = h.to(gemm), w.to(gemm)
    row_dtype = torch.promote_types(gemm, torch.float32)
    lse = torch.empty(h.shape[0], dtype=row_dtype, device=h.device) if want_lse or opts.z_loss > 0 else None
    pred = torch.empty(h.shape[0], want_pred, dtype=torch.long, device=h.device) if want_pred else None
    ent = torch.empty(h.shape[0], dtype=row_dtype, device=h.device) if want_ent else None
    if row_weight is None:
        losses = map_chunks(
            lambda h_, y_, t_, l_, p_, e_: kernel.loss(h_, w_g, b, y_, t_, opts, lse=l_, pred=p_, ent=e_),
            (h_g, y, t, lse, pred, ent), (), chunk_size,
        )  # fmt: skip
        return losses, None, lse, pred, ent
    scale = opts.column_scale
    workspace_dtype = kernel.workspace_dtype(opts, w.shape[0], gemm)
    rows = min(chunk_size, h.shape[0])
    if scale is not None and _scale_by_copy(rows, w.shape[1], gemm, workspace_dtype):
        # (V, H) s ∘ w, each entry rounded once to the products' dtype: no per-chunk pass for s
        w_g = torch.mul(w_g, scale[:, None], out=torch.empty_like(w_g))
        opts = opts.with_scale(None)
    accumulate = torch.promote_types(gemm, torch.float32)
    grad_h = torch.empty_like(h_g)
    grad_t = None if t is None else torch.empty_like(t)
    wants_w = needs is None or needs[1]
    wants_a = wants_w or (scale is not None and needs[4])  # A: for d w, and for d s
    grad_w = torch.empty(w.shape, dtype=accumulate, device=w.device) if wants_a else None  # written by chunk 1
    grad_b = None if b is None else torch.zeros_like(b)

    workspace = torch.empty(rows, w.shape[0], dtype=workspace_dtype, device=h.device)
    unset = [grad_w is not None]  # until the first chunk has written d w

    def step(h_, y_, t_, weight_, gh, gt, lse_, z_weight_, pred_, ent_, ent_weight_):
        grads = Grads(gh, grad_w, grad_b, gt, workspace[: h_.shape[0]], w_unset=unset[0])
        unset[0] = False
        return kernel.loss_and_grads(
            h_, w_g, b, y_, t_, opts, weight_, grads, lse=lse_, z_weight=z_weight_, pred=pred_, ent=ent_,
            ent_weight=ent_weight_,
        )  # fmt: skip

    chunked = (h_g, y, t, row_weight, grad_h, grad_t, lse, z_weight, pred, ent, ent_weight)
    losses = map_chunks(step, chunked, (), chunk_size)
    grad_s = w_rows = None
    if scale is not None and grad_w is not None:  # grad_w holds A = d(s ∘ w): d s_c = A_c · w_c, then d w = s ∘ A
        grad_s = row_dots(grad_w, w).to(scale.dtype)  # (V,)
        w_rows = scale.to(accumulate)  # d w = s ∘ A, applied as the gradient is handed over (one pass with d loss)
    if not wants_w:
        grad_w = None  # A, if any, was for d s only
    # in the products' / accumulators' dtypes: `_handed_over` rounds them to the inputs', d loss applied in that pass
    return losses, RunGrads(grad_h, grad_w, grad_b, grad_t, grad_s, w_rows), lse, pred, ent


class RunGrads(NamedTuple):
    """The gradients `_run` leaves, in the products' / accumulators' dtypes: of h, w, b, t and s; `w_rows` (V,) or
    None: a factor of each row of `w` still to apply (the column scale: d w = s ∘ A)."""

    h: torch.Tensor
    w: torch.Tensor | None
    b: torch.Tensor | None
    t: torch.Tensor | None
    s: torch.Tensor | None
    w_rows: torch.Tensor | None = None


def _handed_over(grads: RunGrads, inputs, grad_out: torch.Tensor | None = None) -> list[torch.Tensor | None]:
    """The gradients `grads` (`_run`'s) in the dtypes of `inputs` (h, w, b, t, s), each times `grad_out` (None, or 1
    read on a host where that is free: not multiplied) and the weight's also times its rows' factor `grads.w_rows`,
    in one pass per gradient: in place where the dtype is the input's (`scale_in_place`: on a GPU no pass at all when
    d loss, read there, is 1), else written once into a tensor of the input's dtype (a float32 (V, H) accumulator
    scaled by d loss and the column scale and rounded to a half weight's dtype in one pass, not three)."""
    scale = grad_out is not None and not (host_reads_are_free(grad_out.device) and bool(grad_out == 1))
    out = []
    for k, (g, x) in enumerate(zip(grads[:5], inputs, strict=True)):
        factor = grad_out if scale else None
        if k == 1 and grads.w_rows is not None:  # (V, 1): the column scale, times d loss when that applies
            rows = grads.w_rows if factor is None else grads.w_rows * factor.to(grads.w_rows.dtype)
            factor = rows[:, None]
        if g is None or x is None:
            out.append(None)
        elif factor is None:
            out.append(g.to(x.dtype))
        elif g.dtype.itemsize <= x.dtype.itemsize:  # in place, in the input's dtype (a half d h upcast first)
            g = g.to(x.dtype)  # d loss, read on an accelerator's device and not on the host: no pass where it is 1
            out.append(g.mul_(factor.to(x.dtype)) if host_reads_are_free(g.device) else scale_in_place(g, factor))
        else:  # scaled in the accumulator's precision, rounded once into the input's dtype
            out.append(torch.mul(g, factor.to(g.dtype), out=torch.empty_like(g, dtype=x.dtype)))
    return out


def _scale_by_copy(rows: int, hidden_size: int, gemm: torch.dtype, workspace: torch.dtype) -> bool:
    """Whether the training products apply the column scale s through one scaled copy s ∘ w (V, H) in the `gemm` dtype
    instead of a pass over each chunk's (rows, V) gradient block: when the copy takes at most half the memory of the
    chunk workspace, so a word-norm head adds little memory and its rows amortise the copy."""
    return 2 * hidden_size * gemm.itemsize <= rows * workspace.itemsize


def row_dots(a: torch.Tensor, b: torch.Tensor, block_rows: int = 1024) -> torch.Tensor:
    """(a_c · b_c) for every row c of a (V, H) and b (V, H) (b cast to a's dtype), (V,). On a CPU in blocks of rows
    with one small temporary (a fresh (V, H) product costs several times as much, its page faults included); on an
    accelerator one batched product."""
    if a.device.type != "cpu":
        return torch.bmm(a[:, None, :], b.to(a.dtype)[:, :, None]).reshape(-1)
    out = torch.empty(a.shape[0], dtype=a.dtype, device=a.device)
    tmp = torch.empty(min(block_rows, a.shape[0]), a.shape[1], dtype=a.dtype, device=a.device)
    for start in range(0, a.shape[0], block_rows):
        rows = slice(start, start + block_rows)
        part = torch.mul(a[rows], b[rows].to(a.dtype), out=tmp[: a[rows].shape[0]])  # (rows, H)
        torch.sum(part, dim=1, out=out[rows])
    return out


class _FusedLinearCEScalar(torch.autograd.Function):
    """Σ_i r_i · loss_i (+ λ Σ_i u_i · lse_i², the z-loss) with all gradients computed in the forward pass: r_i =
    `weight` · a_i with `class_rows` a (N,) (None: 1), u_i = `z_scale`; `keep` (N,): the rows that count (None:
    all), the others computed with weight 0; `s`: the column scale (V,) or None. With `want_lse` / `want_pred` the
    outputs are (loss, z-loss term, lse (N,) or None, predictions), the last three without gradient.

    The backward hands the forward's gradients over without keeping a reference (no copy of the (V, H) one) and
    scales them in place by d output; a second backward (`retain_graph=True`, gradcheck) recomputes them from the
    saved inputs."""

    @staticmethod
    def _row_weights(h, weight, keep, class_rows, z_scale, opts: ChunkOptions):
        """(r (N,), u (N,) or None): the row weights of the losses and of the z-loss (None: r, when no class weight
        makes them differ)."""
        dtype = torch.promote_types(h.dtype, torch.float32)

        def per_row(scale):
            if isinstance(scale, torch.Tensor):  # 1 / num_items_in_batch as a tensor: no host sync
                out = scale.to(device=h.device, dtype=dtype).expand(h.shape[0])
            else:
                out = torch.full((h.shape[0],), scale, dtype=dtype, device=h.device)
            return out if keep is None else out * keep

        row_weight = per_row(weight)
        if class_rows is None:
            return row_weight, None
        z_weight = per_row(z_scale) if opts.z_loss > 0 else None
        return row_weight * class_rows.to(dtype), z_weight

    @staticmethod
    def forward(
        ctx, h, w, b, t, s, y, weight: float | torch.Tensor, opts: ChunkOptions, chunk_size, gemm, keep=None,
        slot=None, class_rows=None, z_scale: float | torch.Tensor = 1.0, want_lse: bool = False,
        want_pred: int = 0, kernel: ChunkKernel | None = None,
    ):  # fmt: skip
        row_weight, z_weight = _FusedLinearCEScalar._row_weights(h, weight, keep, class_rows, z_scale, opts)
        needs = ctx.needs_input_grad[:5]  # h, w, b, t, s
        want_aux = want_lse or want_pred
        losses, grads, lse, pred, _ = _run(
            h, w, b, y, t, opts.with_scale(s), chunk_size, gemm, row_weight, needs, z_weight, want_lse, want_pred,
            kernel=kernel,
        )  # fmt: skip
        ctx.grads = grads  # computed here, neither inputs nor outputs: kept on ctx until the backward takes them
        ctx.save_for_backward(h, w, b, t, s, y, keep, class_rows)
        ctx.rerun = (weight, opts, chunk_size, gemm, z_scale, kernel)
        ctx.slot = slot  # a WeightGradSlot told which tensor the weight's gradient is, or None
        loss, z_term = _total(losses, lse, keep, class_rows, weight, z_scale, opts.z_loss)
        if not want_aux:
            return loss
        pred = y.new_empty(0, 1) if pred is None else pred
        ctx.mark_non_differentiable(*(x for x in (z_term, lse, pred) if x is not None))
        return loss, z_term, lse, pred

    @staticmethod
    def backward(ctx, grad_out, *unused):  # unused: the gradients of the z-loss term and lse outputs (none)
        grads, ctx.grads = ctx.grads, None
        h, w, b, t, s, y, keep, class_rows = ctx.saved_tensors
        if grads is None:  # a second backward through this graph: the first one took them
            weight, opts, chunk_size, gemm, z_scale, kernel = ctx.rerun
            row_weight, z_weight = _FusedLinearCEScalar._row_weights(h, weight, keep, class_rows, z_scale, opts)
            needs = ctx.needs_input_grad[:5]
            _, grads, *_ = _run(
                h, w, b, y, t, opts.with_scale(s), chunk_size, gemm, row_weight, needs, z_weight, kernel=kernel
            )
        grads = _handed_over(grads, (h, w, b, t, s), grad_out)  # d loss / d loss = 1 on a CPU: not multiplied
        if ctx.slot is not None:
            ctx.slot.hand_over(grads[1])
        return (*grads, *[None] * 12)  # h, w, b, t, s; then y and the non-tensor arguments


def _total(losses, lse, keep, class_rows, weight, z_scale, z_loss: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(Σ_i a_i · loss_i · weight + λ Σ_i lse_i² · z_scale, the second term): the rows `keep` drops count 0, a the
    rows' class weights (None: 1), λ = `z_loss` (0: the second term is 0)."""
    kept = _kept(losses, keep)
    loss = (kept if class_rows is None else kept * class_rows).sum() * weight
    if not z_loss:
        return loss, loss.new_zeros(())
    z_term = _kept(lse.square(), keep).sum() * z_scale * z_loss
    return loss + z_term, z_term.detach()


class _FusedLinearCEPerRow(torch.autograd.Function):
    """Per-row losses a_i · loss_i + λ · lse_i² (a: `class_rows`, None: 1; λ: the z-loss); the backward recomputes each
    chunk weighted by the incoming gradient. With `want_lse` / `want_pred` / `want_ent`: (losses, lse or None,
    predictions, entropies or None), lse and predictions without gradient, the entropies H_i with theirs (d H is the
    kernels' entropy weight in the recompute)."""

    @staticmethod
    def forward(
        ctx, h, w, b, t, s, y, opts: ChunkOptions, chunk_size, gemm, slot=None, class_rows=None, want_lse=False,
        want_pred=0, want_ent=False, kernel: ChunkKernel | None = None,
    ):  # fmt: skip
        opts = opts.with_scale(s)
        want_aux = want_lse or want_pred or want_ent
        with torch.no_grad():
            losses, _, lse, pred, ent = _run(
                h, w, b, y, t, opts, chunk_size, gemm, want_lse=want_lse, want_pred=want_pred, want_ent=want_ent,
                kernel=kernel,
            )  # fmt: skip
        ctx.save_for_backward(h, w, b, t, s, y, class_rows)
        ctx.set_materialize_grads(False)  # an unused entropy gets None, not zeros: no entropy terms in the recompute
        ctx.opts = (opts.with_scale(None), chunk_size, gemm, kernel)  # the tensor s is saved above
        ctx.slot = slot
        if class_rows is not None:
            losses = losses * class_rows
        if opts.z_loss > 0:
            losses = losses + opts.z_loss * lse.square()
        if not want_aux:
            return losses
        pred = y.new_empty(0, 1) if pred is None else pred
        ctx.mark_non_differentiable(*(x for x in (lse, pred) if x is not None))
        return losses, lse, pred, ent

    @staticmethod
    def backward(ctx, grad_out, grad_lse=None, grad_pred=None, grad_ent=None):
        h, w, b, t, s, y, class_rows = ctx.saved_tensors
        opts, chunk_size, gemm, kernel = ctx.opts
        opts = opts.with_scale(s)
        grad_out = torch.zeros_like(y, dtype=h.dtype) if grad_out is None else grad_out  # only H was used
        row_weight = grad_out if class_rows is None else grad_out * class_rows
        z_weight = grad_out if class_rows is not None and opts.z_loss > 0 else None
        needs = ctx.needs_input_grad[:5]
        _, grads, *_ = _run(
            h, w, b, y, t, opts, chunk_size, gemm, row_weight, needs, z_weight, ent_weight=grad_ent, kernel=kernel
        )
        grads = _handed_over(grads, (h, w, b, t, s))
        if ctx.slot is not None:
            ctx.slot.hand_over(grads[1])
        return (*grads, *[None] * 10)  # h, w, b, t, s; then y and the non-tensor arguments


def _kept(losses: torch.Tensor, keep: torch.Tensor | None) -> torch.Tensor:
    """The losses (N,) with 0 on the rows `keep` drops (None: all kept)."""
    return losses if keep is None else torch.where(keep, losses, 0.0)


@autocast_off
def chunked_loss(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    target: torch.Tensor,
    *,
    criterion: Criterion | str | None = None,
    target_logit: torch.Tensor | None = None,
    column_scale: torch.Tensor | None = None,
    logit_multiplier: float = 1.0,
    softcap: float | None = None,
    reduction: str = "mean",
    ignore_index: int = -100,
    num_items_in_batch: int | torch.Tensor | None = None,
    chunk_size: int | None = None,
    weight_grad: WeightGradSlot | None = None,
    returns: tuple[str, ...] = (),
    loss_dtype: torch.dtype | None = None,
    kernel: str | ChunkKernel | None = None,
    memory_budget: int | None = None,
) -> torch.Tensor | LossResult:
    """The chunked loss of `hidden @ weight.T + bias` (with an optional replaced target logit and column scale): what
    the `Full` candidates of `hf_heads.losses.output_loss` run, and the chunk kernels' contract.

    Args:
        hidden: (N, H) (any leading shape is flattened); weight: (V, H); bias: (V,) or None.
        target: (N,) class ids, `ignore_index` rows contribute nothing.
        criterion: a `Criterion` (hf_heads.losses.parts) or its name; None: plain cross-entropy. `CrossEntropy`
            carries `top_k` (sparse softmax), `label_smoothing` (over the top-k support with `top_k`),
            `confidence_penalty` β (minus β times each row's entropy), `z_loss` λ (λ · lse_i² per row, PaLM's
            z-loss; "mean" divides it by the rows whatever the class weights) and `class_weight` (V,) (as
            `F.cross_entropy(weight=...)`, not with label smoothing). The sampling paper's sigmoid criteria:
            `BinaryCrossEntropy` (eq. 3) and `MeanSquaredError` (eq. 1).
        target_logit: (N,) value that replaces z[i, target_i] (e.g. a margin logit), or None.
        column_scale: (V,) s, or None: the products become s_c · (hidden_i · weight_c) before the bias (eq. 13's
            f(c) / ‖W_c‖), applied per chunk rather than to a scaled copy of the weight.
        logit_multiplier: multiplies the logits, not a replaced target logit (hf_heads.losses.transforms).
        softcap: every logit z, the replaced target's too, becomes softcap · tanh(z / softcap).
        reduction: "mean" (over non-ignored rows, or divided by `num_items_in_batch`, which keeps gradient
            accumulation exact), "sum", "none".
        chunk_size: rows per chunk; memory_budget: MiB of each chunk's (rows, V) logits (the kernel's workspace),
            from which the rows follow (at least one; not with `chunk_size`). Neither: the defaults
            (`hf_heads.losses.chunks.rows_per_chunk`: 32 MiB but at least 512 rows on a CPU, up to 1 GiB on an
            accelerator). A larger budget reads W and writes its gradient's accumulator fewer times per step.
        weight_grad: a `WeightGradSlot` told which tensor is the gradient of `weight`, or None.
        returns: extras, as a `LossResult` (hf_heads.losses.parts.RETURNS), from the same pass as the loss: "z_loss"
            / "lse", "predictions" (the argmax without a margin's replaced logit, lowest index on a tie; the token
            accuracy), "rank" (the classes ahead of the label, for `accuracy_at(k)`), "top_k_rank" (that rank capped
            at the criterion's top_k, min(rank, k): whether the label is among a sparse head's top k, read on a CPU
            from the loss's own top-k selection instead of ranking every class), "entropy" (differentiable,
            cross-entropy only: its backward recomputes the chunks).
        loss_dtype: the dtype of the returned loss; None: torch's rule for `F.cross_entropy` of the logits.
        kernel: the chunk kernel (`hf_heads.losses.CHUNK_KERNELS` name or a `ChunkKernel`); None:
            `HF_HEADS_CHUNK_KERNEL`, else the automatic choice. Refused for a vocabulary-sharded weight.
    Returns:
        a scalar, or for reduction="none" the per-row losses in the shape of `target` (0 on ignored rows),
        accumulated in float32 (float64 stays float64) and rounded once to `loss_dtype`. With `returns`, a
        `LossResult`.
    """
    check_transform(logit_multiplier, softcap)
    budget = check_chunking(chunk_size, memory_budget)
    criterion = make_criterion(criterion)
    top_k, label_smoothing, z_loss, class_weight, penalty = cross_entropy_options(criterion)
    return_z_loss = "z_loss" in returns or "lse" in returns
    capped_rank = top_k is not None and "top_k_rank" in returns and "rank" not in returns
    return_target_rank = "rank" in returns or "top_k_rank" in returns
    return_predictions = "predictions" in returns or return_target_rank
    return_entropy = "entropy" in returns
    if not criterion.softmax and (return_z_loss or return_entropy):
        wanted = [r for r in returns if r in ("z_loss", "lse", "entropy")]
        raise OptionError("returns", wanted, f"is for cross-entropy only, not criterion {criterion.name!r}")
    if penalty:  # the confidence penalty: the loss minus β · the rows' entropy, reduced as the loss
        loss = chunked_loss(
            hidden, weight, bias, target, criterion=dataclasses.replace(criterion, confidence_penalty=0.0),
            target_logit=target_logit, column_scale=column_scale, logit_multiplier=logit_multiplier, softcap=softcap,
            reduction=reduction, ignore_index=ignore_index, num_items_in_batch=num_items_in_batch,
            chunk_size=chunk_size, weight_grad=weight_grad, returns=(*returns, "entropy"), loss_dtype=loss_dtype,
            kernel=kernel, memory_budget=memory_budget,
        )  # fmt: skip
        return penalised(loss, penalty, target, reduction, ignore_index, num_items_in_batch, returns)
    out_dtype = loss_dtype or _loss_dtype(hidden, weight, bias)
    shard = vocab_shard(weight)
    if shard is not None:  # W a DTensor sharded on its rows (tensor parallelism): hf_heads.losses.vocab_parallel
        check_no_kernel(kernel)
        if logit_multiplier != 1.0:
            hidden, bias = hidden * logit_multiplier, None if bias is None else bias * logit_multiplier
        rows = sharded_rows(hidden, target, shard, ignore_index)
        opts = ChunkOptions.of(criterion, softcap, shard.local_part(column_scale))
        return sharded_loss(
            rows, shard, shard.local_part(bias), target.shape, opts, target_logit=target_logit, returns=returns,
            out_dtype=out_dtype, reduction=reduction, ignore_index=ignore_index, num_items_in_batch=num_items_in_batch,
            chunk_size=chunk_size, budget=budget,
        )  # fmt: skip
    h, w, b, y, valid = linear_inputs(hidden, weight, bias, target, ignore_index, reduction, keep_dtype=True)
    gemm, compute = gemm_dtype(h, w), compute_dtype(h, w)
    kernel = chunk_kernel(kernel, h.device, gemm, w.shape[0])
    if class_weight is not None:
        check_class_weight(class_weight, w.shape[0], label_smoothing)
    if logit_multiplier != 1.0:  # s·(h·w + b) = (s·h)·w + s·b: the kernel's gradients reach h and b through autograd
        h, b = h * logit_multiplier, None if b is None else b * logit_multiplier
    t = None if target_logit is None else target_logit.reshape(-1).to(compute)
    s = None if column_scale is None else column_scale.reshape(-1).to(compute)
    if s is not None and s.shape[0] != w.shape[0]:
        raise ValueError(f"column_scale has {s.shape[0]} entries but weight has {w.shape[0]} rows (classes)")
    keep = None  # the rows that count, when the ignored ones are computed too (weight 0)
    if host_reads_are_free(h.device):
        if not bool(valid.all()):
            h, y, t = h[valid], y[valid], None if t is None else t[valid]
        num_valid = y.numel()
    else:  # compacting the rows would read their count on the host: the ignored rows run with target 0, weight 0
        keep, y, num_valid = valid, torch.where(valid, y, 0), valid.sum()
    opts = ChunkOptions.of(criterion, softcap, capped_rank=capped_rank)
    workspace = kernel.workspace_dtype(opts, w.shape[0], gemm).itemsize  # bytes per logit of the chunk's block
    chunk = chunk_size or rows_per_chunk(h.shape[0], w.shape[0], budget, workspace, device=h.device)
    class_rows = None if class_weight is None else class_weight.to(device=h.device, dtype=compute)[y]  # (N,) a[y_i]

    want_pred = 2 if return_target_rank else int(return_predictions)  # the columns of `pred`: argmax (and rank)
    want_aux = return_z_loss or want_pred > 0 or return_entropy
    want_lse = want_aux and criterion.softmax  # a sigmoid criterion has no log-sum-exp

    def output(loss, z_term, lse, pred, ent=None):  # the loss, or the `LossResult` (labels' shape)
        loss = loss.to(out_dtype)  # rounded once (a half dtype outside autocast); the gradient reaches the kernel
        if not want_aux:
            return loss
        entropy = None
        if return_entropy:  # differentiable: 0 on ignored rows
            entropy = reduce_rows(_kept(ent, keep), valid, target.shape, "none").to(out_dtype)
        lse = None if lse is None else reduce_rows(lse.detach(), valid, target.shape, "none", keep=keep)
        predictions = accuracy = rank = None
        if want_pred:
            predictions = _in_labels_shape(pred[:, 0], valid, keep, target.shape, ignore_index)
            if want_pred > 1:
                ranks = pred[:, 1].clamp_max(top_k) if capped_rank else pred[:, 1]  # every kernel: min(rank, k)
                rank = _in_labels_shape(ranks, valid, keep, target.shape, -1)
            hits = pred[:, 0] == y if keep is None else (pred[:, 0] == y) & keep
            count = num_valid.clamp_min(1) if isinstance(num_valid, torch.Tensor) else max(num_valid, 1)
            accuracy = hits.sum() / count
        return LossResult(loss, z_term.to(out_dtype), lse, predictions, accuracy, rank, entropy)

    needs_grad = torch.is_grad_enabled() and any(x is not None and x.requires_grad for x in (h, w, b, t, s))
    # without gradients (an evaluation), the loss alone in larger chunks: one matmul per chunk instead of three
    eval_chunk = chunk_size or eval_rows_per_chunk(h.shape[0], w.shape[0], chunk, budget)
    row_chunk = chunk if needs_grad else eval_chunk

    def per_row(class_rows):  # (rows a_i · loss_i + λ lse_i², lse, predictions, entropies), recomputed in backward
        out = _FusedLinearCEPerRow.apply(
            h, w, b, t, s, y, opts, row_chunk, gemm, weight_grad, class_rows, want_lse, want_pred, return_entropy,
            kernel,
        )  # fmt: skip
        return out if want_aux else (out, None, None, None)

    if reduction == "none":
        rows, lse, pred, ent = per_row(class_rows)
        rows = reduce_rows(_kept(rows, keep), valid, target.shape, "none")  # (*,) like the labels
        z_term = (
            torch.zeros_like(rows)
            if lse is None
            else reduce_rows(_kept(z_loss * lse.square(), keep), valid, target.shape, "none")
        )
        return output(rows, z_term, lse, pred, ent)
    # 1 / the mean's divisor; a tensor `num_items_in_batch` (the Trainer's) stays a tensor: no host sync
    divisor = 1 if reduction == "sum" else mean_divisor(num_items_in_batch, num_valid, h.device)
    z_scale = 1.0 / (divisor.to(compute) if isinstance(divisor, torch.Tensor) else divisor)  # int tensor: not float32
    scale = z_scale
    if class_rows is not None and reduction == "mean" and num_items_in_batch is None:  # torch's Σ_i a[y_i]
        total = _kept(class_rows, keep).sum()
        scale = 1.0 / torch.where(total > 0, total, torch.ones_like(total))
    if y.numel() == 0:  # every row ignored: a zero loss that still reaches every input
        zero = (hidden.sum() + weight.sum() + (0 if bias is None else bias.sum())).to(compute) * 0.0
        return output(
            zero, zero.detach(), hidden.new_zeros(0, dtype=compute) if want_lse else None, y.new_zeros(0, 2),
            hidden.new_zeros(0, dtype=compute) + zero,
        )  # fmt: skip
    if not needs_grad:  # evaluation: the loss alone (`eval_chunk`)
        losses, _, lse, pred, ent = _run(
            h, w, b, y, t, opts.with_scale(s), eval_chunk, gemm, want_lse=want_lse, want_pred=want_pred,
            want_ent=return_entropy, kernel=kernel,
        )  # fmt: skip
        return output(*_total(losses, lse, keep, class_rows, scale, z_scale, opts.z_loss), lse, pred, ent)
    if return_entropy:  # the per-row path (its backward recomputes the chunks, H's gradient with them)
        # rows a_i · (scale / z_scale) · loss_i + λ lse_i², summed × z_scale: the scalar path's two divisors
        rows, lse, pred, ent = per_row(None if class_rows is None else class_rows * (scale / z_scale))
        z_term = rows.new_zeros(()) if not opts.z_loss else (_kept(lse.square(), keep).sum() * z_scale * z_loss)
        return output(_kept(rows, keep).sum() * z_scale, z_term.detach(), lse, pred, ent)
    out = _FusedLinearCEScalar.apply(
        h, w, b, t, s, y, scale, opts, chunk, gemm, keep, weight_grad, class_rows, z_scale, want_lse, want_pred,
        kernel,
    )  # fmt: skip
    return output(*out) if want_aux else output(out, None, None, None)


def sharded_loss(
    rows: tuple[torch.Tensor, torch.Tensor, torch.Tensor],
    shard: VocabShard,
    bias: torch.Tensor | None,
    shape,
    opts: ChunkOptions,
    *,
    target_logit: torch.Tensor | None,
    returns: tuple[str, ...],
    out_dtype: torch.dtype,
    reduction: str,
    ignore_index: int,
    num_items_in_batch,
    chunk_size: int | None,
    budget: int | None = None,
):
    """`chunked_loss` of a vocabulary-sharded weight (hf_heads.losses.vocab_parallel) on its `sharded_rows` (h, y,
    valid) under the options `opts` (the column scale this process's s_r), with the same values as one process;
    `chunk_size` rows per chunk, or `budget` bytes of each chunk's (rows, V_r) logits."""
    check_reduction(reduction)
    _, _, _, class_weight, _ = cross_entropy_options(opts.criterion)
    if class_weight is not None:
        check_class_weight(class_weight, shard.num_classes, opts.label_smoothing)
    h, y, valid = rows
    return_entropy = "entropy" in returns
    want_pred = 2 if "rank" in returns or "top_k_rank" in returns else int("predictions" in returns)
    target_logit = None if target_logit is None else target_logit.reshape(-1)
    inputs = (h, shard.local, bias, opts.column_scale, target_logit)
    wants_grad = torch.is_grad_enabled() and any(x is not None and x.requires_grad for x in inputs)
    if wants_grad and opts.criterion.softmax and reduction != "none" and not return_entropy:
        # a training step: the row weights of the reduction are known, so each chunk's gradient is computed in the
        # forward pass (no chunk recomputed in the backward)
        weights, z_weights = sharded_row_weights(
            y, valid, class_weight, reduction, num_items_in_batch, compute_dtype(h)
        )
        loss, lse, pred = sharded_cross_entropy(
            h, y, shard, bias, weights, z_weights, opts, target_logit=target_logit, want_pred=want_pred,
            chunk_size=chunk_size, budget=budget,
        )  # fmt: skip
        z_term, ent = (opts.z_loss * z_weights * lse.square()).sum(), None
    else:
        losses, lse, pred, ent = vocab_parallel_per_row(
            h, y, shard, bias, opts, target_logit=target_logit, want_pred=want_pred, chunk_size=chunk_size,
            want_ent=return_entropy, budget=budget,
        )  # fmt: skip
        loss, z_term = reduce_sharded(
            losses, lse, y, valid, shape, reduction=reduction, num_items_in_batch=num_items_in_batch,
            z_loss=opts.z_loss, class_weight=class_weight,
        )  # fmt: skip
    loss = loss.to(out_dtype)
    if not ("z_loss" in returns or "lse" in returns or want_pred or return_entropy):
        return loss
    lse_out = None if not opts.criterion.softmax else reduce_rows(lse.detach(), valid, shape, "none", keep=valid)
    predictions = accuracy = rank = entropy = None
    if want_pred:
        predictions = torch.where(valid, pred[:, 0], ignore_index).reshape(shape)
        accuracy = ((pred[:, 0] == y) & valid).sum() / valid.sum().clamp_min(1)
        if want_pred > 1:
            ranks = pred[:, 1] if "rank" in returns or opts.top_k is None else pred[:, 1].clamp_max(opts.top_k)
            rank = torch.where(valid, ranks, -1).reshape(shape)
    if return_entropy:  # differentiable: 0 on ignored rows
        entropy = reduce_rows(ent, valid, shape, "none", keep=valid).to(out_dtype)
    return LossResult(loss, z_term.to(out_dtype), lse_out, predictions, accuracy, rank, entropy)


def penalised(out: LossResult, beta: float, target, reduction: str, ignore_index: int, num_items_in_batch, returns):
    """The confidence penalty (Pereyra et al. 2017): the loss of `out` minus β times its rows' entropy H, reduced as
    the loss ("mean" divides by `num_items_in_batch` or the labelled rows, whatever the class weights); the loss, or
    `out` with it when `returns` asks for extras."""
    entropy = out.entropy
    if reduction == "none":
        loss = out.loss - beta * entropy.reshape(out.loss.shape)
    else:
        total = entropy.sum()
        if reduction == "mean":
            counted = (target != ignore_index).sum()
            total = total / mean_divisor(num_items_in_batch, counted, total.device)
        loss = out.loss - beta * total.to(out.loss.dtype)
    if not returns:
        return loss
    return out._replace(loss=loss, entropy=entropy if "entropy" in returns else None)


def _in_labels_shape(values: torch.Tensor, valid: torch.Tensor, keep, shape, fill: int) -> torch.Tensor:
    """Per-row integers of the computed rows (compacted on a CPU, every row with `keep` on an accelerator) in the
    labels' shape, `fill` on the ignored rows."""
    if keep is not None:
        return torch.where(keep, values, fill).reshape(shape)
    if values.shape[0] == valid.numel():
        return values.reshape(shape)
    return values.new_full((valid.numel(),), fill).masked_scatter(valid.reshape(-1), values).reshape(shape)


def check_no_kernel(kernel) -> None:
    """Refuse a chunk kernel named for a vocabulary-sharded weight (its loss runs in eager PyTorch per process)."""
    refuse_kernel(
        kernel,
        "is not used with a vocabulary-sharded weight, whose loss runs in eager PyTorch on each process's rows "
        "(hf_heads.losses.vocab_parallel): leave kernel unset",
    )


def check_class_weight(class_weight: torch.Tensor, num_classes: int, label_smoothing: float = 0.0) -> None:
    """Refuse class weights of the wrong shape, negative or non-finite ones (read on the host on a CPU; on an
    accelerator an asynchronous device assertion) and class weights with label smoothing."""
    if not isinstance(class_weight, torch.Tensor) or class_weight.shape != (num_classes,):
        shape = tuple(class_weight.shape) if isinstance(class_weight, torch.Tensor) else type(class_weight).__name__
        raise OptionError("class_weight", shape, f"must be a tensor of shape ({num_classes},): one weight per class")
    if label_smoothing:
        raise OptionError(
            "class_weight", "a tensor", f"cannot be combined with label_smoothing={label_smoothing} (not implemented)"
        )
    bad = ~torch.isfinite(class_weight) | (class_weight < 0)
    if not host_reads_are_free(class_weight.device):
        torch._assert_async(~bad.any(), "class_weight: every weight must be finite and >= 0")
    elif bool(bad.any()):
        raise OptionError("class_weight", float(class_weight[bad][0]), "every weight must be finite and >= 0")
