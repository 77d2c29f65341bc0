"""The Triton row program of hf_heads.losses.triton_kernel (its docstring has the math), imported by that module on
first use: Triton decides when it decorates whether a program is compiled or runs under its CPU interpreter."""

try:  # the saved code of a model carries this module: it loads where triton is not installed (and never runs there)
    import triton
    import triton.language as tl
except ImportError as err:
    raise ImportError("the Triton row program needs the triton package (pip install 'hf_heads[triton]')") from err


@triton.jit
def _tanh(x):
    return 1.0 - 2.0 / (tl.exp(2.0 * x) + 1.0)  # exact at ±inf; no libdevice call (the interpreter has none)


@triton.jit
def _softplus(x):
    return tl.maximum(x, 0.0) + tl.log(1.0 + tl.exp(-tl.abs(x)))  # 0 at -inf (a padding lane)


@triton.jit
def _sigmoid(x):
    return 1.0 / (1.0 + tl.exp(-x))  # 0 at -inf


@triton.jit
def _tile(
    z_row, cols, mask, t, cap, b_ptr, s_ptr, SOFTCAP: tl.constexpr, HAS_B: tl.constexpr, HAS_S: tl.constexpr,
):  # fmt: skip
    """The tile's logits with the target's own logit (soft-capped), -inf on padding lanes; the caller replaces the
    target's entry by the capped t (capping is elementwise: the same as capping the replaced tile)."""
    x = tl.load(z_row + cols, mask=mask, other=float("-inf")).to(t.dtype)  # the math in the compute dtype
    if HAS_S:  # the column scale s ∘ (h wᵀ), applied as the tile is read (no pass of its own over the logits)
        x = x * tl.load(s_ptr + cols, mask=mask, other=1.0).to(t.dtype)
    if HAS_B:  # likewise the bias
        x = x + tl.load(b_ptr + cols, mask=mask, other=0.0).to(t.dtype)
    if SOFTCAP:
        x = tl.where(mask, cap * _tanh(x / cap), float("-inf"))
    return x


@triton.jit
def ce_per_row(
    z_ptr,  # (n, V) products h wᵀ (float32, float64, or a half dtype)
    stride,
    g_ptr,  # (n, V) d loss / d z when GRAD, in its own dtype (the products' for the next GEMMs); may be z itself
    g_stride,
    b_ptr,  # (V,) bias (HAS_B), added to each tile as it is read
    s_ptr,  # (V,) column scale (HAS_S), multiplying each tile's products as they are read
    y_ptr,  # (n,) targets
    t_ptr,  # (n,) replaced target logits (HAS_T)
    weight_ptr,  # (n,) row weights (GRAD)
    loss_ptr,  # (n,) out
    grad_t_ptr,  # (n,) out (HAS_T and GRAD)
    num_classes,
    params_ptr,  # (3,) label smoothing ε, soft-cap and z-loss λ in the compute dtype (float32; float64 for float64)
    zw_ptr,  # (n,) z-loss row weights (Z_LOSS and GRAD)
    lse_ptr,  # (n,) out: each row's log-sum-exp (HAS_LSE)
    pred_ptr,  # (n, 1 + RANK) out: each row's argmax before the target's replacement, lowest index on a tie (PRED),
    # and its target's rank in that order (RANK)
    ent_ptr,  # (n,) out: each row's entropy H_i = lse_i − Σ_c p_ic x_ic (ENT)
    ew_ptr,  # (n,) entropy weights e_i: the gradient also takes that of Σ_i e_i H_i (ENT_GRAD; needs ENT)
    HAS_T: tl.constexpr,
    SOFTCAP: tl.constexpr,
    GRAD: tl.constexpr,
    BLOCK: tl.constexpr,
    CRITERION: tl.constexpr = 0,  # 0: softmax cross-entropy; 1: full BCE Σ softplus(z) − z_y; 2: full MSE Σ (σ − δ)²
    HAS_B: tl.constexpr = False,
    HAS_S: tl.constexpr = False,
    Z_LOSS: tl.constexpr = False,  # the gradient also of z_weight_i · λ · lse_i² (CRITERION 0)
    HAS_LSE: tl.constexpr = False,
    PRED: tl.constexpr = False,
    RANK: tl.constexpr = False,
    ENT: tl.constexpr = False,
    ENT_GRAD: tl.constexpr = False,
):
    row = tl.program_id(0)
    smooth = tl.load(params_ptr)
    cap = tl.load(params_ptr + 1)
    z_row = z_ptr + row.to(tl.int64) * stride
    g_row = g_ptr + row.to(tl.int64) * g_stride
    y = tl.load(y_ptr + row)
    offsets = tl.arange(0, BLOCK)
    zeros = tl.zeros([BLOCK], dtype=params_ptr.dtype.element_ty)  # the compute dtype: the params' (and t's, loss')
    t = tl.sum(zeros, 0)
    if HAS_T:
        t = tl.load(t_ptr + row)
        if SOFTCAP:
            t = cap * _tanh(t / cap)
    m = tl.max(zeros - float("inf"), 0)  # scalars in the compute dtype
    total = tl.sum(zeros, 0)
    z_sum = total
    z_y = total
    x_sum = total  # Σ_c exp(x_c − m) x_c, rescaled with m (ENT): its ratio to `total` is Σ_c p_c x_c
    # PRED keeps the first tile holding the row's maximum and rereads it after the loop for its lowest column (no
    # per-lane accumulator); RANK counts per lane the classes ahead of the target, reduced once after the loop
    best = m
    best_start = tl.sum(offsets * 0, 0)
    ahead_count = tl.zeros([BLOCK], dtype=tl.int32)
    if RANK:  # the target's own logit, as its tile reads it (the same elementwise math: equal bit for bit)
        own = tl.max(_tile(z_row, y + offsets * 0, offsets == 0, t, cap, b_ptr, s_ptr, SOFTCAP, HAS_B, HAS_S), 0)
    for start in range(0, num_classes, BLOCK):  # pass 1: online log-sum-exp (or Σ softplus / Σ σ²), target, row sum
        cols = start + offsets
        mask = cols < num_classes
        x = _tile(z_row, cols, mask, t, cap, b_ptr, s_ptr, SOFTCAP, HAS_B, HAS_S)
        top = tl.max(x, 0)  # the tile's maximum on the target's own logit (PRED), and the log-sum-exp's without t
        if PRED:  # padding lanes (-inf) never win
            best_start = tl.where(top > best, start, best_start)
            best = tl.maximum(best, top)
        if RANK:
            ahead = tl.where(cols < y, x >= own, x > own)  # padding lanes (-inf, at cols >= V > y) never count
            ahead_count += ahead.to(tl.int32)
        if HAS_T:
            x = tl.where(cols == y, t, x)
            top = tl.max(x, 0)
        if CRITERION == 0:
            m_new = tl.maximum(m, top)
            if ENT:  # padding lanes (x = -inf) add 0, not exp(-inf) · -inf
                x_sum = x_sum * tl.exp(m - m_new) + tl.sum(tl.exp(x - m_new) * tl.where(mask, x, 0.0), 0)
            total = total * tl.exp(m - m_new) + tl.sum(tl.exp(x - m_new), 0)
            m = m_new
        elif CRITERION == 1:
            total += tl.sum(_softplus(x), 0)
        else:
            sig = _sigmoid(x)
            total += tl.sum(sig * sig, 0)
        z_sum += tl.sum(tl.where(mask, x, 0.0), 0)
        z_y += tl.sum(tl.where(cols == y, x, 0.0), 0)
    lse = m + tl.log(total)
    mean_x = x_sum / total  # Σ_c p_c x_c (ENT)
    if HAS_LSE:
        tl.store(lse_ptr + row, lse)
    if ENT:
        tl.store(ent_ptr + row, lse - mean_x)
    if PRED:  # the winning tile again (equal bit for bit), its lowest column at the maximum; a row of NaN: column 0
        cols = best_start + offsets
        x = _tile(z_row, cols, cols < num_classes, t, cap, b_ptr, s_ptr, SOFTCAP, HAS_B, HAS_S)
        first = tl.min(tl.where(x == best, cols, num_classes), 0)
        tl.store(pred_ptr + (1 + RANK) * row, tl.where(first < num_classes, first, 0).to(tl.int64))
    if RANK:
        tl.store(pred_ptr + 2 * row + 1, tl.sum(ahead_count, 0).to(tl.int64))
    if CRITERION == 0:
        loss = (1.0 - smooth) * (lse - z_y) + smooth * (lse - z_sum / num_classes)
    elif CRITERION == 1:
        loss = total - z_y
    else:
        loss = total - 2.0 * _sigmoid(z_y) + 1.0
    tl.store(loss_ptr + row, loss)
    if GRAD:
        weight = tl.load(weight_ptr + row)
        coef = weight  # what multiplies p_ic: r_i, with the z-loss r_i + 2λ u_i lse_i
        if Z_LOSS:
            coef = weight + 2.0 * tl.load(params_ptr + 2) * tl.load(zw_ptr + row) * lse
        ent_weight = tl.sum(zeros, 0)
        if ENT_GRAD:
            ent_weight = tl.load(ew_ptr + row)
        grad_t = tl.sum(zeros, 0)
        for start in range(0, num_classes, BLOCK):  # pass 2: the gradient over the logits
            cols = start + offsets
            mask = cols < num_classes
            x = _tile(z_row, cols, mask, t, cap, b_ptr, s_ptr, SOFTCAP, HAS_B, HAS_S)
            if HAS_T:
                x = tl.where(cols == y, t, x)
            if CRITERION == 0:
                g = tl.exp(x - lse) * coef - weight * (smooth / num_classes)
                g = tl.where(cols == y, g - weight * (1.0 - smooth), g)
                if ENT_GRAD:  # d H / d x_c = p_c (Σ_d p_d x_d − x_c); 0 on padding lanes
                    g += tl.exp(x - lse) * ent_weight * (mean_x - tl.where(mask, x, 0.0))
            else:
                sig = _sigmoid(x)
                g = tl.where(cols == y, sig - 1.0, sig)  # BCE: σ − δ
                if CRITERION == 2:
                    g = 2.0 * g * sig * (1.0 - sig)  # MSE: 2(σ − δ)σ(1 − σ)
                g = g * weight
            if SOFTCAP:
                capped = tl.where(mask, x / cap, 0.0)  # padding lanes hold -inf
                g = g * (1.0 - capped * capped)
            if HAS_T:
                grad_t += tl.sum(tl.where(cols == y, g, 0.0), 0)
                g = tl.where(cols == y, 0.0, g)  # the replaced entry does not depend on h · w_y
            tl.store(g_row + cols, g.to(g_ptr.dtype.element_ty), mask=mask)  # rounded once to the gradient's dtype
        if HAS_T:
            tl.store(grad_t_ptr + row, grad_t)


@triton.jit
def scale_unless_one(x_ptr, factor_ptr, numel, BLOCK: tl.constexpr):
    """x *= factor in place, x contiguous (numel,), factor a one-element tensor in x's dtype read on the device: where
    it is 1 each program returns before touching x, so the backward's multiply by d loss = 1 moves no (V, H) bytes and
    needs no host read of d loss. The product is taken in float32 (float64 for float64) and rounded once into x, as
    `x.mul_(factor)` does (round to nearest even; Triton's CPU interpreter rounds bf16 toward zero)."""
    factor = tl.load(factor_ptr)
    if x_ptr.dtype.element_ty != tl.float64:
        factor = factor.to(tl.float32)
    if factor != 1.0:
        offsets = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
        mask = offsets < numel
        x = tl.load(x_ptr + offsets, mask=mask).to(factor.dtype)
        tl.store(x_ptr + offsets, (x * factor).to(x_ptr.dtype.element_ty), mask=mask)
