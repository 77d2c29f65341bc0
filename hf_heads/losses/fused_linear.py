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

from typing import NamedTuple

import torch

from hf_heads.losses._rows import autocast_off, linear_rows, mean_divisor, reduce_rows
from hf_heads.losses._rows import check_labels as check_labels  # re-exported: hf_heads.losses.check_labels
from hf_heads.losses.transforms import check_transform

DEFAULT_CHUNK_ELEMENTS = 1 << 23  # logits per chunk (32 MiB in float32)


def default_chunk_size(num_rows: int, num_classes: int) -> int:
    return max(1, min(num_rows, DEFAULT_CHUNK_ELEMENTS // max(num_classes, 1)))


EVAL_CHUNK_ROWS = 256  # a CPU GEMM of fewer rows runs slower than one (N, H) @ (H, V) matmul
EVAL_CHUNK_ELEMENTS = 1 << 26  # ... but never more than 256 MiB of float32 logits per chunk


def eval_chunk_size(num_rows: int, num_classes: int, chunk: int) -> int:
    """Rows per chunk of the loss alone (no gradient blocks kept): 4 × the training `chunk`, and at least
    `EVAL_CHUNK_ROWS` rows unless that exceeds `EVAL_CHUNK_ELEMENTS` logits. Measured at V = 200k, H = 512,
    N = 2048 on 2 CPU cores: chunks of 41 / 128 / 256 / 512 rows took 1.6 / 1.06 / 0.91 / 0.85 × the time of one
    matmul + cross-entropy."""
    floor = min(num_rows, EVAL_CHUNK_ROWS, max(1, EVAL_CHUNK_ELEMENTS // max(num_classes, 1)))
    return max(4 * chunk, floor)


class _Chunk(NamedTuple):
    z: torch.Tensor  # (n, V) logits (the target's replaced; soft-capped when a cap is given)
    rows: torch.Tensor  # (n,) 0..n-1
    vals: torch.Tensor | None  # (n, k) the top-k logits (top_k < V), else None
    idx: torch.Tensor | None  # (n, k) their columns
    lse: torch.Tensor  # (n,) log-sum-exp over the row (or its top k)
    loss: torch.Tensor  # (n,)
    target_z: torch.Tensor  # (n,) the target's logit


def _capped_slope(z: torch.Tensor, softcap: float) -> torch.Tensor:
    """d cap·tanh(x / cap) / dx at the capped values z = cap·tanh(x / cap): 1 − (z / cap)²."""
    return 1.0 - (z / softcap).square()


class _Grads(NamedTuple):
    """Gradient buffers the chunks write into: d h and d t row by row, d w and d b accumulated."""

    h: torch.Tensor  # (N, H)
    w: torch.Tensor  # (V, H)
    b: torch.Tensor | None  # (V,)
    t: torch.Tensor | None  # (N,)


def _chunk_loss(h, w, b, y, t, top_k, label_smoothing, softcap) -> _Chunk:
    """Logits and loss of one chunk of rows h (n, H) with targets y (n,) and replaced target logits t (n,)."""
    z = h @ w.T  # (n, V), float32 or float64 (the caller upcasts half precision)
    if b is not None:
        z += b
    rows = torch.arange(z.shape[0], device=z.device)
    if t is not None:
        z[rows, y] = t
    if softcap is not None:
        z.div_(softcap).tanh_().mul_(softcap)
    target_z = z[rows, y]  # (n,)
    if top_k is not None and top_k < z.shape[1]:
        vals, idx = torch.topk(z, top_k, dim=1)  # (n, k)
        lse = torch.logsumexp(vals, dim=1)  # (n,)
    else:
        vals = idx = None
        lse = torch.logsumexp(z, dim=1)  # (n,)
    loss = lse - target_z  # (n,)
    if label_smoothing:
        mean_z = z.mean(dim=1) if idx is None else vals.mean(dim=1)
        loss = (1 - label_smoothing) * loss + label_smoothing * (lse - mean_z)
    return _Chunk(z, rows, vals, idx, lse, loss, target_z)


def _dense_chunk(h, w, b, y, t, top_k, label_smoothing, softcap, row_weight, grads: _Grads, sl: slice):
    """Loss of one chunk; adds d(Σ_i row_weight_i · loss_i) to `grads` through the dense d loss / d z (n, V)."""
    c = _chunk_loss(h, w, b, y, t, top_k, label_smoothing, softcap)
    z, rows = c.z, c.rows
    slope = None if softcap is None else _capped_slope(z, softcap)  # (n, V): d capped / d raw
    # d loss_i / d z_ic = p_ic - [c = y_i] (p: softmax over the whole row or over its top-k)
    if c.idx is None:
        grad_z = torch.exp(z.sub_(c.lse[:, None]))  # (n, V), reuses the logits buffer
    else:
        grad_z = torch.zeros_like(z)
        grad_z.scatter_(1, c.idx, torch.exp(c.vals - c.lse[:, None]))
    if label_smoothing:
        if c.idx is None:
            grad_z -= label_smoothing / z.shape[1]
        else:
            grad_z.scatter_add_(1, c.idx, torch.full_like(c.vals, -label_smoothing / top_k))
    grad_z[rows, y] -= 1.0 - label_smoothing
    if slope is not None:
        grad_z *= slope
    grad_z *= row_weight.to(z.dtype)[:, None]
    if grads.t is not None:
        grads.t[sl] = grad_z[rows, y]  # (n,)
        grad_z[rows, y] = 0.0  # the replaced entry does not depend on h · w_y
    torch.mm(grad_z, w, out=grads.h[sl])  # (n, H), written in place
    grads.w.addmm_(grad_z.T, h)  # (V, H) accumulated without a temporary
    if grads.b is not None:
        grads.b.add_(grad_z.sum(0))
    return c.loss


def _sparse_chunk(h, w, b, y, t, top_k, label_smoothing, softcap, row_weight, grads: _Grads, sl: slice):
    """Loss of one chunk (top_k < V, no replaced target logit); only the k kept logits and the target's have a
    gradient, so it gathers / scatters k+1 rows of W per token instead of two dense (n, V) x (V, H) products."""
    c = _chunk_loss(h, w, b, y, t, top_k, label_smoothing, softcap)
    coef = torch.exp(c.vals - c.lse[:, None])  # (n, k)
    if label_smoothing:
        coef -= label_smoothing / top_k
    cols = torch.cat([c.idx, y[:, None]], dim=1)  # (n, k+1); the target may repeat a kept column
    coef = torch.cat([coef, coef.new_full((coef.shape[0], 1), -(1.0 - label_smoothing))], dim=1)
    if softcap is not None:
        coef = coef * _capped_slope(torch.cat([c.vals, c.target_z[:, None]], dim=1), softcap)
    coef = coef * row_weight.to(coef.dtype)[:, None]
    torch.bmm(coef[:, None, :], w[cols], out=grads.h[sl, None, :])  # (n, 1, H)
    grads.w.index_add_(0, cols.reshape(-1), (coef[:, :, None] * h[:, None, :]).reshape(-1, h.shape[1]))
    if grads.b is not None:
        grads.b.index_add_(0, cols.reshape(-1), coef.reshape(-1))
    return c.loss


@autocast_off
def _run(h, w, b, y, t, top_k, label_smoothing, softcap, chunk_size, row_weight=None):
    """Per-row losses (N,) and, when `row_weight` (N,) is given, the gradients (h, w, b, t) of
    Σ_i row_weight_i · loss_i, chunk by chunk; without it the loss alone (one matmul per chunk)."""
    n = h.shape[0]
    losses = torch.empty(n, dtype=h.dtype, device=h.device)
    chunks = [slice(start, min(start + chunk_size, n)) for start in range(0, n, chunk_size)]
    if row_weight is None:
        for sl in chunks:
            t_sl = None if t is None else t[sl]
            losses[sl] = _chunk_loss(h[sl], w, b, y[sl], t_sl, top_k, label_smoothing, softcap).loss
        return losses, None
    grads = _Grads(
        torch.empty_like(h),
        torch.zeros_like(w),
        None if b is None else torch.zeros_like(b),
        None if t is None else torch.empty_like(h[:, 0]),
    )
    sparse = top_k is not None and top_k < w.shape[0] and t is None
    step = _sparse_chunk if sparse else _dense_chunk
    for sl in chunks:
        t_sl = None if t is None else t[sl]
        losses[sl] = step(h[sl], w, b, y[sl], t_sl, top_k, label_smoothing, softcap, row_weight[sl], grads, sl)
    return losses, tuple(grads)


class _FusedLinearCEScalar(torch.autograd.Function):
    """Σ_i weight · loss_i with all gradients computed in the forward pass."""

    @staticmethod
    def forward(ctx, h, w, b, t, y, weight: float, top_k, label_smoothing, softcap, chunk_size):
        row_weight = torch.full((h.shape[0],), weight, dtype=h.dtype, device=h.device)
        losses, grads = _run(h, w, b, y, t, top_k, label_smoothing, softcap, chunk_size, row_weight)
        ctx.save_for_backward(*[g if g is not None else torch.empty(0) for g in grads])
        ctx.has = [g is not None for g in grads]
        return losses.sum() * weight

    @staticmethod
    def backward(ctx, grad_out):
        saved = [g * grad_out.to(g.dtype) if has else None for g, has in zip(ctx.saved_tensors, ctx.has, strict=False)]
        grad_h, grad_w, grad_b, grad_t = saved
        return grad_h, grad_w, grad_b, grad_t, None, None, None, None, None, None


class _FusedLinearCERows(torch.autograd.Function):
    """Per-row losses; the backward pass recomputes each chunk weighted by the incoming gradient."""

    @staticmethod
    def forward(ctx, h, w, b, t, y, top_k, label_smoothing, softcap, chunk_size):
        with torch.no_grad():
            losses, _ = _run(h, w, b, y, t, top_k, label_smoothing, softcap, chunk_size)
        ctx.save_for_backward(h, w, b, t, y)
        ctx.opts = (top_k, label_smoothing, softcap, chunk_size)
        return losses

    @staticmethod
    def backward(ctx, grad_out):
        h, w, b, t, y = ctx.saved_tensors
        _, grads = _run(h, w, b, y, t, *ctx.opts, row_weight=grad_out)
        return (*grads, None, None, None, None, None)


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
        chunk_size: rows per chunk (default: 2^23 logits per chunk).
        logit_multiplier: the logits are logit_multiplier · (hidden @ weight.T + bias) (a replaced target logit is
            taken as given: multiply it yourself); the checkpoint's output transform (hf_heads.losses.transforms).
        softcap: then every logit z (the replaced target's too) becomes softcap · tanh(z / softcap).
        logit_scale: the old name of `logit_multiplier` (give one of them).
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
    h, w, b, y, valid = linear_rows(hidden, weight, bias, target, ignore_index, reduction)
    if logit_multiplier != 1.0:  # s·(h·w + b) = (s·h)·w + s·b: the kernel's gradients reach h and b through autograd
        h, b = h * logit_multiplier, None if b is None else b * logit_multiplier
    t = None if target_logit is None else target_logit.reshape(-1).to(h.dtype)
    if not bool(valid.all()):
        h, y, t = h[valid], y[valid], None if t is None else t[valid]
    chunk = chunk_size or default_chunk_size(h.shape[0], w.shape[0])
    if reduction == "none":
        rows = _FusedLinearCERows.apply(h, w, b, t, y, top_k, label_smoothing, softcap, chunk)
        return reduce_rows(rows, valid, valid.shape, "none")
    scale = 1.0 if reduction == "sum" else 1.0 / float(mean_divisor(num_items_in_batch, y.numel()))
    if y.numel() == 0:  # every row ignored: a zero loss that still reaches every input
        return (hidden.sum() + weight.sum() + (0 if bias is None else bias.sum())).float() * 0.0
    needs_grad = torch.is_grad_enabled() and any(x is not None and x.requires_grad for x in (h, w, b, t))
    if not needs_grad:  # evaluation: the loss alone, one matmul per chunk instead of three, in larger chunks
        eval_chunk = chunk_size or eval_chunk_size(h.shape[0], w.shape[0], chunk)
        losses, _ = _run(h, w, b, y, t, top_k, label_smoothing, softcap, eval_chunk)
        return losses.sum() * scale
    return _FusedLinearCEScalar.apply(h, w, b, t, y, scale, top_k, label_smoothing, softcap, chunk)
