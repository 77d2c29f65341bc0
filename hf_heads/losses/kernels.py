"""The chunk kernels of the chunk engine's seam (hf_heads.losses.chunks): `eager` and `compiled` (the hand-written
Triton one is hf_heads.losses.triton_kernel). Each computes one chunk of the fused loss of
hf_heads.losses.fused_linear — the logits z = s ∘ (h wᵀ) + b with the replaced target logit and the soft-cap, the
criterion over them (softmax cross-entropy with its top-k support and label smoothing, or the sampling paper's full
BCE / MSE), and in training the gradient of the row-weighted losses, written over the logits buffer, then the three
products (d h, d w, d b).

- `EagerKernel`: PyTorch ops in one (n, V) workspace: the products, a row-wise in-place log-softmax (one pass, each
  row in cache), the gradient as its exp in place; the sparse top-k path gathers / scatters k+1 rows of W per token.
- `CompiledKernel`: the same products around the per-chunk gradient math (`_grad_logits`) compiled by
  `torch.compile` (inductor: C++ on a CPU, Triton on a GPU).

Products run in the dtype of h and w (a half dtype accumulates in float32), the softmax / margin / sigmoid math in
float32 (float64 for float64 inputs, for gradcheck).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from hf_heads.components import register
from hf_heads.losses._rows import HALF_DTYPES
from hf_heads.losses.chunks import ChunkKernel, ChunkOptions, Grads


def _capped_slope(z: torch.Tensor, softcap: float) -> torch.Tensor:
    """d cap·tanh(x / cap) / dx at the capped values z = cap·tanh(x / cap): 1 − (z / cap)²."""
    return 1.0 - (z / softcap).square()


def _raw_logits(h, w, b, out: torch.Tensor | None = None, col_scale: torch.Tensor | None = None) -> torch.Tensor:
    """s ∘ (h wᵀ) + b (n, V): the product in the dtype of h and w (half precision accumulates in float32), then
    float32 (float64 for float64 inputs) for the softmax math, the column scale s (V,) and the bias applied there.
    `out`: a (n, V) buffer to write into: of the products' dtype, or float32 for half products where the device's GEMM
    writes float32 itself (`writes_half_products_in_float32`: no half (n, V) product and no cast pass)."""
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
    """Whether the CUDA GEMM `gemm` ("addmm" or "mm", see the probes) with half inputs of `dtype` and a float32
    `out_dtype` runs on `device` and gives the right numbers: found out once per device and dtype."""
    key = (gemm, device, dtype)
    if key not in _PROBED:
        _PROBED[key] = (_probe_addmm_out_dtype if gemm == "addmm" else _probe_mm_out_dtype)(device, dtype)
    return _PROBED[key]


def adds_half_products_in_place(accumulator: torch.Tensor, dtype: torch.dtype) -> bool:
    """Whether a product in the half `dtype` can be added into this float32 (V, H) accumulator inside the GEMM,
    `torch.addmm(acc, a, b, out_dtype=torch.float32, out=acc)` (cuBLAS with β = 1, or β = 0 to write it, a float32 C
    from half-precision A and B): on CUDA where torch accepts a float32 `self` there (from 2.10 on,
    pytorch/pytorch#167931), found out once per device and dtype by small calls whose results are checked. Elsewhere
    (a CPU has no such overload) the product is a half-precision (V, H) temporary added to the accumulator."""
    if accumulator.device.type != "cuda" or accumulator.dtype != torch.float32 or dtype not in HALF_DTYPES:
        return False
    return _available("addmm", accumulator.device, dtype)


def writes_half_products_in_float32(out: torch.Tensor, dtype: torch.dtype) -> bool:
    """Whether the product of two matrices in the half `dtype` can be written as float32 into `out` by the GEMM
    itself, `torch.mm(a, b, out_dtype=torch.float32, out=out)` (cuBLAS: half inputs, float32 accumulation and
    output): on CUDA where torch has that overload, found out once per device and dtype by one checked call. Then a
    chunk's logits need no half (n, V) product and no pass casting it to float32. Elsewhere: False."""
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


def _accumulate_product(accumulator: torch.Tensor, a: torch.Tensor, b: torch.Tensor, unset: bool = False) -> None:
    """accumulator (V, H) += a (V, n) @ b (n, H), the product in the dtype of a and b with float32 accumulation;
    `unset`: the accumulator holds no value yet (uninitialised memory): accumulator = a @ b, written by the GEMM
    (β = 0: its old content is never read, NaN or not) instead of added to a zeroed buffer."""
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
    """d b += rᵀ d z, d w += d zᵀ · diag(r) h and d h (n, H) = diag(r) (d z ∘ s) · w into `grads.h`, for the row
    weights r (n,) (None: already in d z) and the column scale s (V,) (None: ones; `grads.w` then accumulates the
    gradient of the scaled weight s ∘ w, which `_run` turns into those of w and s); the weights scale (n, H) blocks,
    never the (n, V) one; the products in the dtype of h and w (d z rounded to it once), accumulators in float32.
    `grad_z` may be overwritten."""
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
    """The chunk in eager PyTorch: one (n, V) logits buffer, turned into the log-probabilities and then the gradient
    in place. The full-support log-softmax is one row-wise pass (`torch.log_softmax(z, out=z)`: each row's maximum,
    sum and result while the row sits in cache), so the block is read from memory twice (log-softmax, exp) between
    the GEMMs instead of once per elementwise operation."""

    name = "eager"

    def available(self, device: torch.device) -> bool:
        return True  # any device PyTorch runs on

    @staticmethod
    def logits(h, w, b, y, t, opts: ChunkOptions, out: torch.Tensor | None = None, pred=None):
        """z (n, V): the products with the column scale and bias, soft-capped, the target's logit replaced by t
        (capped too) (in `out` when given), and the row indices (n,). `pred` (n, 1) or (n, 2): gets each row's argmax
        (and its target's rank) before the replacement (`ChunkKernel.loss`, `predict`)."""
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
    def log_softmax_(z, rows, y, smooth: float, lse: torch.Tensor | None = None) -> torch.Tensor:
        """z (n, V) becomes log p (n, V) in place; the losses (n,): −log p_iy, with label smoothing ε
        (1 − ε)(−log p_iy) − ε mean_c log p_ic, i.e. (1 − ε)(lse_i − z_iy) + ε(lse_i − mean_c z_ic). `lse` (n,): gets
        each row's log-sum-exp, z_iy − log p_iy (the target's logit read before the pass: no pass of its own)."""
        target_z = None if lse is None else z[rows, y]  # (n,)
        torch.log_softmax(z, dim=1, out=z)  # one row-wise pass, in place
        loss = -z[rows, y]  # (n,)
        if lse is not None:
            lse.copy_(target_z + loss)
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

    def loss(self, h, w, b, y, t, opts, lse=None, pred=None, ent=None):
        z, rows = self.logits(h, w, b, y, t, opts, pred=pred)
        if not opts.criterion.softmax:  # a sigmoid criterion (BCE, MSE): its terms over the buffer
            return opts.criterion.terms_(z, rows, y)
        if self._selects(opts, z.shape[1]):
            loss, vals, _, row_lse = self.top_k_loss(z, rows, y, opts.top_k, opts.label_smoothing)
            if lse is not None:
                lse.copy_(row_lse)
            if ent is not None:
                ent.copy_(entropy_terms(vals - row_lse[:, None], None)[0])
            return loss
        loss = self.log_softmax_(z, rows, y, opts.label_smoothing, lse)  # z: log p
        if ent is not None:
            ent.copy_(entropy_terms(z, None)[0])
        return loss

    def loss_and_grads(
        self, h, w, b, y, t, opts, row_weight, grads, lse=None, z_weight=None, pred=None, ent=None, ent_weight=None
    ):
        sparse = self._selects(opts, w.shape[0]) and t is None and opts.criterion.softmax
        path = self._sparse if sparse else self._dense
        return path(h, w, b, y, t, opts, row_weight, grads, lse, z_weight, pred, ent, ent_weight)

    @staticmethod
    def z_loss_coefficient(opts: ChunkOptions, row_weight, z_weight, lse: torch.Tensor) -> torch.Tensor:
        """(n,) r_i + 2λ u_i lse_i: what multiplies p_ic in d(r_i · loss_i + u_i · λ · lse_i²) / d z_ic (row weight r,
        z-loss weight u, default r; λ = `opts.z_loss`)."""
        rw = row_weight.to(lse.dtype)
        return rw + (2.0 * opts.z_loss) * (rw if z_weight is None else z_weight.to(lse.dtype)) * lse

    def _dense(
        self, h, w, b, y, t, opts, row_weight, grads: Grads, lse=None, z_weight=None, pred=None, ent=None,
        ent_weight=None,
    ):  # fmt: skip
        """d loss / d z (n, V) written over the logits buffer, then the three GEMMs; with `ent_weight` e (n,) the
        gradient also takes that of Σ_i e_i H_i, H_i the entropy of row i's softmax (written into `ent`)."""
        z, rows = self.logits(h, w, b, y, t, opts, grads.logits, pred)
        smooth, top_k = opts.label_smoothing, opts.top_k
        slope = None if opts.softcap is None else _capped_slope(z, opts.softcap)  # (n, V): d capped / d raw
        z_loss = opts.z_loss > 0 and opts.criterion.softmax
        if z_loss and lse is None:
            lse = z.new_empty(z.shape[0], dtype=torch.promote_types(z.dtype, torch.float32))
        rw = row_weight.to(z.dtype)
        weighted = False  # whether the row weights are in d z already (the z-loss's p_ic coefficient carries them)
        extra = z_loss or ent_weight is not None  # the row weights go into d z (an entropy term carries none)
        # d loss_i / d z_ic = p_ic - (1 - ε)[c = y_i] - ε / |support| (p: softmax over the row or over its top k);
        # with the z-loss, p_ic (r_i + 2λ u_i lse_i) - r_i ((1 - ε)[c = y_i] + ε / |support|)
        if not opts.criterion.softmax:  # a sigmoid criterion: its d / d z over the logits buffer
            loss = opts.criterion.terms_(z, rows, y)
            grad_z = z
        elif self._selects(opts, z.shape[1]):
            loss, vals, idx, row_lse = self.top_k_loss(z, rows, y, top_k, smooth)
            if lse is not None:
                lse.copy_(row_lse)
            row_ent, ent_grad = entropy_terms(vals - row_lse[:, None], ent_weight)  # (n,), (n, k) or None
            if ent is not None:
                ent.copy_(row_ent)
            p = torch.exp(vals - row_lse[:, None])  # (n, k)
            if extra:
                coef = self.z_loss_coefficient(opts, row_weight, z_weight, row_lse) if z_loss else rw
                p = p * coef[:, None] - (rw * smooth / top_k)[:, None]
                if ent_grad is not None:
                    p += ent_grad
                weighted = True
            else:
                p -= smooth / top_k
            grad_z = torch.zeros_like(z)
            grad_z.scatter_(1, idx, p)
        else:
            loss = self.log_softmax_(z, rows, y, smooth, lse)  # z: log p
            ent_grad = None
            if ent is not None or ent_weight is not None:
                row_ent, ent_grad = entropy_terms(z, ent_weight)  # (n,), (n, V) or None
                if ent is not None:
                    ent.copy_(row_ent)
            grad_z = z.exp_()  # (n, V), over the logits buffer
            if extra:
                coef = self.z_loss_coefficient(opts, row_weight, z_weight, lse) if z_loss else rw
                grad_z.mul_(coef.to(z.dtype)[:, None])
                weighted = True
                if smooth:
                    grad_z -= (rw * (smooth / z.shape[1]))[:, None]
                if ent_grad is not None:
                    grad_z += ent_grad
            elif smooth:
                grad_z -= smooth / z.shape[1]
        if opts.criterion.softmax:
            grad_z[rows, y] -= (1.0 - smooth) * rw if weighted else 1.0 - smooth
        if slope is not None:
            grad_z *= slope
        if grads.t is not None:
            grads.t.copy_(grad_z[rows, y] if weighted else grad_z[rows, y] * rw)  # (n,)
            grad_z[rows, y] = 0.0  # the replaced entry does not depend on h · w_y
        # the row weights on (n, H) blocks, unless d z carries them
        _linear_grads(grad_z, h, w, grads, None if weighted else row_weight, opts.column_scale)
        return loss

    def _sparse(
        self, h, w, b, y, t, opts, row_weight, grads: Grads, lse=None, z_weight=None, pred=None, ent=None,
        ent_weight=None,
    ):  # fmt: skip
        """top_k < V, no replaced target logit: only the k kept logits and the target's have a gradient, so it
        gathers / scatters k+1 rows of W per token instead of two dense (n, V) x (V, H) products."""
        z, rows = self.logits(h, w, b, y, t, opts, grads.logits, pred)
        smooth, top_k = opts.label_smoothing, opts.top_k
        loss, vals, idx, row_lse = self.top_k_loss(z, rows, y, top_k, smooth)
        if lse is not None:
            lse.copy_(row_lse)
        target_z = z[rows, y]  # (n,)
        rw = row_weight.to(vals.dtype)
        coef = torch.exp(vals - row_lse[:, None])  # (n, k)
        if opts.z_loss > 0:
            coef = coef * self.z_loss_coefficient(opts, row_weight, z_weight, row_lse)[:, None]
        else:
            coef = coef * rw[:, None]
        if smooth:
            coef -= (rw * (smooth / top_k))[:, None]
        if ent is not None or ent_weight is not None:
            row_ent, ent_grad = entropy_terms(vals - row_lse[:, None], ent_weight)
            if ent is not None:
                ent.copy_(row_ent)
            if ent_grad is not None:
                coef = coef + ent_grad
        cols = torch.cat([idx, y[:, None]], dim=1)  # (n, k+1); the target may repeat a kept column
        coef = torch.cat([coef, (-(1.0 - smooth) * rw)[:, None]], dim=1)
        if opts.softcap is not None:
            coef = coef * _capped_slope(torch.cat([vals, target_z[:, None]], dim=1), opts.softcap)
        coef_h = coef if opts.column_scale is None else coef * opts.column_scale[cols]  # d z ∘ s for d h
        torch.bmm(coef_h[:, None, :].to(w.dtype), w[cols], out=grads.h[:, None, :])  # (n, 1, H)
        if grads.w is not None:
            if grads.w_unset:  # scattered into: zeroed first
                grads.w.zero_()
            grads.w.index_add_(0, cols.reshape(-1), (coef[:, :, None] * h[:, None, :]).reshape(-1, h.shape[1]))
        if grads.b is not None:
            grads.b.index_add_(0, cols.reshape(-1), coef.reshape(-1))
        return loss


def entropy_terms(logp: torch.Tensor, ent_weight: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor | None]:
    """For log-probabilities log p (n, S) over each row's support: the entropy H_i = −Σ_c p_ic log p_ic (n,) and, with
    `ent_weight` e (n,), d(Σ_i e_i H_i) / d x_ic = −e_i p_ic (log p_ic + H_i) (n, S) for the logits x the softmax
    took (H = lse − Σ_c p_c x_c, so d H / d x_c = p_c (Σ_d p_d x_d − x_c) = −p_c (log p_c + H)), else None."""
    p = logp.exp()
    ent = -(p * logp).sum(1)
    if ent_weight is None:
        return ent, None
    return ent, p.mul_(logp + ent[:, None]).mul_(-ent_weight.to(logp.dtype)[:, None])


def predict(z: torch.Tensor, y: torch.Tensor, rank: bool = True) -> torch.Tensor:
    """(n, 2) int64 for logits z (n, V) and targets y (n,): each row's argmax (the lowest index wins a tie, as
    `torch.argmax`) and its target's rank, the number of classes the argmax order puts before the target (a larger
    logit, or an equal one at a lower index): the target is among the top k predictions iff its rank < k, and the
    argmax iff its rank is 0. Without `rank`, (n, 1): the argmax alone (the rank costs passes over z of its own)."""
    argmax = torch.argmax(z, dim=1)[:, None]  # (n, 1)
    if not rank:
        return argmax
    own = z.gather(1, y[:, None])  # (n, 1)
    before = torch.arange(z.shape[1], device=z.device) < y[:, None]  # (n, V)
    ahead = torch.count_nonzero(torch.where(before, z >= own, z > own), dim=1)  # (n,)
    return torch.cat([argmax, ahead[:, None]], dim=1)


def _grad_logits(
    z, y, t, row_weight, top_k: int | None, smooth: float, softcap: float | None, sigmoid_terms_=None,
    b=None, s=None, grad_dtype: torch.dtype | None = None, z_loss: float = 0.0, z_weight=None,
    want_pred: int = 0, want_ent: bool = False, ent_weight=None,
):  # fmt: skip
    """Functional per-chunk math from the products z (n, V) = h wᵀ, the column scale s (V,) and the bias b (V,) applied
    first (s ∘ z + b; either may be None): (losses (n,), d loss / d (s ∘ z + b) (n, V) weighted by `row_weight` (the
    replaced target's entry zeroed; in `grad_dtype` when given: the next GEMMs' half dtype), d loss / d t (n,) or None,
    the rows' log-sum-exp (n,) or None for a sigmoid criterion (`sigmoid_terms_`: its `Criterion.terms_`; None:
    cross-entropy), each row's argmax and target rank before the target's replacement
    (n, `want_pred` columns: 1 the argmax, 2 with the rank; `predict`), else None). With `z_weight` (n,) the gradient
    also takes that of Σ_i z_weight_i · `z_loss` · lse_i² (the losses do not); with `ent_weight` (n,) that of Σ_i
    ent_weight_i · H_i, and the entropies H (n,) are a sixth output when `want_ent` (else None; `entropy_terms`). What
    `CompiledKernel` fuses, so the scale, the bias and the cast of the gradient cost no pass of their own over the
    block."""
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
    target_z = z[rows, y]  # (n,)
    num = z.shape[1]
    rw = row_weight.to(z.dtype)
    lse = ent = None
    if sigmoid_terms_ is not None:  # a sigmoid criterion (the full BCE / MSE): its terms on a copy of the block
        grad_z = z.clone()
        loss = sigmoid_terms_(grad_z, rows, y)
        grad_z = grad_z * rw[:, None]
    else:  # p_ic (r_i + 2λ u_i lse_i) − r_i ((1 − ε)[c = y_i] + ε / |support|) over the support (u: the z-loss weight)
        if top_k is not None and top_k < num:
            vals, idx = torch.topk(z, top_k, dim=1)  # (n, k)
            lse = torch.logsumexp(vals, dim=1)
            mean_z = vals.mean(dim=1)
        else:
            lse = torch.logsumexp(z, dim=1)
            mean_z = z.mean(dim=1)
        coef = rw if z_weight is None else rw + 2.0 * z_loss * z_weight.to(z.dtype) * lse  # (n,)
        selects = top_k is not None and top_k < num
        ent_grad = None
        if want_ent or ent_weight is not None:
            ent, ent_grad = entropy_terms((vals if selects else z) - lse[:, None], ent_weight)
        if selects:
            kept = torch.exp(vals - lse[:, None]) * coef[:, None] - (rw * (smooth / top_k))[:, None]
            kept = kept if ent_grad is None else kept + ent_grad
            grad_z = torch.zeros_like(z).scatter(1, idx, kept)
        else:
            grad_z = torch.exp(z - lse[:, None]) * coef[:, None] - (rw * (smooth / num))[:, None]
            grad_z = grad_z if ent_grad is None else grad_z + ent_grad
        loss = lse - target_z
        if smooth:
            loss = (1 - smooth) * loss + smooth * (lse - mean_z)
        grad_z = grad_z.index_put((rows, y), grad_z[rows, y] - (1.0 - smooth) * rw)
    if softcap is not None:
        grad_z = grad_z * (1.0 - (z / softcap).square())
    grad_t = None
    if t is not None:
        grad_t = grad_z[rows, y]
        grad_z = grad_z.index_put((rows, y), torch.zeros_like(grad_t))
    return loss, grad_z if grad_dtype is None else grad_z.to(grad_dtype), grad_t, lse, pred, ent


def _compile_isolated(fn, backend: str, limit: int):
    """`torch.compile(fn)` as a compiled region with room for `limit` recompiles. Where torch.compile takes
    `recompile_limit` and `isolate_recompiles` (torch >= 2.13; found by its signature) the region has its own limit;
    on an older torch the function runs with dynamo's process-wide limit raised to `limit` while it is called (the
    config name probed too), so its variants compile there as well instead of falling back to eager."""
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
    """The eager kernel's GEMMs with the per-chunk softmax / margin / top-k / smoothing / soft-cap math of the
    gradient (`_grad_logits`) compiled by `torch.compile` (inductor: C++ on a CPU, Triton on a GPU) into a few fused
    passes over the (n, V) block. The first call per option set compiles (seconds); the top-k-only sparse path keeps
    the eager gather / scatter of k+1 rows."""

    name = "compiled"
    backend = "inductor"
    # One compiled region of its own (not sharing the recompiles of other torch.compile calls of the function) with
    # room for every variant a process meets: each criterion, top-k or not, a replaced target logit or not, a
    # soft-cap or not, a bias or not, a column scale or not, a z-loss or not, predictions or not, float32 or float64
    # logits (512 graphs; under dynamo's default limit of 8 the ninth and later ran `_grad_logits` eagerly, silently
    # slower).
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
