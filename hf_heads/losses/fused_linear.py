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

Memory: one (chunk, V) block at a time plus a float32 (V, H) gradient accumulator, instead of
the naive (N, V) logits and their gradient.

Reductions: "sum" and "mean" return a scalar and compute all gradients during the forward pass
(three matmuls, like the naive path) — or, when no gradient is needed (evaluation, `torch.no_grad()`), the
loss alone (one matmul); "none" returns per-row losses and recomputes each chunk in the backward pass,
weighted by the incoming gradient.
"""

from __future__ import annotations

import torch

from hf_heads.losses._rows import (
    autocast_off,
    compute_dtype,
    gemm_dtype,
    host_reads_are_free,
    linear_rows,
    mean_divisor,
    reduce_rows,
)
from hf_heads.losses._rows import check_labels as check_labels  # re-exported: hf_heads.losses.check_labels
from hf_heads.losses.chunks import (
    CRITERIA,
    ChunkKernel,
    ChunkOptions,
    Grads,
    chunk_kernel,
    eval_rows_per_chunk,
    map_chunks,
    register_kernel,
    rows_per_chunk,
)
from hf_heads.losses.transforms import check_transform
from hf_heads.validation import OptionError, check_choice


def _capped_slope(z: torch.Tensor, softcap: float) -> torch.Tensor:
    """d cap·tanh(x / cap) / dx at the capped values z = cap·tanh(x / cap): 1 − (z / cap)²."""
    return 1.0 - (z / softcap).square()


def _raw_logits(h, w, b, out: torch.Tensor | None = None, col_scale: torch.Tensor | None = None) -> torch.Tensor:
    """s ∘ (h wᵀ) + b (n, V): the product in the dtype of h and w (half precision accumulates in float32), then
    float32 (float64 for float64 inputs) for the softmax math, the column scale s (V,) and the bias applied there.
    `out`: a (n, V) buffer of that dtype to write into (used when h and w have its dtype)."""
    if out is not None and h.dtype == w.dtype == out.dtype:
        z = torch.mm(h, w.T, out=out)
    else:
        z = h @ w.T
        z = z.to(torch.promote_types(z.dtype, torch.float32))
    if col_scale is not None and b is not None:
        torch.addcmul(b, z, col_scale, out=z)  # s ∘ z + b in one pass
    elif col_scale is not None:
        z *= col_scale
    elif b is not None:
        z += b
    return z


def _linear_grads(
    grad_z: torch.Tensor,
    h,
    w,
    grads: Grads,
    row_weight: torch.Tensor | None = None,
    col_scale: torch.Tensor | None = None,
) -> None:
    """d b += rᵀ d z, d w += d zᵀ · diag(r) h and d h (n, H) = diag(r) (d z ∘ s) · w into `grads.h`, for the row
    weights r (n,) (None: already in d z) and the column scale s (V,) (None: ones; `grads.w` then accumulates the
    gradient of the scaled weight s ∘ w, which `_run` turns into those of w and s); the weights scale (n, H) blocks,
    never the (n, V) one; the products in the dtype of h and w (d z rounded to it once), accumulators in float32.
    `grad_z` may be overwritten."""
    if grads.b is not None:
        grads.b.add_(grad_z.sum(0) if row_weight is None else row_weight.to(grad_z.dtype) @ grad_z)
    g = grad_z if grad_z.dtype == w.dtype else grad_z.to(w.dtype)  # (n, V)
    if col_scale is None:
        torch.mm(g, w, out=grads.h)  # (n, H), written in place
    h_r = h if row_weight is None else h * row_weight.to(h.dtype)[:, None]  # (n, H)
    if grads.w.dtype == g.dtype:
        grads.w.addmm_(g.T, h_r)  # (V, H) accumulated without a temporary
    else:
        grads.w.add_(g.T @ h_r)  # a half-precision (V, H) product added to the float32 accumulator
    if col_scale is not None:  # d h from d z ∘ s, after d w took the unscaled d z
        torch.mm(g.mul_(col_scale.to(g.dtype)), w, out=grads.h)
    if row_weight is not None:
        grads.h.mul_(row_weight.to(grads.h.dtype)[:, None])


@register_kernel
class EagerKernel(ChunkKernel):
    """The chunk in eager PyTorch: one (n, V) logits buffer, turned into the log-probabilities and then the gradient
    in place. The full-support log-softmax is one row-wise pass (`torch.log_softmax(z, out=z)`: each row's maximum,
    sum and result while the row sits in cache), so the block is read from memory twice (log-softmax, exp) between
    the GEMMs instead of once per elementwise operation."""

    name = "eager"

    @staticmethod
    def logits(h, w, b, y, t, opts: ChunkOptions, out: torch.Tensor | None = None):
        """z (n, V): the products with the column scale and bias, the target's logit replaced by t, soft-capped (in
        `out` when given), and the row indices (n,)."""
        z = _raw_logits(h, w, b, out, opts.column_scale)  # (n, V) float32 (float64 for float64 inputs)
        rows = torch.arange(z.shape[0], device=z.device)
        if t is not None:
            z[rows, y] = t
        if opts.softcap is not None:
            z.div_(opts.softcap).tanh_().mul_(opts.softcap)
        return z, rows

    @staticmethod
    def _selects(opts: ChunkOptions, num_classes: int) -> bool:
        """Whether the top-k support applies (k < V)."""
        return opts.top_k is not None and opts.top_k < num_classes

    @staticmethod
    def log_softmax_(z, rows, y, smooth: float) -> torch.Tensor:
        """z (n, V) becomes log p (n, V) in place; the losses (n,): −log p_iy, with label smoothing ε
        (1 − ε)(−log p_iy) − ε mean_c log p_ic, i.e. (1 − ε)(lse_i − z_iy) + ε(lse_i − mean_c z_ic)."""
        torch.log_softmax(z, dim=1, out=z)  # one row-wise pass, in place
        loss = -z[rows, y]  # (n,)
        if smooth:
            loss = (1 - smooth) * loss - smooth * z.mean(dim=1)
        return loss

    @staticmethod
    def top_k_loss(z, rows, y, top_k: int, smooth: float):
        """The sparse-softmax losses (n,) over each row's top k of z (n, V) (sparse-softmax paper, eq. 5), with the
        kept values and columns (n, k) and their log-sum-exp (n,)."""
        vals, idx = torch.topk(z, top_k, dim=1)  # (n, k)
        lse = torch.logsumexp(vals, dim=1)  # (n,)
        loss = lse - z[rows, y]
        if smooth:
            loss = (1 - smooth) * loss + smooth * (lse - vals.mean(dim=1))
        return loss, vals, idx, lse

    @staticmethod
    def sigmoid_loss_(z, rows, y, criterion: str) -> torch.Tensor:
        """z (n, V) becomes σ(z) in place; the losses (n,) of the full BCE, Σ_c softplus(z_c) − z_y, or MSE,
        Σ_c σ(z_c)² − 2σ(z_y) + 1 (`ChunkOptions.criterion`)."""
        if criterion == "bce":
            loss = torch.nn.functional.softplus(z).sum(1) - z[rows, y]  # (n,)
            z.sigmoid_()
        else:
            z.sigmoid_()
            loss = torch.linalg.vector_norm(z, dim=1).square() - 2 * z[rows, y] + 1  # (n,)
        return loss

    def loss(self, h, w, b, y, t, opts):
        z, rows = self.logits(h, w, b, y, t, opts)
        if opts.criterion != "ce":
            return self.sigmoid_loss_(z, rows, y, opts.criterion)
        if self._selects(opts, z.shape[1]):
            return self.top_k_loss(z, rows, y, opts.top_k, opts.label_smoothing)[0]
        return self.log_softmax_(z, rows, y, opts.label_smoothing)

    def loss_and_grads(self, h, w, b, y, t, opts, row_weight, grads):
        sparse = self._selects(opts, w.shape[0]) and t is None and opts.criterion == "ce"
        return (self._sparse if sparse else self._dense)(h, w, b, y, t, opts, row_weight, grads)

    def _dense(self, h, w, b, y, t, opts, row_weight, grads: Grads):
        """d loss / d z (n, V) written over the logits buffer, then the three GEMMs."""
        z, rows = self.logits(h, w, b, y, t, opts, grads.logits)
        smooth, top_k = opts.label_smoothing, opts.top_k
        slope = None if opts.softcap is None else _capped_slope(z, opts.softcap)  # (n, V): d capped / d raw
        # d loss_i / d z_ic = p_ic - (1 - ε)[c = y_i] - ε / |support| (p: softmax over the row or over its top k)
        if opts.criterion != "ce":  # d / d z_ic: BCE σ_ic − δ; MSE 2(σ_ic − δ)σ_ic(1 − σ_ic) (δ: [c = y_i])
            loss = self.sigmoid_loss_(z, rows, y, opts.criterion)
            slope_mse = torch.addcmul(z, z, z, value=-1.0) if opts.criterion == "mse" else None  # σ(1 − σ)
            grad_z = z  # σ, over the logits buffer
            grad_z[rows, y] -= 1.0
            if slope_mse is not None:
                grad_z.mul_(slope_mse).mul_(2.0)
        elif self._selects(opts, z.shape[1]):
            loss, vals, idx, lse = self.top_k_loss(z, rows, y, top_k, smooth)
            grad_z = torch.zeros_like(z)
            grad_z.scatter_(1, idx, torch.exp(vals - lse[:, None]) - smooth / top_k)
        else:
            loss = self.log_softmax_(z, rows, y, smooth)
            grad_z = z.exp_()  # (n, V), over the logits buffer
            if smooth:
                grad_z -= smooth / z.shape[1]
        if opts.criterion == "ce":
            grad_z[rows, y] -= 1.0 - smooth
        if slope is not None:
            grad_z *= slope
        if grads.t is not None:
            grads.t.copy_(grad_z[rows, y] * row_weight.to(z.dtype))  # (n,)
            grad_z[rows, y] = 0.0  # the replaced entry does not depend on h · w_y
        _linear_grads(grad_z, h, w, grads, row_weight, opts.column_scale)  # the row weights on (n, H) blocks
        return loss

    def _sparse(self, h, w, b, y, t, opts, row_weight, grads: Grads):
        """top_k < V, no replaced target logit: only the k kept logits and the target's have a gradient, so it
        gathers / scatters k+1 rows of W per token instead of two dense (n, V) x (V, H) products."""
        z, rows = self.logits(h, w, b, y, t, opts, grads.logits)
        smooth, top_k = opts.label_smoothing, opts.top_k
        loss, vals, idx, lse = self.top_k_loss(z, rows, y, top_k, smooth)
        target_z = z[rows, y]  # (n,)
        coef = torch.exp(vals - lse[:, None])  # (n, k)
        if smooth:
            coef -= smooth / top_k
        cols = torch.cat([idx, y[:, None]], dim=1)  # (n, k+1); the target may repeat a kept column
        coef = torch.cat([coef, coef.new_full((coef.shape[0], 1), -(1.0 - smooth))], dim=1)
        if opts.softcap is not None:
            coef = coef * _capped_slope(torch.cat([vals, target_z[:, None]], dim=1), opts.softcap)
        coef = coef * row_weight.to(coef.dtype)[:, None]
        coef_h = coef if opts.column_scale is None else coef * opts.column_scale[cols]  # d z ∘ s for d h
        torch.bmm(coef_h[:, None, :].to(w.dtype), w[cols], out=grads.h[:, None, :])  # (n, 1, H)
        grads.w.index_add_(0, cols.reshape(-1), (coef[:, :, None] * h[:, None, :]).reshape(-1, h.shape[1]))
        if grads.b is not None:
            grads.b.index_add_(0, cols.reshape(-1), coef.reshape(-1))
        return loss


def _grad_logits(z, y, t, row_weight, top_k: int | None, smooth: float, softcap: float | None, criterion: str = "ce"):
    """Functional per-chunk math from the raw logits z (n, V) (bias added): (losses (n,), d loss / d z (n, V) weighted
    by `row_weight` (the replaced target's entry zeroed), d loss / d t (n,) or None). What `CompiledKernel` fuses."""
    rows = torch.arange(z.shape[0], device=z.device)
    if t is not None:
        z = z.index_put((rows, y), t)
    if softcap is not None:
        z = torch.tanh(z / softcap) * softcap
    target_z = z[rows, y]  # (n,)
    num = z.shape[1]
    if criterion != "ce":  # the full BCE / MSE (ChunkOptions)
        sig = torch.sigmoid(z)
        if criterion == "bce":
            loss = torch.nn.functional.softplus(z).sum(1) - target_z
        else:
            loss = sig.square().sum(1) - 2 * sig[rows, y] + 1
        grad_z = sig.index_put((rows, y), sig[rows, y] - 1.0)
        if criterion == "mse":
            grad_z = 2 * grad_z * sig * (1 - sig)
    elif top_k is not None and top_k < num:
        vals, idx = torch.topk(z, top_k, dim=1)  # (n, k)
        lse = torch.logsumexp(vals, dim=1)
        p = torch.zeros_like(z).scatter(1, idx, torch.exp(vals - lse[:, None]) - smooth / top_k)
        mean_z = vals.mean(dim=1)
    else:
        lse = torch.logsumexp(z, dim=1)
        p = torch.exp(z - lse[:, None]) - smooth / num
        mean_z = z.mean(dim=1)
    if criterion == "ce":
        loss = lse - target_z
        if smooth:
            loss = (1 - smooth) * loss + smooth * (lse - mean_z)
        grad_z = p.index_put((rows, y), p[rows, y] - (1.0 - smooth))
    if softcap is not None:
        grad_z = grad_z * (1.0 - (z / softcap).square())
    grad_z = grad_z * row_weight.to(z.dtype)[:, None]
    grad_t = None
    if t is not None:
        grad_t = grad_z[rows, y]
        grad_z = grad_z.index_put((rows, y), torch.zeros_like(grad_t))
    return loss, grad_z, grad_t


@register_kernel
class CompiledKernel(EagerKernel):
    """The eager kernel's GEMMs with the per-chunk softmax / margin / top-k / smoothing / soft-cap math of the
    gradient (`_grad_logits`) compiled by `torch.compile` (inductor: C++ on a CPU, Triton on a GPU) into a few fused
    passes over the (n, V) block. The first call per option set compiles (seconds); the top-k-only sparse path keeps
    the eager gather / scatter of k+1 rows."""

    name = "compiled"
    _compiled = None

    def _dense(self, h, w, b, y, t, opts, row_weight, grads: Grads):
        if CompiledKernel._compiled is None:
            CompiledKernel._compiled = torch.compile(_grad_logits, dynamic=True)
        z = _raw_logits(h, w, b, grads.logits, opts.column_scale)  # (n, V)
        loss, grad_z, grad_t = CompiledKernel._compiled(
            z, y, t, row_weight, opts.top_k, opts.label_smoothing, opts.softcap, opts.criterion
        )
        if grads.t is not None:
            grads.t.copy_(grad_t)
        _linear_grads(grad_z, h, w, grads, None, opts.column_scale)
        return loss


@autocast_off
def _run(h, w, b, y, t, opts: ChunkOptions, chunk_size, gemm: torch.dtype, row_weight=None):
    """Per-row losses (N,) and, when `row_weight` (N,) is given, the gradients (h, w, b, t, s) of
    Σ_i row_weight_i · loss_i in the dtypes of h, w, b, t and the column scale s = `opts.column_scale`, chunk by chunk
    through the chunk engine; without it the loss alone (one matmul per chunk). The products run in `gemm` (h and w
    cast to it once per call). With s the kernels accumulate A = Σ d zᵀ h; then d w = s ∘ A (in place) and
    d s_c = A_c · w_c."""
    kernel = chunk_kernel(device=h.device)
    h_g, w_g = h.to(gemm), w.to(gemm)
    if row_weight is None:
        return map_chunks(lambda h_, y_, t_: kernel.loss(h_, w_g, b, y_, t_, opts), (h_g, y, t), (), chunk_size), None
    accumulate = torch.promote_types(gemm, torch.float32)
    grad_h = torch.empty_like(h_g)
    grad_t = None if t is None else torch.empty_like(t)
    grad_w = torch.zeros(w.shape, dtype=accumulate, device=w.device)
    grad_b = None if b is None else torch.zeros_like(b)

    workspace = torch.empty(min(chunk_size, h.shape[0]), w.shape[0], dtype=accumulate, device=h.device)

    def step(h_, y_, t_, weight_, gh, gt):
        grads = Grads(gh, grad_w, grad_b, gt, workspace[: h_.shape[0]])
        return kernel.loss_and_grads(h_, w_g, b, y_, t_, opts, weight_, grads)

    losses = map_chunks(step, (h_g, y, t, row_weight, grad_h, grad_t), (), chunk_size)
    scale, grad_s = opts.column_scale, None
    if scale is not None:
        grad_s = torch.bmm(grad_w[:, None, :], w.to(accumulate)[:, :, None]).reshape(-1).to(scale.dtype)  # (V,)
        grad_w.mul_(scale.to(accumulate)[:, None])
    return losses, (grad_h.to(h.dtype), grad_w.to(w.dtype), grad_b, grad_t, grad_s)


class _FusedLinearCEScalar(torch.autograd.Function):
    """Σ_i weight · loss_i with all gradients computed in the forward pass; `keep` (N,): the rows that count (None:
    all), the others computed with weight 0; `s`: the column scale (V,) or None.

    The backward hands the forward's gradients over (no reference kept, so autograd accumulates into them or keeps
    them as `.grad` without a copy of the (V, H) one) and scales them in place by d output. A second backward
    through the same graph (`retain_graph=True`, gradcheck) finds them handed over and computes them again from the
    saved inputs."""

    @staticmethod
    def _row_weight(h, weight, keep):
        dtype = torch.promote_types(h.dtype, torch.float32)
        if isinstance(weight, torch.Tensor):  # 1 / num_items_in_batch as a tensor: no host sync
            row_weight = weight.to(device=h.device, dtype=dtype).expand(h.shape[0])
        else:
            row_weight = torch.full((h.shape[0],), weight, dtype=dtype, device=h.device)
        return row_weight if keep is None else row_weight * keep

    @staticmethod
    def forward(ctx, h, w, b, t, s, y, weight: float | torch.Tensor, opts: ChunkOptions, chunk_size, gemm, keep=None):
        row_weight = _FusedLinearCEScalar._row_weight(h, weight, keep)
        losses, grads = _run(h, w, b, y, t, opts._replace(column_scale=s), chunk_size, gemm, row_weight)
        ctx.grads = grads  # computed here, neither inputs nor outputs: kept on ctx until the backward takes them
        ctx.save_for_backward(h, w, b, t, s, y, keep)
        ctx.rerun = (weight, opts, chunk_size, gemm)
        return _kept(losses, keep).sum() * weight

    @staticmethod
    def backward(ctx, grad_out):
        grads, ctx.grads = ctx.grads, None
        if grads is None:  # a second backward through this graph: the first one took them
            h, w, b, t, s, y, keep = ctx.saved_tensors
            weight, opts, chunk_size, gemm = ctx.rerun
            row_weight = _FusedLinearCEScalar._row_weight(h, weight, keep)
            _, grads = _run(h, w, b, y, t, opts._replace(column_scale=s), chunk_size, gemm, row_weight)
        if not (host_reads_are_free(grad_out.device) and bool(grad_out == 1)):  # d loss / d loss = 1: nothing to do
            grads = [None if g is None else g.mul_(grad_out.to(g.dtype)) for g in grads]
        return (*grads, None, None, None, None, None, None)  # h, w, b, t, s; then the non-tensor arguments


class _FusedLinearCERows(torch.autograd.Function):
    """Per-row losses; the backward pass recomputes each chunk weighted by the incoming gradient."""

    @staticmethod
    def forward(ctx, h, w, b, t, s, y, opts: ChunkOptions, chunk_size, gemm):
        opts = opts._replace(column_scale=s)
        with torch.no_grad():
            losses, _ = _run(h, w, b, y, t, opts, chunk_size, gemm)
        ctx.save_for_backward(h, w, b, t, s, y)
        ctx.opts = (opts._replace(column_scale=None), chunk_size, gemm)  # the tensor s is saved above
        return losses

    @staticmethod
    def backward(ctx, grad_out):
        h, w, b, t, s, y = ctx.saved_tensors
        opts, chunk_size, gemm = ctx.opts
        _, grads = _run(h, w, b, y, t, opts._replace(column_scale=s), chunk_size, gemm, row_weight=grad_out)
        return (*grads, None, None, None, None)  # h, w, b, t, s; then y and the non-tensor arguments


def _kept(losses: torch.Tensor, keep: torch.Tensor | None) -> torch.Tensor:
    """The losses (N,) with 0 on the rows `keep` drops (None: all kept)."""
    return losses if keep is None else torch.where(keep, losses, 0.0)


@autocast_off
def fused_linear_cross_entropy(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    target: torch.Tensor,
    *,
    target_logit: torch.Tensor | None = None,
    top_k: int | None = None,
    label_smoothing: float = 0.0,
    reduction: str = "mean",
    ignore_index: int = -100,
    num_items_in_batch: int | torch.Tensor | None = None,
    chunk_size: int | None = None,
    logit_multiplier: float = 1.0,
    softcap: float | None = None,
    logit_scale: float | None = None,
    column_scale: torch.Tensor | None = None,
    criterion: str = "ce",
) -> torch.Tensor:
    """Cross-entropy of `hidden @ weight.T + bias` (with an optional replaced target logit) in chunks.

    Args:
        hidden: (N, H) (any leading shape is flattened).
        weight: (V, H); bias: (V,) or None.
        target: (N,) class ids, `ignore_index` rows contribute nothing.
        target_logit: (N,) value that replaces z[i, target_i] (e.g. a margin logit), or None.
        top_k: log-sum-exp over each row's k largest logits only (sparse softmax), or None.
        label_smoothing: as in `F.cross_entropy` (over the top-k support when `top_k` is set).
        reduction: "mean" (over non-ignored rows, or divided by `num_items_in_batch`), "sum", "none".
        chunk_size: rows per chunk (default: the chunk engine's budget, 32 MiB of float32 logits, at least 512 rows).
        logit_multiplier: the logits are logit_multiplier · (hidden @ weight.T + bias) (a replaced target logit is
            taken as given: multiply it yourself); the checkpoint's output transform (hf_heads.losses.transforms).
        softcap: then every logit z (the replaced target's too) becomes softcap · tanh(z / softcap).
        logit_scale: the old name of `logit_multiplier` (give one of them).
        column_scale: (V,) s, or None: the products become s_c · (hidden_i · weight_c) before the bias (a margin
            head's word-norm scaling, eq. 13's f(c) / ‖W_c‖), applied to each chunk's logits and gradient instead of
            to a scaled (V, H) copy of the weight; its gradient is computed too.
        criterion: "ce" (softmax cross-entropy), or the sampling paper's full criteria over sigmoid outputs, "bce"
            (eq. 3, Σ_c softplus(z_c) − z_y) and "mse" (eq. 1, Σ_c (σ(z_c) − δ_cy)²), with the same chunks,
            kernels and gradients in the forward pass (no top_k or label_smoothing for them).
    Returns:
        a scalar, or (N,) per-row losses for reduction="none" (0 on ignored rows). Computed in
        float32 (float64 inputs stay float64 for gradcheck).
    """
    if logit_scale is not None:
        if logit_multiplier != 1.0:
            raise TypeError("give logit_multiplier or its old name logit_scale, not both")
        check_transform(logit_scale, None, "logit_scale")
        logit_multiplier = logit_scale
    check_transform(logit_multiplier, softcap)
    check_choice("criterion", criterion, CRITERIA)
    if criterion != "ce" and (top_k is not None or label_smoothing):
        field, value = ("top_k", top_k) if top_k is not None else ("label_smoothing", label_smoothing)
        raise OptionError(field, value, f"is for criterion='ce' only, not criterion={criterion!r}")
    h, w, b, y, valid = linear_rows(hidden, weight, bias, target, ignore_index, reduction, keep_dtype=True)
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
    chunk = chunk_size or rows_per_chunk(h.shape[0], w.shape[0])
    opts = ChunkOptions(top_k, label_smoothing, softcap, criterion=criterion)
    if reduction == "none":
        rows = _kept(_FusedLinearCERows.apply(h, w, b, t, s, y, opts, chunk, gemm), keep)
        return reduce_rows(rows, valid, valid.shape, "none")
    # 1 / the mean's divisor; a tensor `num_items_in_batch` (the Trainer's) stays a tensor: no host sync
    scale = 1.0 if reduction == "sum" else 1.0 / mean_divisor(num_items_in_batch, num_valid, h.device)
    if y.numel() == 0:  # every row ignored: a zero loss that still reaches every input
        return (hidden.sum() + weight.sum() + (0 if bias is None else bias.sum())).float() * 0.0
    needs_grad = torch.is_grad_enabled() and any(x is not None and x.requires_grad for x in (h, w, b, t, s))
    if not needs_grad:  # evaluation: the loss alone, one matmul per chunk instead of three, in larger chunks
        eval_chunk = chunk_size or eval_rows_per_chunk(h.shape[0], w.shape[0], chunk)
        losses, _ = _run(h, w, b, y, t, opts._replace(column_scale=s), eval_chunk, gemm)
        return _kept(losses, keep).sum() * scale
    return _FusedLinearCEScalar.apply(h, w, b, t, s, y, scale, opts, chunk, gemm, keep)
