"""Chunked ("fused") linear cross-entropy that never materialises the (N, V) logits.

This is the memory core every discrete head shares. For rows i (tokens) and classes c it
computes the softmax cross-entropy of the logits

    z[i, c] = h[i] · w[c] + b[c]            for c != y_i
    z[i, y_i] = t[i]                        (a replaced target logit, when `target_logit` is given)

over chunks of rows, and computes the gradients with respect to h, w, b and t in the same pass
(the idea of fused linear cross-entropy: Liger-Kernel, Cut Cross-Entropy, torch 2.13's
`F.linear_cross_entropy`). Replacing the target logit is what makes every large-margin softmax
(margin paper, eq. 13–14) fit the same kernel: the margin only changes l(y_i, i), and the norm
scalings g(i), f(c) are row/column rescalings of h and w done by the caller.

`softcap` applies an architecture's final logit soft-capping z -> cap·tanh(z / cap) (Gemma 2 / 3) to every logit
of the chunk, the replaced target logit included (a margin acts on the raw logit, the cap on the result), and
multiplies the gradient by its derivative 1 − tanh²; `logit_multiplier` (the checkpoint's logit scale) multiplies h
and b before the chunks.

`top_k` restricts the log-sum-exp to each row's k largest logits (sparse-softmax paper, eq. 5). Its
gradient reaches only those k logits and the target's, so the backward gathers / scatters k+1 rows of W
per token instead of two dense (n, V) x (V, H) products: the sparse loss costs one matmul, not three.

`criterion="bce"` / `"mse"` put the sampling paper's full criteria over sigmoid outputs on the same logits and chunks:
BCE (eq. 3) −log σ(z_y) − Σ_{c≠y} log(1 − σ(z_c)) = Σ_c softplus(z_c) − z_y, MSE (eq. 1) Σ_c (σ(z_c) − δ_cy)².

The per-chunk work is a chunk kernel (hf_heads.losses.kernels, hf_heads.losses.triton_kernel), chosen by the chunk
engine (hf_heads.losses.chunks). Memory: one (chunk, V) block at a time plus a float32 (V, H) gradient accumulator,
instead of the naive (N, V) logits and their gradient.

Reductions: "sum" and "mean" return a scalar and compute all gradients during the forward pass
(three matmuls, like the naive path) — or, when no gradient is needed (evaluation, `torch.no_grad()`), the
loss alone (one matmul); "none" returns per-row losses and recomputes each chunk in the backward pass,
weighted by the incoming gradient.
"""

from __future__ import annotations

import dataclasses
import weakref

import torch

from hf_heads.losses._rows import (
    autocast_off,
    check_reduction,
    compute_dtype,
    gemm_dtype,
    host_reads_are_free,
    linear_rows,
    mean_divisor,
    reduce_rows,
)
from hf_heads.losses._rows import check_labels as check_labels  # re-exported: hf_heads.losses.check_labels
from hf_heads.losses._rows import loss_dtype as _loss_dtype
from hf_heads.losses.chunks import (
    ChunkKernel,
    ChunkOptions,
    Grads,
    chunk_kernel,
    eval_rows_per_chunk,
    map_chunks,
    refuse_kernel,
    rows_per_chunk,
)
from hf_heads.losses.parts import Criterion, CrossEntropy, LossResult, make_criterion
from hf_heads.losses.transforms import check_transform
from hf_heads.losses.vocab_parallel import (
    VocabShard,
    reduce_sharded,
    sharded_cross_entropy,
    sharded_row_weights,
    sharded_rows,
    vocab_parallel_rows,
    vocab_shard,
)
from hf_heads.validation import OptionError


class WeightGradSlot:
    """Where the fused loss leaves a weak reference to the (V, H) gradient of its weight that its backward hands to
    autograd, for the backward of whatever produced that weight argument (the margin scorer's norms and target
    rows, hf_heads.losses.scorer) to recognise the tensor it receives as that buffer and add its own part into it in
    place, instead of into a second (V, H) buffer that autograd would then add. Only the tensor the fused loss
    created is ever recognised: any other gradient (of a weight used elsewhere too, after autograd summed it out of
    place) is not, and is left alone."""

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
    """(losses (N,), gradients, lse (N,) or None, predictions (N, want_pred) or None, entropies (N,) or None): the
    per-row losses and, when `row_weight` (N,) is given, the gradients (h, w, b, t, s) of Σ_i row_weight_i · loss_i (+
    Σ_i z_weight_i · λ · lse_i² with the z-loss λ = `opts.z_loss`; `z_weight` None: the row weights) in the dtypes of
    h, w, b, t and the column scale s = `opts.column_scale`, chunk by chunk through the chunk engine; without it the
    loss alone (one matmul per chunk). The rows' log-sum-exp when `want_lse` or λ > 0 (the losses never include λ ·
    lse²), their argmax (and target rank: `want_pred` 2, or 1 without) (the kernels' `pred`) when `want_pred`: from the
    same pass, no second product with W. The products run in `gemm` (h and w cast to it once per call). With s the
    kernels accumulate A = Σ d zᵀ h, applying s in each chunk or, in training where `_scale_by_copy` says so, through
    one copy s ∘ w; then d w = s ∘ A (in place) and d s_c = A_c · w_c. `needs`: which of (h, w, b, t, s) want a
    gradient (autograd's `needs_input_grad`; None: all); when neither w nor s does (a frozen output layer: LoRA, linear
    probing) the (V, H) accumulator and its product are skipped, d w is None. Each row's entropy when `want_ent`; with
    `ent_weight` (N,) the gradients also take those of Σ_i ent_weight_i · H_i. `kernel`: the chunk kernel that does
    each chunk's work (`chunked_loss` resolves it)."""
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
    grad_s = None
    if scale is not None and grad_w is not None:  # grad_w holds A = d(s ∘ w): d s_c = A_c · w_c, then d w = s ∘ A
        grad_s = row_dots(grad_w, w).to(scale.dtype)  # (V,)
        grad_w.mul_(scale.to(accumulate)[:, None])
    if not wants_w:
        grad_w = None  # A, if any, was for d s only
    grads = (grad_h.to(h.dtype), None if grad_w is None else grad_w.to(w.dtype), grad_b, grad_t, grad_s)
    return losses, grads, lse, pred, ent


def _scale_by_copy(rows: int, hidden_size: int, gemm: torch.dtype, workspace: torch.dtype) -> bool:
    """Whether the training products take the column scale s by one scaled copy s ∘ w (V, H) in the `gemm` dtype
    instead of a pass over each chunk's (rows, V) gradient block (d z ∘ s for d h): when the copy takes at most half
    the memory of the chunk workspace ((rows, V) in the `workspace` dtype), so a word-norm head adds little to the
    memory of the softmax head, and its rows amortise the copy. On 2 CPU cores, arc + log-unigram + max-norm against
    hf_heads softmax, medians of 30 steps: 1.095× -> 1.059× at make demo's size (N = 2048, H = 128, V = 14,857). At
    N = 4096, H = 512, V = 50k in float32 (no copy: it would take one more workspace) the copy measured 1.045× against
    1.07×, but 364–388 MiB against ~280 MiB of peak memory (0.14–0.15× the naive step's)."""
    return 2 * hidden_size * gemm.itemsize <= rows * workspace.itemsize


def row_dots(a: torch.Tensor, b: torch.Tensor, block_rows: int = 1024) -> torch.Tensor:
    """(a_c · b_c) for every row c of a (V, H) and b (V, H) (b cast to a's dtype), (V,), in blocks of rows with one
    small temporary: a fresh (V, H) product (or `torch.bmm` of V (1, H) x (H, 1) products) took 2.5–3× as long on a
    CPU, the page faults of the new (V, H) buffer included. On an accelerator: one batched product (its caching
    allocator has no page faults to save)."""
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
    `weight` · a_i with `class_rows` a (N,) (the class weight of each row's target; None: 1), u_i = `z_scale`;
    `keep` (N,): the rows that count (None: all), the others computed with weight 0; `s`: the column scale (V,) or
    None. `want_lse` / `want_pred`: the outputs are (loss, z-loss term, lse (N,) or None, predictions (N,), (0,)
    when not wanted), the last three without gradient.

    The backward hands the forward's gradients over (no reference kept, so autograd accumulates into them or keeps
    them as `.grad` without a copy of the (V, H) one) and scales them in place by d output. A second backward
    through the same graph (`retain_graph=True`, gradcheck) finds them handed over and computes them again from the
    saved inputs."""

    @staticmethod
    def _row_weights(h, weight, keep, class_rows, z_scale, opts: ChunkOptions):
        """(r (N,), u (N,) or None): the row weights of the losses and of the z-loss (None: r, when no class weight
        makes them differ)."""
        dtype = torch.promote_types(h.dtype, torch.float32)

        def rows(scale):
            if isinstance(scale, torch.Tensor):  # 1 / num_items_in_batch as a tensor: no host sync
                out = scale.to(device=h.device, dtype=dtype).expand(h.shape[0])
            else:
                out = torch.full((h.shape[0],), scale, dtype=dtype, device=h.device)
            return out if keep is None else out * keep

        row_weight = rows(weight)
        if class_rows is None:
            return row_weight, None
        z_weight = rows(z_scale) if opts.z_loss > 0 else None
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
        if grads is None:  # a second backward through this graph: the first one took them
            h, w, b, t, s, y, keep, class_rows = ctx.saved_tensors
            weight, opts, chunk_size, gemm, z_scale, kernel = ctx.rerun
            row_weight, z_weight = _FusedLinearCEScalar._row_weights(h, weight, keep, class_rows, z_scale, opts)
            needs = ctx.needs_input_grad[:5]
            _, grads, *_ = _run(
                h, w, b, y, t, opts.with_scale(s), chunk_size, gemm, row_weight, needs, z_weight, kernel=kernel
            )
        if not (host_reads_are_free(grad_out.device) and bool(grad_out == 1)):  # d loss / d loss = 1: nothing to do
            grads = [None if g is None else g.mul_(grad_out.to(g.dtype)) for g in grads]
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


class _FusedLinearCERows(torch.autograd.Function):
    """Per-row losses a_i · loss_i + λ · lse_i² (a: `class_rows`, None: 1; λ: the z-loss); the backward pass
    recomputes each chunk weighted by the incoming gradient. `want_lse` / `want_pred` / `want_ent`: (losses, lse or
    None, predictions, entropies or None), the lse and predictions without gradient ((0,) predictions when not
    wanted), the entropies H_i of the rows' softmax with theirs (the backward's recompute takes d H as the entropy
    weights of the kernels)."""

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
) -> torch.Tensor | LossResult:
    """The chunked loss of `hidden @ weight.T + bias` (with an optional replaced target logit and column scale): what
    the `Full` candidates of `hf_heads.losses.output_loss` run, and the chunk kernels' contract.

    Args:
        hidden: (N, H) (any leading shape is flattened).
        weight: (V, H); bias: (V,) or None.
        target: (N,) class ids, `ignore_index` rows contribute nothing.
        criterion: a `Criterion` (hf_heads.losses.parts) or its name: `CrossEntropy` (its `top_k`: the log-sum-exp
            over each row's k largest logits only (sparse softmax); `label_smoothing` as in `F.cross_entropy`, over the
            top-k support with `top_k`; `z_loss` and `class_weight` below; `confidence_penalty` β: the loss minus β
            times the entropy of each row's softmax, reduced as the loss), or the sampling paper's full criteria over
            sigmoid outputs, `BinaryCrossEntropy` (eq. 3, Σ_c softplus(z_c) − z_y) and `MeanSquaredError` (eq. 1,
            Σ_c (σ(z_c) − δ_cy)²), with the same chunks, kernels and gradients in the forward pass. None: plain
            cross-entropy.
        target_logit: (N,) value that replaces z[i, target_i] (e.g. a margin logit), or None.
        reduction: "mean" (over non-ignored rows, or divided by `num_items_in_batch`), "sum", "none".
        chunk_size: rows per chunk (default: the chunk engine's budget, 32 MiB of float32 logits, at least 512 rows).
        logit_multiplier: the logits are logit_multiplier · (hidden @ weight.T + bias) (a replaced target logit is
            taken as given: multiply it yourself); the checkpoint's output transform (hf_heads.losses.transforms).
        softcap: then every logit z (the replaced target's too) becomes softcap · tanh(z / softcap).
        column_scale: (V,) s, or None: the products become s_c · (hidden_i · weight_c) before the bias (a margin
            head's word-norm scaling, eq. 13's f(c) / ‖W_c‖), applied to each chunk's logits and gradient instead of
            to a scaled (V, H) copy of the weight; its gradient is computed too.
        weight_grad: a `WeightGradSlot` that learns which tensor is the gradient of `weight` this loss hands to
            autograd (the margin loss adds its norms' gradient into it in place), or None.
        criterion.z_loss: λ ≥ 0: each row also adds λ · lse_i², lse_i the log-sum-exp of its logits (of its top k with
            `top_k`; after the replaced target logit and the soft-cap) — PaLM's auxiliary z-loss, Liger-Kernel's
            `lse_square_scale`, which keeps the softmax normaliser near 1 under bf16. Its gradient
            2λ · lse_i · p_ic is added inside every chunk kernel (no second pass over W). "mean" divides its sum by
            the number of non-ignored rows (or `num_items_in_batch`), whatever the class weights.
        criterion.class_weight: (V,) a weight ≥ 0 per class, as `F.cross_entropy(weight=...)`: row i's cross-entropy is
            multiplied by a[target_i]; "mean" divides by Σ_i a[target_i] over the non-ignored rows (torch's
            normalisation; 1 when that sum is 0) — or by `num_items_in_batch` when given: the Trainer's count of
            target tokens over the accumulated batch, so that gradient accumulation stays exact (torch's weighted
            mean of each micro-batch would not add up). Not with `label_smoothing` (refused: torch weights the
            smoothing term per class, which the chunk kernels do not compute).
        returns: what to return beside the loss, as a `LossResult` (hf_heads.losses.parts.RETURNS):
            "z_loss" / "lse": the z-loss term alone (reduced as the loss; no gradient) and each row's log-sum-exp in
            the shape of `target` (0 on ignored rows; no gradient), e.g. to log them;
            "predictions": each row's predicted class and the token accuracy, from the same pass as the loss (no
            second product with W): the argmax of the row's logits with the target's own logit (bias, column
            scale, soft-cap; a replaced target logit — a margin — does not take part), the lowest index winning a
            tie as `torch.argmax`; `ignore_index` on ignored rows. `token_accuracy` is the fraction of the
            non-ignored rows whose prediction is their label.
            "rank": the predictions, and `target_rank`: each row's count of classes ranked before its label
            in that order (-1 on ignored rows), so that `accuracy_at(k)` is the top-k accuracy (the eager kernel
            counts them in passes of their own over each chunk's logits; the compiled and Triton kernels inside
            theirs).
            "entropy": each row's entropy H_i = lse_i − Σ_c p_ic z_ic of
            the softmax the loss takes (over the top k with `top_k`; with the replaced target logit and the soft-cap),
            in the shape of the labels (0 on ignored rows), from the same pass as the loss and differentiable (an
            entropy bonus or penalty in RL or confidence-penalty training): its gradient d H_i / d z_ic =
            p_ic (Σ_d p_id z_id − z_ic) is computed chunk by chunk in the backward pass, which then recomputes the
            chunks (one more product with W than the loss alone). Cross-entropy only.
        loss_dtype: the dtype of the returned loss (and z-loss term); None: torch's rule for
            `F.cross_entropy(hidden @ weight.T + bias)`: float32 under autocast, else the dtype of hidden, weight and
            bias promoted (bfloat16 for a model cast to bfloat16). The heads pass float32, as transformers' loss
            functions upcast the logits.
        kernel: the chunk kernel that computes each chunk (`hf_heads.losses.CHUNK_KERNELS`: "eager", "compiled",
            "triton", "triton-half", or a `ChunkKernel`); every kernel computes the same loss. None: the environment
            variable HF_HEADS_CHUNK_KERNEL when set, else the automatic choice ("triton" for CUDA tensors where
            triton imports, else "eager"); a head passes the kernel its `chunk_kernel` option names. A
            vocabulary-sharded weight runs its own eager per-process loss: a kernel named here is refused there.
    Returns:
        a scalar, or for reduction="none" the per-row losses in the shape of `target` (as `F.cross_entropy`: (B, T)
        for (B, T) labels, () for one row; 0 on ignored rows). Accumulated in float32 (float64 inputs stay float64
        for gradcheck) and rounded once to `loss_dtype`. With `returns`, a `LossResult`.
    """
    check_transform(logit_multiplier, softcap)
    criterion = make_criterion(criterion)
    top_k, label_smoothing, z_loss, class_weight, penalty = cross_entropy_options(criterion)
    return_z_loss = "z_loss" in returns or "lse" in returns
    return_predictions, return_target_rank = "predictions" in returns or "rank" in returns, "rank" in returns
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
            kernel=kernel,
        )  # fmt: skip
        return penalised(loss, penalty, target, reduction, ignore_index, num_items_in_batch, returns)
    out_dtype = loss_dtype or _loss_dtype(hidden, weight, bias)
    shard = vocab_shard(weight)
    if shard is not None:  # W a DTensor sharded on its rows (tensor parallelism): hf_heads.losses.vocab_parallel
        check_no_kernel(kernel)
        if logit_multiplier != 1.0:
            hidden, bias = hidden * logit_multiplier, None if bias is None else bias * logit_multiplier
        rows = sharded_rows(hidden, target, shard, ignore_index)
        return sharded_loss(
            rows, shard, shard.rows(bias), target.shape, target_logit=target_logit,
            column_scale=shard.rows(column_scale), top_k=top_k, label_smoothing=label_smoothing, softcap=softcap,
            criterion=criterion, z_loss=z_loss, class_weight=class_weight, return_z_loss=return_z_loss,
            return_predictions=return_predictions, return_target_rank=return_target_rank,
            return_entropy=return_entropy, out_dtype=out_dtype, reduction=reduction, ignore_index=ignore_index,
            num_items_in_batch=num_items_in_batch, chunk_size=chunk_size,
        )  # fmt: skip
    h, w, b, y, valid = linear_rows(hidden, weight, bias, target, ignore_index, reduction, keep_dtype=True)
    kernel = chunk_kernel(kernel, h.device)
    if class_weight is not None:
        check_class_weight(class_weight, w.shape[0], label_smoothing)
    gemm, compute = gemm_dtype(h, w), compute_dtype(h, w)
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
    chunk = chunk_size or rows_per_chunk(h.shape[0], w.shape[0], device=h.device)
    opts = ChunkOptions(top_k, label_smoothing, softcap, criterion=criterion, z_loss=float(z_loss))
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
                rank = _in_labels_shape(pred[:, 1], valid, keep, target.shape, -1)
            hits = pred[:, 0] == y if keep is None else (pred[:, 0] == y) & keep
            count = num_valid.clamp_min(1) if isinstance(num_valid, torch.Tensor) else max(num_valid, 1)
            accuracy = hits.sum() / count
        return LossResult(loss, z_term.to(out_dtype), lse, predictions, accuracy, rank, entropy)

    def per_row(class_rows):  # (rows a_i · loss_i + λ lse_i², lse, predictions, entropies), recomputed in backward
        out = _FusedLinearCERows.apply(
            h, w, b, t, s, y, opts, chunk, gemm, weight_grad, class_rows, want_lse, want_pred, return_entropy, kernel
        )
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
    needs_grad = torch.is_grad_enabled() and any(x is not None and x.requires_grad for x in (h, w, b, t, s))
    if not needs_grad:  # evaluation: the loss alone, one matmul per chunk instead of three, in larger chunks
        eval_chunk = chunk_size or eval_rows_per_chunk(h.shape[0], w.shape[0], chunk)
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
    *,
    target_logit: torch.Tensor | None,
    column_scale: torch.Tensor | None,
    top_k: int | None,
    label_smoothing: float,
    softcap: float | None,
    criterion: Criterion,
    z_loss: float,
    class_weight: torch.Tensor | None,
    return_z_loss: bool,
    return_predictions: bool,
    return_target_rank: bool,
    return_entropy: bool,
    out_dtype: torch.dtype,
    reduction: str,
    ignore_index: int,
    num_items_in_batch,
    chunk_size: int | None,
):
    """`chunked_loss` of a vocabulary-sharded weight (hf_heads.losses.vocab_parallel) on its
    `sharded_rows` (h, y, valid): the loss, or the `LossResult` of `return_z_loss` /
    `return_predictions` / `return_target_rank` / `return_entropy`, with the same values as one process."""
    check_reduction(reduction)
    if class_weight is not None:
        check_class_weight(class_weight, shard.num_classes, label_smoothing)
    h, y, valid = rows
    want_pred = 2 if return_target_rank else int(return_predictions)
    target_logit = None if target_logit is None else target_logit.reshape(-1)
    inputs = (h, shard.local, bias, column_scale, target_logit)
    wants_grad = torch.is_grad_enabled() and any(x is not None and x.requires_grad for x in inputs)
    if wants_grad and criterion.softmax and reduction != "none" and not return_entropy:
        # a training step: the row weights of the reduction are known, so each chunk's gradient is computed in the
        # forward pass (no chunk recomputed in the backward)
        weights, z_weights = sharded_row_weights(
            y, valid, class_weight, z_loss, reduction, num_items_in_batch, compute_dtype(h)
        )
        loss, lse, pred = sharded_cross_entropy(
            h, y, shard, bias, weights, z_weights, target_logit=target_logit, column_scale=column_scale,
            top_k=top_k, label_smoothing=label_smoothing, softcap=softcap, want_pred=want_pred, chunk_size=chunk_size,
        )  # fmt: skip
        z_term, ent = (z_weights * lse.square()).sum(), None
    else:
        losses, lse, pred, ent = vocab_parallel_rows(
            h, y, shard, bias, target_logit=target_logit, column_scale=column_scale, top_k=top_k,
            label_smoothing=label_smoothing, softcap=softcap, want_pred=want_pred, chunk_size=chunk_size,
            criterion=criterion, want_ent=return_entropy,
        )  # fmt: skip
        loss, z_term = reduce_sharded(
            losses, lse, y, valid, shape, reduction=reduction, num_items_in_batch=num_items_in_batch, z_loss=z_loss,
            class_weight=class_weight,
        )  # fmt: skip
    loss = loss.to(out_dtype)
    if not (return_z_loss or want_pred or return_entropy):
        return loss
    lse_out = None if not criterion.softmax else reduce_rows(lse.detach(), valid, shape, "none", keep=valid)
    predictions = accuracy = rank = entropy = None
    if want_pred:
        predictions = torch.where(valid, pred[:, 0], ignore_index).reshape(shape)
        accuracy = ((pred[:, 0] == y) & valid).sum() / valid.sum().clamp_min(1)
        if want_pred > 1:
            rank = torch.where(valid, pred[:, 1], -1).reshape(shape)
    if return_entropy:  # differentiable: 0 on ignored rows
        entropy = reduce_rows(ent, valid, shape, "none", keep=valid).to(out_dtype)
    return LossResult(loss, z_term.to(out_dtype), lse_out, predictions, accuracy, rank, entropy)


def cross_entropy_options(criterion: Criterion) -> tuple[int | None, float, float, torch.Tensor | None, float]:
    """(top_k, label_smoothing, z_loss, class_weight, confidence_penalty) of a cross-entropy criterion (the chunk
    kernels' options), the neutral values for a sigmoid criterion."""
    if isinstance(criterion, CrossEntropy):
        c = criterion
        return c.top_k, c.label_smoothing, c.z_loss, c.class_weight, c.confidence_penalty
    return None, 0.0, 0.0, None, 0.0


def penalised(out: LossResult, beta: float, target, reduction: str, ignore_index: int, num_items_in_batch, returns):
    """The confidence penalty (Pereyra et al. 2017): the loss of `out` minus β times its rows' entropy H (the
    `LossResult` asked with "entropy"), reduced as the loss: per row for "none", summed for "sum", divided by
    `num_items_in_batch` or the labelled rows for "mean" (whatever the class weights); the loss, or `out` with it
    when `returns` asks for extras (the entropy only where asked)."""
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
