"""The chunk kernels of the chunk engine's seam (hf_heads.losses.chunks): `eager` and `compiled` (the Triton one is
hf_heads.losses.triton_kernel). Each computes one chunk of the fused loss of hf_heads.losses.fused_linear: the
logits z = s ∘ (h wᵀ) + b with the replaced target logit and the soft-cap, the criterion over them, and in training
the gradient of the row-weighted losses written over the logits buffer, then the products d h, d w, d b.

Products run in the dtype of h and w (a half dtype accumulates in float32), the softmax / margin / sigmoid math in
float32 (float64 for float64 inputs, for gradcheck).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from hf_heads.components import register
from hf_heads.losses.chunks import ChunkKernel, ChunkOptions, Grads
from hf_heads.losses.precision import HALF_DTYPES
from hf_heads.losses.reduction import host_reads_are_free
from hf_heads.losses.tiles import (
    TileStats,
    capped_slope,
    label_coefficient,
    label_grad_,
    predict,
    row_loss,
    support_grad_,
    target_grad_,
    tile_stats,
    top_k_predict,
)


def _raw_logits(h, w, b, out: torch.Tensor | None = None, col_scale: torch.Tensor | None = None) -> torch.Tensor:
    """s ∘ (h wᵀ) + b (n, V): the product in the dtype of h and w, then float32 (float64 for float64 inputs) for the
    softmax math, the column scale s (V,) and the bias applied there. `out`: an (n, V) buffer of the products'
    dtype, or float32 for half products where the GEMM writes float32 itself (no half (n, V) product, no cast pass)."""
    if out is not None and h.dtype == w.dtype == out.dtype:
        z = torch.mm(h, w.T, out=out)
    elif out is not None and h.dtype == w.dtype and writes_half_products_in_float32(out, h.dtype):
        z = torch.mm(h, w.T, out_dtype=out.dtype, out=out)
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


_PROBED: dict[tuple[str, torch.device, torch.dtype], bool] = {}


def _available(gemm: str, device: torch.device, dtype: torch.dtype) -> bool:
    """Whether the CUDA GEMM `gemm` ("addmm" or "mm") with half inputs of `dtype` and a float32 `out_dtype` runs on
    `device` and gives the right numbers, probed once per device and dtype."""
    key = (gemm, device, dtype)
    if key not in _PROBED:
        _PROBED[key] = (_probe_addmm_out_dtype if gemm == "addmm" else _probe_mm_out_dtype)(device, dtype)
    return _PROBED[key]


def adds_half_products_in_place(accumulator: torch.Tensor, dtype: torch.dtype) -> bool:
    """Whether a half-`dtype` product can be added into this float32 (V, H) accumulator inside the GEMM,
    `torch.addmm(acc, a, b, out_dtype=torch.float32, out=acc)`: on CUDA where torch accepts it
    (pytorch/pytorch#167931), probed once per device and dtype. Elsewhere the product is a half (V, H) temporary
    added to the accumulator."""
    if accumulator.device.type != "cuda" or accumulator.dtype != torch.float32 or dtype not in HALF_DTYPES:
        return False
    return _available("addmm", accumulator.device, dtype)


def writes_half_products_in_float32(out: torch.Tensor, dtype: torch.dtype) -> bool:
    """Whether the GEMM can write the product of two half-`dtype` matrices as float32 into `out`, `torch.mm(a, b,
    out_dtype=torch.float32, out=out)`: on CUDA where torch has that overload, probed once per device and dtype;
    then a chunk's logits need no half (n, V) product and no cast pass."""
    if out.device.type != "cuda" or out.dtype != torch.float32 or dtype not in HALF_DTYPES:
        return False
    return _available("mm", out.device, dtype)


def _probe_operands(device: torch.device):
    """Small matrices whose products and sums are exact in every dtype: (acc (3, 2), a (3, 2), b (2, 2))."""
    acc = torch.arange(6.0, device=device).reshape(3, 2)
    a = torch.tensor([[1.0, 2.0], [3.0, 4.0], [5.0, -6.0]], device=device)
    b = torch.tensor([[0.5, 1.0], [2.0, -1.5]], device=device)
    return acc, a, b


def _probe_addmm_out_dtype(device: torch.device, dtype: torch.dtype) -> bool:
    """One (3, 2) += (3, 2) @ (2, 2) in place through `addmm(..., out_dtype=float32, out=...)` in `dtype`, and one
    with β = 0 over a NaN-filled `out`: whether both run and give the exact float32 results."""
    acc, a, b = _probe_operands(device)
    want = acc + a @ b
    unset = torch.full_like(acc, float("nan"))
    try:
        torch.addmm(acc, a.to(dtype), b.to(dtype), out_dtype=torch.float32, out=acc)
        torch.addmm(unset, a.to(dtype), b.to(dtype), beta=0.0, out_dtype=torch.float32, out=unset)
    except (RuntimeError, NotImplementedError, TypeError):  # an older torch, or no such kernel on this device
        return False
    return bool(torch.equal(acc, want)) and bool(torch.equal(unset, a @ b))


def _probe_mm_out_dtype(device: torch.device, dtype: torch.dtype) -> bool:
    """One (3, 2) @ (2, 2) through `mm(..., out_dtype=float32, out=...)` in `dtype` into a NaN-filled float32 `out`:
    whether it runs and gives the exact float32 product."""
    _, a, b = _probe_operands(device)
    out = torch.full((3, 2), float("nan"), device=device)
    try:
        torch.mm(a.to(dtype), b.to(dtype), out_dtype=torch.float32, out=out)
    except (RuntimeError, NotImplementedError, TypeError):
        return False
    return bool(torch.equal(out, a @ b))


def softmax_in_place(z: torch.Tensor) -> bool:
    """z (n, V) becomes softmax(z) over its rows in place: ATen's row-wise kernel writing its own input (`_softmax.out`
    with out=z: each row read into cache once and written once). True when done; False, z untouched, where this
    torch refuses that aliasing or gives other values than `torch.softmax` (probed once per device and dtype)."""
    key = ("softmax-in-place", z.device, z.dtype)
    if key not in _PROBED:
        x = torch.tensor([[0.5, -2.0, 3.0, 1.0], [-1.0, 4.0, 4.0, 0.0]], device=z.device, dtype=z.dtype)
        want = torch.softmax(x, dim=1)
        try:
            torch.ops.aten._softmax.out(x, 1, False, out=x)
        except (RuntimeError, NotImplementedError):  # a torch that refuses an output overlapping its input
            _PROBED[key] = False
        else:
            _PROBED[key] = bool(torch.equal(x, want))
    if _PROBED[key]:
        torch.ops.aten._softmax.out(z, 1, False, out=z)
    return _PROBED[key]


def _accumulate_product(accumulator: torch.Tensor, a: torch.Tensor, b: torch.Tensor, unset: bool = False) -> None:
    """accumulator (V, H) += a (V, n) @ b (n, H) with float32 accumulation; `unset`: the accumulator is uninitialised,
    so the GEMM writes a @ b with β = 0 (its old content, NaN or not, never read)."""
    beta = 0.0 if unset else 1.0
    if accumulator.dtype == a.dtype:
        accumulator.addmm_(a, b, beta=beta)  # no temporary
    elif adds_half_products_in_place(accumulator, a.dtype):  # no (V, H) temporary, no second pass over the accumulator
        torch.addmm(accumulator, a, b, beta=beta, out_dtype=accumulator.dtype, out=accumulator)
    elif unset:
        accumulator.copy_(a @ b)  # a half-precision (V, H) product, upcast into the accumulator
    else:
        accumulator.add_(a @ b)  # a half-precision (V, H) product added to the float32 accumulator


def _linear_grads(
    grad_z: torch.Tensor,
    h,
    w,
    grads: Grads,
    row_weight: torch.Tensor | None = None,
    col_scale: torch.Tensor | None = None,
) -> None:
    """d b += rᵀ d z, d w += d zᵀ · diag(r) h and d h (n, H) = diag(r) (d z ∘ s) · w into `grads`, for the row weights
    r (n,) (None: already in d z) and the column scale s (V,) (None: ones; `grads.w` then holds the gradient of s ∘
    w, which `_run` splits into those of w and s). The weights scale (n, H) blocks, never the (n, V) one. `grad_z`
    may be overwritten."""
    if grads.b is not None:  # summed in the accumulator's dtype (d z may be half precision)
        grads.b.add_(
            grad_z.sum(0, dtype=grads.b.dtype) if row_weight is None else row_weight.to(grad_z.dtype) @ grad_z
        )
    g = grad_z if grad_z.dtype == w.dtype else grad_z.to(w.dtype)  # (n, V)
    if col_scale is None:
        torch.mm(g, w, out=grads.h)  # (n, H), written in place
    if grads.w is not None:  # None: W (and the column scale) need no gradient, e.g. a frozen output layer
        h_r = h if row_weight is None else h * row_weight.to(h.dtype)[:, None]  # (n, H)
        _accumulate_product(grads.w, g.T, h_r, grads.w_unset)  # (V, H)
    if col_scale is not None:  # d h from d z ∘ s, after d w took the unscaled d z
        torch.mm(g.mul_(col_scale.to(g.dtype)), w, out=grads.h)
    if row_weight is not None:
        grads.h.mul_(row_weight.to(grads.h.dtype)[:, None])


@register("kernel")
@dataclass(frozen=True)
class EagerKernel(ChunkKernel):
    """The chunk in eager PyTorch: one (n, V) logits buffer, turned into the log-probabilities and then the gradient in
    place. The log-softmax is one row-wise pass (`torch.log_softmax(z, out=z)`, each row in cache), so the block is
    read twice between the GEMMs instead of once per elementwise operation."""

    name = "eager"

    def available(self, device: torch.device) -> bool:
        return True  # any device PyTorch runs on

    @staticmethod
    def logits(h, w, b, y, t, opts: ChunkOptions, out: torch.Tensor | None = None, pred=None):
        """z (n, V) (in `out` when given): the products with the column scale and bias, soft-capped, the target's logit
        replaced by t (capped too); and the row indices (n,). `pred` (n, 1) or (n, 2) gets each row's argmax (and
        target rank) before the replacement."""
        z = _raw_logits(h, w, b, out, opts.column_scale)  # (n, V) float32 (float64 for float64 inputs)
        rows = torch.arange(z.shape[0], device=z.device)
        cap = opts.softcap
        if cap is not None:  # elementwise: capping the block, then the replaced entry, is capping the replaced block
            z.div_(cap).tanh_().mul_(cap)
        if pred is not None:
            pred.copy_(predict(z, y, rank=pred.shape[1] > 1))
        if t is not None:
            z[rows, y] = t if cap is None else torch.tanh(t / cap) * cap
        return z, rows

    @staticmethod
    def _selects(opts: ChunkOptions, num_classes: int) -> bool:
        """Whether the top-k support applies (k < V)."""
        return opts.top_k is not None and opts.top_k < num_classes

    @staticmethod
    def log_softmax_(z, rows, y, opts: ChunkOptions, entropy: bool = False):
        """z (n, V) becomes log p in place; (losses (n,), lse (n,), entropies (n,) or None) from the row statistics in
        the form that pass leaves them (hf_heads.losses.tiles shifted by m = lse: Σ e^{z − m} = 1, Σ z = Σ log p + V
        lse), the target's logit read before the pass."""
        target = z[rows, y]  # (n,)
        torch.log_softmax(z, dim=1, out=z)
        lse = target - z[rows, y]
        sum_ez = (z.exp() * z).sum(1) if entropy else None  # (n,)
        sum_z = z.sum(1) + z.shape[1] * lse if opts.label_smoothing else None
        return row_loss(TileStats(lse, torch.ones_like(lse), sum_z, sum_ez, target), opts, z.shape[1])

    def softmax_(self, z, rows, y, opts: ChunkOptions, relogits) -> tuple[torch.Tensor, torch.Tensor] | None:
        """Plain cross-entropy's statistics on a CPU (no smoothing or entropy): z (n, V) becomes p in place in one
        row-wise pass (`softmax_in_place`; `log_softmax_` and then exp read and write the block twice and take exp
        twice); (losses −log p_y (n,), lse = z_y + loss (n,)) from each target's p, except on rows whose p_y is
        below the dtype's smallest normal number (z_y more than ~87 below lse in float32), whose `log_softmax_` runs
        on their logits recomputed by `relogits(rows)`. None, z untouched, where `softmax_in_place` is refused."""
        if opts.label_smoothing or not opts.criterion.softmax or not host_reads_are_free(z.device):
            return None
        target = z[rows, y]  # (n,)
        if not softmax_in_place(z):
            return None
        p_y = z[rows, y]
        loss = p_y.log().neg_()
        low = (p_y < torch.finfo(z.dtype).tiny).nonzero()[:, 0]  # read on the host: a CPU path
        if low.numel():
            zl = relogits(low)  # (len(low), V)
            loss[low] = self.log_softmax_(zl, torch.arange(low.numel(), device=z.device), y[low], opts)[0]
        return loss, target + loss

    @staticmethod
    def top_k_loss(z, rows, y, opts: ChunkOptions, entropy: bool = False):
        """The sparse-softmax losses (n,) over each row's top k of z (n, V) (sparse-softmax paper, eq. 5), with their
        lse (n,), entropies (n,) or None, and the kept values and columns (n, k)."""
        vals, idx = torch.topk(z, opts.top_k, dim=1)  # (n, k)
        stats = tile_stats(vals, opts, entropy=entropy)
        stats = TileStats(stats.m, stats.sum_exp, stats.sum_z, stats.sum_ez, z[rows, y])
        return (*row_loss(stats, opts, opts.top_k), vals, idx)

    @classmethod
    def _predicts_from_top_k(cls, opts: ChunkOptions, num_classes: int, t, pred, device: torch.device) -> bool:
        """Whether the predictions `pred` asks for come from the top-k selection of a sparse loss (`top_k_predict`)
        rather than from passes over the (n, V) logits: a top-k loss without a replaced target logit, on a CPU, asking
        for the argmax alone or for ranks capped at k (`ChunkOptions.capped_rank`)."""
        if pred is None or t is not None or not opts.criterion.softmax or not cls._selects(opts, num_classes):
            return False
        return (pred.shape[1] == 1 or opts.capped_rank) and host_reads_are_free(device)

    def loss(self, h, w, b, y, t, opts, lse=None, pred=None, ent=None):
        late = self._predicts_from_top_k(opts, w.shape[0], t, pred, h.device)
        z, rows = self.logits(h, w, b, y, t, opts, pred=None if late else pred)
        if not opts.criterion.softmax:  # a sigmoid criterion (BCE, MSE): its terms over the buffer
            return opts.criterion.terms_(z, rows, y)
        wants_ent = ent is not None
        if self._selects(opts, z.shape[1]):
            loss, row_lse, row_ent, vals, idx = self.top_k_loss(z, rows, y, opts, wants_ent)
            if late:
                pred.copy_(top_k_predict(z, y, vals, idx, rank=pred.shape[1] > 1))
        else:
            loss, row_lse, row_ent = self.log_softmax_(z, rows, y, opts, wants_ent)  # z: log p
        if lse is not None:
            lse.copy_(row_lse)
        if ent is not None:
            ent.copy_(row_ent)
        return loss

    def loss_and_grads(
        self, h, w, b, y, t, opts, row_weight, grads, lse=None, z_weight=None, pred=None, ent=None, ent_weight=None
    ):
        sparse = self._selects(opts, w.shape[0]) and t is None and opts.criterion.softmax
        path = self._sparse if sparse else self._dense
        return path(h, w, b, y, t, opts, row_weight, grads, lse, z_weight, pred, ent, ent_weight)

    def _dense(
        self, h, w, b, y, t, opts, row_weight, grads: Grads, lse=None, z_weight=None, pred=None, ent=None,
        ent_weight=None,
    ):  # fmt: skip
        """d loss / d z (n, V) written over the logits buffer (hf_heads.losses.tiles), then the three GEMMs; with
        `ent_weight` e (n,) the gradient also takes that of Σ_i e_i H_i."""
        z, rows = self.logits(h, w, b, y, t, opts, grads.logits, pred)
        slope = None if opts.softcap is None else capped_slope(z, opts.softcap)  # (n, V): d capped / d raw
        done = None

        def relogits(some):  # (len(some), V) the logits of the rows `some` again
            return self.logits(h[some], w, b, y[some], None if t is None else t[some], opts)[0]

        # the row weights go into d z with a z-loss or an entropy term, else onto the (n, H) blocks of the products
        weighted = opts.criterion.softmax and (opts.z_loss > 0 or ent_weight is not None)
        if not opts.criterion.softmax:  # a sigmoid criterion: its d / d z over the logits buffer
            loss = opts.criterion.terms_(z, rows, y)
            grad_z = z
        else:
            wants_ent = ent is not None or ent_weight is not None
            if self._selects(opts, z.shape[1]):
                loss, row_lse, row_ent, vals, idx = self.top_k_loss(z, rows, y, opts, wants_ent)
                tile, support = vals - row_lse[:, None], opts.top_k  # (n, k) log p of the kept values
            elif not wants_ent and (done := self.softmax_(z, rows, y, opts, relogits)) is not None:
                (loss, row_lse), row_ent = done, None
                tile, support = z, z.shape[1]  # z: p
            else:
                loss, row_lse, row_ent = self.log_softmax_(z, rows, y, opts, wants_ent)  # z: log p
                tile, support = z, z.shape[1]
            if lse is not None:
                lse.copy_(row_lse)
            if ent is not None:
                ent.copy_(row_ent)
            r = row_weight if weighted else None
            grad_z = support_grad_(
                tile, opts, row_lse, r, z_weight, support, None, row_ent, ent_weight, probs=done is not None
            )
            if grad_z is not z:
                grad_z = torch.zeros_like(z).scatter_(1, idx, grad_z)
            label_grad_(grad_z, opts, y, r)
        d_t = target_grad_(grad_z, y, None, slope, replaced=grads.t is not None)
        if grads.t is not None:  # the replaced entry does not depend on h · w_y
            grads.t.copy_(d_t if weighted else d_t * row_weight.to(d_t.dtype))  # (n,)
        _linear_grads(grad_z, h, w, grads, None if weighted else row_weight, opts.column_scale)
        return loss

    def _sparse(
        self, h, w, b, y, t, opts, row_weight, grads: Grads, lse=None, z_weight=None, pred=None, ent=None,
        ent_weight=None,
    ):  # fmt: skip
        """top_k < V, no replaced target logit: only the k kept logits and the target's have a gradient, so it gathers
        / scatters k+1 rows of W per token instead of two dense (n, V) x (V, H) products."""
        late = self._predicts_from_top_k(opts, w.shape[0], t, pred, h.device)
        z, rows = self.logits(h, w, b, y, t, opts, grads.logits, None if late else pred)
        wants_ent = ent is not None or ent_weight is not None
        loss, row_lse, row_ent, vals, idx = self.top_k_loss(z, rows, y, opts, wants_ent)
        if late:  # `train_accuracy` from the selection itself: no argmax pass over the block
            pred.copy_(top_k_predict(z, y, vals, idx, rank=pred.shape[1] > 1))
        if lse is not None:
            lse.copy_(row_lse)
        if ent is not None:
            ent.copy_(row_ent)
        target_z = z[rows, y]  # (n,)
        rw = row_weight.to(vals.dtype)
        coef = support_grad_(
            vals - row_lse[:, None], opts, row_lse, rw, z_weight, opts.top_k, None, row_ent, ent_weight
        )
        cols = torch.cat([idx, y[:, None]], dim=1)  # (n, k+1); the target may repeat a kept column
        coef = torch.cat([coef, label_coefficient(opts, rw)[:, None]], dim=1)  # the label's term (`tiles.label_grad_`)
        if opts.softcap is not None:
            coef = coef * capped_slope(torch.cat([vals, target_z[:, None]], dim=1), opts.softcap)
        coef_h = coef if opts.column_scale is None else coef * opts.column_scale[cols]  # d z ∘ s for d h
        torch.bmm(coef_h[:, None, :].to(w.dtype), w[cols], out=grads.h[:, None, :])  # (n, 1, H)
        if grads.w is not None:
            if grads.w_unset:  # scattered into: zeroed first
                grads.w.zero_()
            grads.w.index_add_(0, cols.reshape(-1), (coef[:, :, None] * h[:, None, :]).reshape(-1, h.shape[1]))
        if grads.b is not None:
            grads.b.index_add_(0, cols.reshape(-1), coef.reshape(-1))
        return loss


def _grad_logits(
    z, y, t, row_weight, top_k: int | None, smooth: float, softcap: float | None, sigmoid_terms_=None,
    b=None, s=None, grad_dtype: torch.dtype | None = None, z_loss: float = 0.0, z_weight=None,
    want_pred: int = 0, want_ent: bool = False, ent_weight=None,
):  # fmt: skip
    """The per-chunk math that `CompiledKernel` fuses, from the products z (n, V) = h wᵀ with the column scale s (V,)
    and bias b (V,) applied first (either None), so the scale, bias and gradient cast cost no pass of their own.

    Returns (losses (n,), d loss / d (s ∘ z + b) (n, V) weighted by `row_weight` (in `grad_dtype` when given), d
    loss / d t (n,) or None, lse (n,) or None for a sigmoid criterion, predictions (n, `want_pred`) or None,
    entropies (n,) or None). `sigmoid_terms_`: a sigmoid criterion's `Criterion.terms_` (None: cross-entropy). With
    `z_weight` (n,) the gradient also takes that of Σ_i z_weight_i · `z_loss` · lse_i² (the losses do not); with
    `ent_weight` (n,) that of Σ_i ent_weight_i · H_i."""
    if s is not None:
        z = z * s
    if b is not None:
        z = z + b
    rows = torch.arange(z.shape[0], device=z.device)
    if softcap is not None:  # the block capped, then the replaced entry capped: the replaced block capped
        z = torch.tanh(z / softcap) * softcap
    pred = predict(z, y, rank=want_pred > 1) if want_pred else None
    if t is not None:
        z = z.index_put((rows, y), t if softcap is None else torch.tanh(t / softcap) * softcap)
    rw = row_weight.to(z.dtype)
    lse = ent = None
    if sigmoid_terms_ is not None:  # a sigmoid criterion (the full BCE / MSE): its terms on a copy of the block
        grad_z = z.clone()
        loss = sigmoid_terms_(grad_z, rows, y)
        grad_z = grad_z * rw[:, None]
    else:  # the statistics of the row's support (every logit or its top k: a tile), the gradient from them
        opts = ChunkOptions(top_k, smooth, softcap, z_loss=z_loss)
        selects = top_k is not None and top_k < z.shape[1]
        vals, idx = torch.topk(z, top_k, dim=1) if selects else (z, None)  # (n, k) or (n, V)
        stats = tile_stats(vals, opts, entropy=want_ent or ent_weight is not None)
        stats = TileStats(stats.m, stats.sum_exp, stats.sum_z, stats.sum_ez, z[rows, y])
        support = vals.shape[1]
        loss, lse, ent = row_loss(stats, opts, support)
        grad_z = support_grad_(vals - lse[:, None], opts, lse, rw, z_weight, support, None, ent, ent_weight)
        grad_z = torch.zeros_like(z).scatter(1, idx, grad_z) if selects else grad_z
        label_grad_(grad_z, opts, y, rw)
    grad_t = target_grad_(grad_z, y, None, None if softcap is None else capped_slope(z, softcap), t is not None)
    return loss, grad_z if grad_dtype is None else grad_z.to(grad_dtype), grad_t, lse, pred, ent if want_ent else None


def _compile_isolated(fn, backend: str, limit: int):
    """`torch.compile(fn)` as a region with room for `limit` recompiles: its own limit where torch.compile takes
    `recompile_limit` and `isolate_recompiles`, else dynamo's process-wide limit raised while it runs, so its
    variants compile instead of silently falling back to eager."""
    import inspect

    accepted = inspect.signature(torch.compile).parameters
    if "recompile_limit" in accepted and "isolate_recompiles" in accepted:
        return torch.compile(fn, dynamic=True, backend=backend, recompile_limit=limit, isolate_recompiles=True)
    compiled = torch.compile(fn, dynamic=True, backend=backend)
    config = torch._dynamo.config
    name = next((n for n in ("recompile_limit", "cache_size_limit") if hasattr(config, n)), None)
    if name is None:
        return compiled

    def run(*args):
        with config.patch(**{name: max(limit, getattr(config, name))}):
            return compiled(*args)

    return run


@register("kernel")
@dataclass(frozen=True)
class CompiledKernel(EagerKernel):
    """The eager kernel's GEMMs around the per-chunk gradient math (`_grad_logits`) compiled by `torch.compile`
    (inductor: C++ on a CPU, Triton on a GPU) into a few fused passes over the (n, V) block. The first call per
    option set compiles; the top-k-only sparse path keeps the eager gather / scatter."""

    name = "compiled"
    backend = "inductor"
    # room for every option variant a process meets (~512 graphs; dynamo's default of 8 would run the rest eagerly)
    recompile_limit = 1024
    _compiled = None

    def _dense(
        self, h, w, b, y, t, opts, row_weight, grads: Grads, lse=None, z_weight=None, pred=None, ent=None,
        ent_weight=None,
    ):  # fmt: skip
        if CompiledKernel._compiled is None:
            CompiledKernel._compiled = _compile_isolated(_grad_logits, self.backend, self.recompile_limit)
        z = _raw_logits(h, w, None, grads.logits)  # (n, V) h wᵀ: the scale and bias are applied in the compiled math
        z_loss = opts.z_loss > 0 and opts.criterion.softmax
        terms_ = None if opts.criterion.softmax else type(opts.criterion).terms_  # a static function: one graph each
        loss, grad_z, grad_t, row_lse, row_pred, row_ent = CompiledKernel._compiled(
            z, y, t, row_weight, opts.top_k, opts.label_smoothing, opts.softcap, terms_, b, opts.column_scale,
            w.dtype if w.dtype in HALF_DTYPES and z.dtype != w.dtype else None,
            opts.z_loss if z_loss else 0.0, (row_weight if z_weight is None else z_weight) if z_loss else None,
            0 if pred is None else pred.shape[1], ent is not None, ent_weight,
        )  # fmt: skip
        if lse is not None and row_lse is not None:  # BCE / MSE have none
            lse.copy_(row_lse)
        if ent is not None:
            ent.copy_(row_ent)
        if pred is not None:
            pred.copy_(row_pred)
        if grads.t is not None:
            grads.t.copy_(grad_t)
        _linear_grads(grad_z, h, w, grads, None, opts.column_scale)
        return loss
