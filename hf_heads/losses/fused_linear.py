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

from hf_heads.losses._rows import autocast_off

DEFAULT_CHUNK_ELEMENTS = 1 << 23  # logits per chunk (32 MiB in float32)


def default_chunk_size(num_rows: int, num_classes: int) -> int:
    return max(1, min(num_rows, DEFAULT_CHUNK_ELEMENTS // max(num_classes, 1)))


def check_labels(target: torch.Tensor, num_classes: int, ignore_index: int = -100) -> None:
    """Raise `ValueError` for a label outside [0, num_classes) that is not `ignore_index`."""
    bad = (target != ignore_index) & ((target < 0) | (target >= num_classes))
    if bool(bad.any()):
        raise ValueError(
            f"labels: found {int(target[bad][0])}, allowed 0 <= label < {num_classes} or ignore_index={ignore_index}"
        )


def _chunk_pass(
    h: torch.Tensor,  # (n, H)
    w: torch.Tensor,  # (V, H)
    b: torch.Tensor | None,  # (V,)
    y: torch.Tensor,  # (n,)
    t: torch.Tensor | None,  # (n,)
    top_k: int | None,
    row_weight: torch.Tensor | None,  # (n,) gradient weight of each row; None: no gradients
    label_smoothing: float = 0.0,
):
    """Loss of one chunk of rows and, when `row_weight` is given, d(Σ_i row_weight_i · loss_i) / dz
    (and / dt for a replaced target logit)."""
    z = h @ w.T  # (n, V), float32 or float64 (the caller upcasts half precision)
    if b is not None:
        z += b
    rows = torch.arange(z.shape[0], device=z.device)
    if t is not None:
        z[rows, y] = t
    target_z = z[rows, y]  # (n,)
    if top_k is not None and top_k < z.shape[1]:
        vals, idx = torch.topk(z, top_k, dim=1)  # (n, k)
        lse = torch.logsumexp(vals, dim=1)  # (n,)
    else:
        idx = None
        lse = torch.logsumexp(z, dim=1)  # (n,)
    loss = lse - target_z  # (n,)
    if label_smoothing:
        mean_z = z.mean(dim=1) if idx is None else vals.mean(dim=1)
        loss = (1 - label_smoothing) * loss + label_smoothing * (lse - mean_z)
    if row_weight is None:
        return loss, None
    target_coef = 1.0 - label_smoothing
    if idx is not None and t is None:
        # sparse gradient: only the k kept logits and the target logit have one, so return (n, k+1) columns
        # and coefficients instead of a dense (n, V) block (the caller gathers / scatters k+1 rows of W)
        coef = torch.exp(vals - lse[:, None])  # (n, k)
        if label_smoothing:
            coef -= label_smoothing / top_k
        cols = torch.cat([idx, y[:, None]], dim=1)  # (n, k+1); the target may repeat a kept column
        coef = torch.cat([coef, coef.new_full((coef.shape[0], 1), -target_coef)], dim=1)
        return loss, ("sparse", cols, coef * row_weight.to(coef.dtype)[:, None])
    # d loss_i / d z_ic = p_ic - [c = y_i] (p: softmax over the whole row or over its top-k)
    if idx is None:
        grad_z = torch.exp(z.sub_(lse[:, None]))  # (n, V), reuses the logits buffer
    else:
        grad_z = torch.zeros_like(z)
        grad_z.scatter_(1, idx, torch.exp(vals - lse[:, None]))
    if label_smoothing:
        support = z.shape[1] if idx is None else top_k
        if idx is None:
            grad_z -= label_smoothing / support
        else:
            grad_z.scatter_add_(1, idx, torch.full_like(vals, -label_smoothing / support))
    grad_z[rows, y] -= target_coef
    grad_z *= row_weight.to(z.dtype)[:, None]
    grad_t = None
    if t is not None:
        grad_t = grad_z[rows, y].clone()  # (n,)
        grad_z[rows, y] = 0.0  # the replaced entry does not depend on h · w_y
    return loss, (grad_z, grad_t)  # the caller turns d loss / d z into d h, d w, d b in place


@autocast_off
def _run(h, w, b, y, t, top_k, label_smoothing, chunk_size, row_weight=None):
    n = h.shape[0]
    losses = torch.empty(n, dtype=h.dtype, device=h.device)
    grads = None
    if row_weight is not None:
        grad_h = torch.empty_like(h)
        grad_w = torch.zeros_like(w)
        grad_b = torch.zeros_like(b) if b is not None else None
        grad_t = torch.empty_like(h[:, 0]) if t is not None else None
    for start in range(0, n, chunk_size):
        sl = slice(start, min(start + chunk_size, n))
        loss, g = _chunk_pass(
            h[sl],
            w,
            b,
            y[sl],
            None if t is None else t[sl],
            top_k,
            None if row_weight is None else row_weight[sl],
            label_smoothing,
        )
        losses[sl] = loss
        if g is not None and g[0] == "sparse":
            _, cols, coef = g  # (n, k+1), (n, k+1)
            torch.bmm(coef[:, None, :], w[cols], out=grad_h[sl, None, :])  # (n, 1, H)
            grad_w.index_add_(0, cols.reshape(-1), (coef[:, :, None] * h[sl, None, :]).reshape(-1, h.shape[1]))
            if grad_b is not None:
                grad_b.index_add_(0, cols.reshape(-1), coef.reshape(-1))
        elif g is not None:
            grad_z, g_t = g  # (n, V), (n,)
            torch.mm(grad_z, w, out=grad_h[sl])  # (n, H), written in place
            grad_w.addmm_(grad_z.T, h[sl])  # (V, H) accumulated without a temporary
            if grad_b is not None:
                grad_b += grad_z.sum(0)
            if grad_t is not None:
                grad_t[sl] = g_t
    if row_weight is not None:
        grads = (grad_h, grad_w, grad_b, grad_t)
    return losses, grads


class _FusedLinearCEScalar(torch.autograd.Function):
    """Σ_i weight · loss_i with all gradients computed in the forward pass."""

    @staticmethod
    def forward(ctx, h, w, b, t, y, weight: float, top_k, label_smoothing, chunk_size):
        row_weight = torch.full((h.shape[0],), weight, dtype=h.dtype, device=h.device)
        losses, grads = _run(h, w, b, y, t, top_k, label_smoothing, chunk_size, row_weight)
        ctx.save_for_backward(*[g if g is not None else torch.empty(0) for g in grads])
        ctx.has = [g is not None for g in grads]
        return losses.sum() * weight

    @staticmethod
    def backward(ctx, grad_out):
        saved = [g * grad_out.to(g.dtype) if has else None for g, has in zip(ctx.saved_tensors, ctx.has, strict=False)]
        grad_h, grad_w, grad_b, grad_t = saved
        return grad_h, grad_w, grad_b, grad_t, None, None, None, None, None


class _FusedLinearCERows(torch.autograd.Function):
    """Per-row losses; the backward pass recomputes each chunk weighted by the incoming gradient."""

    @staticmethod
    def forward(ctx, h, w, b, t, y, top_k, label_smoothing, chunk_size):
        with torch.no_grad():
            losses, _ = _run(h, w, b, y, t, top_k, label_smoothing, chunk_size)
        ctx.save_for_backward(h, w, b, t, y)
        ctx.opts = (top_k, label_smoothing, chunk_size)
        return losses

    @staticmethod
    def backward(ctx, grad_out):
        h, w, b, t, y = ctx.saved_tensors
        _, grads = _run(h, w, b, y, t, *ctx.opts, row_weight=grad_out)
        return (*grads, None, None, None, None)


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
    Returns:
        a scalar, or (N,) per-row losses for reduction="none" (0 on ignored rows). Computed in
        float32 (float64 inputs stay float64 for gradcheck).
    """
    if reduction not in ("mean", "sum", "none"):
        raise ValueError(f"reduction={reduction!r} is not allowed; allowed: mean, sum, none")
    hidden = hidden.reshape(-1, hidden.shape[-1])
    target = target.reshape(-1)
    if target_logit is not None:
        target_logit = target_logit.reshape(-1)
    if hidden.shape[0] != target.shape[0]:
        raise ValueError(f"hidden has {hidden.shape[0]} rows but target has {target.shape[0]}")
    compute = torch.float64 if hidden.dtype == torch.float64 else torch.float32
    h, w = hidden.to(compute), weight.to(compute)
    b = None if bias is None else bias.to(compute)
    valid = target != ignore_index
    all_valid = bool(valid.all())
    if not all_valid:
        h, y = h[valid], target[valid]
        t = None if target_logit is None else target_logit[valid]
    else:
        y, t = target, target_logit
    if t is not None:
        t = t.to(compute)
    check_labels(y, w.shape[0], ignore_index)
    chunk = chunk_size or default_chunk_size(h.shape[0], w.shape[0])
    if reduction == "none":
        rows = _FusedLinearCERows.apply(h, w, b, t, y, top_k, label_smoothing, chunk)
        if all_valid:
            return rows
        out = rows.new_zeros(target.shape[0])
        return out.masked_scatter(valid, rows)
    if reduction == "sum":
        scale = 1.0
    elif num_items_in_batch is not None:
        scale = 1.0 / float(num_items_in_batch)
    else:
        scale = 1.0 / max(int(y.numel()), 1)
    if y.numel() == 0:  # every row ignored: a zero loss that still reaches every input
        return (hidden.sum() + weight.sum() + (0 if bias is None else bias.sum())).float() * 0.0
    needs_grad = torch.is_grad_enabled() and any(x is not None and x.requires_grad for x in (h, w, b, t))
    if not needs_grad:  # evaluation: the loss alone, one matmul per chunk instead of three, in larger chunks
        losses, _ = _run(h, w, b, y, t, top_k, label_smoothing, chunk_size or 4 * chunk)
        return losses.sum() * scale
    return _FusedLinearCEScalar.apply(h, w, b, t, y, scale, top_k, label_smoothing, chunk)
