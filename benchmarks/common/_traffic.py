"""Bytes an output-layer step moves through memory, by the implementation's own passes (the benchmarks' "GB moved").

The count is the compulsory traffic of every kernel call over the two large kinds of buffer: each (rows, V) and
(V, H) operand a call reads is read once, each it writes is written once (a GEMM's operands included: a product per
chunk reads all of W once per chunk). Re-reads inside a tiled kernel (served by L2 or not), the (N, H) and (V,)
buffers and the loss scalars are left out. So for N rows, H hidden, V classes, per step (forward + backward):

    bytes = Σ_passes over (rows, V) buffers  rows · V · itemsize  +  Σ_passes over (V, H) buffers  V · H · itemsize

with rows summing to N over the chunks, and one (V, H) pass per chunk for each product that reads W or adds into
the (V, H) gradient. The passes of each implementation are listed in `step_bytes` next to the code they count
(hf_heads.losses.fused_linear / kernels / triton_kernel; Liger-Kernel's fused_linear_cross_entropy.py; Cut
Cross-Entropy's cce.py; torch's linear, log_softmax and nll_loss). Every method ends the same way, adding its
weight gradient into a preallocated `.grad` (read both, write one: three (V, H) passes in the weight's dtype).
"""

from __future__ import annotations

import math

IMPLEMENTATIONS = (
    "naive",  # F.cross_entropy(F.linear(h, W, b), y) (under autocast: a half GEMM, log_softmax to float32)
    "naive-upcast",  # the same with the logits cast to float32 first (transformers' ForCausalLMLoss)
    "floor",  # three bare GEMMs into one reused (N, V) buffer, inputs already in the GEMM dtype
    "hf_heads-eager",
    "hf_heads-compiled",
    "hf_heads-triton",
    "hf_heads-triton-half",
    "liger",
    "cce",
)


def liger_chunk_rows(n: int, hidden: int, vocab: int) -> int:
    """Liger-Kernel's rows per chunk: next_power_of_2(ceil(N / ceil(V / H))), at most N."""
    inc = math.ceil(vocab / hidden)
    return min(n, 1 << max(0, math.ceil(math.log2(math.ceil(n / inc)))))


def step_bytes(
    impl: str,
    n: int,
    hidden: int,
    vocab: int,
    *,
    gemm: int = 4,
    weight: int = 4,
    chunk_rows: int | None = None,
    bias: bool = True,
    frozen: bool = False,
    autocast_log_softmax: bool = False,
    in_place_dw: bool = True,
    scales_by_grad_out: bool = False,
    column_scale: bool = False,
    zeroes_dw: bool = False,
    gemm_writes_float32: bool = False,
    bias_in_kernel: bool | None = None,
    grad_in_gemm_dtype: bool = True,
    rounds_while_scaling: bool = True,
    word_norm: bool = False,
    top_k: int | None = None,
    unit_d_loss_skipped: bool = True,
) -> dict[str, int]:
    """The bytes of one forward + backward step of `impl` (one of `IMPLEMENTATIONS`), itemised: "(rows, V)" and
    "(V, H)" totals and the step's sum "total".

    gemm: itemsize of the products' dtype (2 under bf16 / fp16 autocast or half weights, 4 in float32);
    weight: itemsize of the weight parameter (4: float32 master weights; 2: a half model); chunk_rows: the rows per
    chunk of a chunked method (hf_heads: its chunk engine's; Liger: `liger_chunk_rows` when None); bias: a bias is
    added (and its gradient summed); frozen: W has no gradient; autocast_log_softmax: the naive row's log_softmax
    is autocast's (a half input, float32 output and gradient, the gradient handed back in the half dtype);
    in_place_dw: hf_heads adds each chunk's half-precision weight product into the float32 accumulator inside the
    GEMM (`adds_half_products_in_place`; else a half (V, H) temporary per chunk); scales_by_grad_out: hf_heads'
    backward multiplies its gradients by d loss (on an accelerator, where it does not read d loss on the host);
    column_scale: a margin head's word-norm column scale s (its (V, H) norms' passes are not counted).

    The last four describe hf_heads' kernels, their defaults the code as it is, so that each change can be judged by
    its count: zeroes_dw (before: True), the float32 d W accumulator zeroed instead of written by the first chunk's
    product; gemm_writes_float32, a half product written as float32 logits by the GEMM itself (CUDA's
    `mm(out_dtype=float32)` where `writes_half_products_in_float32` finds it; else a half product and a cast);
    bias_in_kernel (default: True for the compiled and Triton kernels; before: False), s ∘ z + b applied inside
    their math rather than in a pass of its own; grad_in_gemm_dtype (before: False), the compiled and Triton kernels
    writing d z of float32 logits in the products' dtype (no cast pass); rounds_while_scaling (before: False), the
    float32 d W accumulator scaled by d loss and a word norm's column scale and rounded to a half weight's dtype in one
    pass, not a pass for each; unit_d_loss_skipped (before: False), on an accelerator a float32 gradient multiplied by
    d loss in place by a Triton program that reads d loss on the device and moves nothing when it is 1
    (hf_heads.losses.triton_kernel.scale_in_place; this count takes d loss = 1, the mean loss's): with float32 master
    weights and no word norm, no d loss pass over (V, H).

    word_norm: a margin head's word norm f(c) / ‖W_c‖ (hf_heads.losses.scorer), the passes it adds over (V, H)
    besides the column scale's: ‖W_c‖ reads W; d s_c = A_c · w_c reads the accumulator A and W; d W = s ∘ A scales A
    (see rounds_while_scaling); the norms' backward adds d‖W_c‖ ∘ W into d W (reads W and d W, writes d W). Implies
    column_scale.

    top_k: a sparse head's k < V (hf_heads.losses.kernels.EagerKernel._sparse, which every kernel runs for it): the
    logits GEMM and `torch.topk` over each chunk's block; only the k kept columns and the target's have a gradient,
    so d h and d W gather / scatter k + 1 rows of W per token instead of two (rows, V) x (V, H) GEMMs. Those row-wise
    passes (N (k + 1) H entries) are counted on the (V, H) side: they are the weight's traffic."""
    if impl not in IMPLEMENTATIONS:
        raise ValueError(f"impl={impl!r}; allowed: {', '.join(IMPLEMENTATIONS)}")
    nv, vh = n * vocab, vocab * hidden
    d_loss_pass = scales_by_grad_out and not (unit_d_loss_skipped and weight == 4)  # in place: none at d loss = 1
    rows: dict[str, int] = {}
    mats: dict[str, int] = {}
    acc = 4  # float32 accumulators

    def grad_into_dot_grad(size: int) -> None:
        if not frozen:
            mats["add into .grad: read both, write one"] = 3 * vh * size

    def logits_written(workspace: int) -> None:  # hf_heads' logits GEMM into a chunk's workspace of that itemsize
        if workspace == gemm:
            rows["logits GEMM writes the workspace"] = nv * gemm
        elif gemm_writes_float32:
            rows["logits GEMM writes float32 logits (mm out_dtype)"] = nv * workspace
        else:
            rows["logits GEMM writes a half product"] = nv * gemm
            rows["product cast to the float32 workspace (read, write)"] = nv * (gemm + workspace)

    if impl in ("naive", "naive-upcast"):
        half = gemm < 4
        if weight != gemm:
            mats["cast W to the GEMM dtype (read, write)"] = vh * (weight + gemm)
        mats["forward GEMM reads W"] = vh * gemm
        mats["d h GEMM reads W"] = vh * gemm
        rows["forward GEMM writes the logits"] = nv * gemm
        upcast = impl == "naive-upcast" and half
        if upcast:
            rows[".float() copy of the logits (read, write)"] = nv * (gemm + 4)
        # log_softmax's output dtype and that of the gradient it hands back: float32 after the upcast; autocast's
        # log_softmax writes float32 from a half input and hands a half gradient back; else the logits' dtype
        lsm, back = (4, 4) if upcast else (4, gemm) if autocast_log_softmax and half else (gemm, gemm)
        rows["log_softmax (read, write)"] = nv * ((4 if upcast else gemm) + lsm)
        rows["nll_loss backward: zeroed gradient"] = nv * lsm
        rows["log_softmax backward (read gradient and output, write)"] = nv * (2 * lsm + back)
        if upcast:
            rows[".float() backward (read, write)"] = nv * (4 + gemm)
        rows["d h and d W GEMMs read d z"] = nv * gemm * (1 if frozen else 2)
        if bias:
            rows["d b: sum of d z"] = nv * gemm
        if not frozen:
            mats["d W GEMM writes"] = vh * gemm
            if weight != gemm:
                mats["cast d W to the weight's dtype (read, write)"] = vh * (gemm + weight)
        grad_into_dot_grad(weight)
    elif impl == "floor":
        rows["three GEMMs: write z, read it twice"] = 3 * nv * gemm
        mats["three GEMMs: read W twice, write d W"] = 3 * vh * gemm
    elif impl.startswith("hf_heads") and top_k is not None and top_k < vocab:
        chunks = math.ceil(n / (chunk_rows or n))
        kept = n * (top_k + 1) * hidden  # (N, k + 1, H): the kept columns' and the target's rows
        if weight != gemm:
            mats["cast W to the GEMM dtype once (read, write)"] = vh * (weight + gemm)
        mats["logits GEMM reads W, per chunk"] = chunks * vh * gemm
        mats["d h: W's k + 1 rows per token gathered (read, write), then read by the bmm"] = 3 * kept * gemm
        if not frozen:
            mats["zero the float32 d W accumulator (it is scattered into)"] = vh * acc
            mats["d W: the (N, k + 1, H) products written, read, added into their rows (read, write)"] = 4 * kept * acc
            if weight != acc or d_loss_pass:
                mats["d loss · d W in one pass (read, write)"] = vh * (acc + weight)
        grad_into_dot_grad(weight)
        workspace = 4  # the eager kernel's float32 logits
        logits_written(workspace)
        if bias:
            rows["+ b (read, write)"] = nv * 2 * workspace
        rows["torch.topk reads the block"] = nv * workspace
    elif impl.startswith("hf_heads"):
        kernel = impl.split("-", 1)[1]
        fused_math = kernel != "eager"  # the compiled and Triton kernels: bias, scale and gradient cast in their math
        chunks = math.ceil(n / (chunk_rows or n))
        workspace = gemm if (kernel == "triton-half" or gemm == 4) else 4
        if weight != gemm:
            mats["cast W to the GEMM dtype once (read, write)"] = vh * (weight + gemm)
        mats["logits GEMM reads W, per chunk"] = chunks * vh * gemm
        mats["d h GEMM reads W, per chunk"] = chunks * vh * gemm
        if not frozen:
            if zeroes_dw:
                mats["zero the float32 d W accumulator"] = vh * acc
                adds = chunks
            else:  # the first chunk's product writes the accumulator (beta = 0, or the temporary copied in)
                mats["first chunk's d W written into the accumulator"] = vh * acc
                adds = chunks - 1
            if gemm == acc or in_place_dw:
                mats["d W GEMM adds into the accumulator (read, write), per later chunk"] = adds * vh * 2 * acc
            else:
                mats["d W product: half temporary written and read, per chunk"] = chunks * vh * 2 * gemm
                mats["temporary added to the accumulator (read, write), per later chunk"] = adds * vh * 2 * acc
            if word_norm:
                mats["word norm: d s = A_c · w_c reads A and W"] = vh * (acc + weight)
            if rounds_while_scaling and (weight != acc or d_loss_pass or word_norm):
                what = [w for w, on in (("s ∘", word_norm), ("d loss ·", scales_by_grad_out)) if on]
                name = " ".join(what) + " d W" + (", rounded to the weight's dtype" if weight != acc else "")
                mats[f"{name} in one pass (read, write)"] = vh * (acc + weight)
            else:
                if word_norm:
                    mats["word norm: d W = s ∘ A in place (read, write)"] = vh * 2 * acc
                if weight != acc:
                    mats["cast d W to the weight's dtype (read, write)"] = vh * (acc + weight)
                if d_loss_pass:
                    mats["backward: d W times d loss (read, write)"] = vh * 2 * weight
            if word_norm:
                mats["word norm backward: d W += d‖W_c‖ ∘ W (read both, write)"] = vh * 3 * weight
        if word_norm:
            mats["word norm: ‖W_c‖ reads W"] = vh * weight
        logits_written(workspace)
        in_kernel = fused_math if bias_in_kernel is None else bias_in_kernel
        if (bias or column_scale or word_norm) and not in_kernel:
            rows["s ∘ z + b (read, write)"] = nv * 2 * workspace
        # the gradient's dtype as the kernel writes it: the products' for the fused kernels, else the workspace's
        grad = gemm if (fused_math and grad_in_gemm_dtype) else workspace
        if kernel == "eager":
            rows["log_softmax in place (read, write)"] = nv * 2 * workspace
            rows["exp in place: the gradient (read, write)"] = nv * 2 * workspace
        elif kernel == "compiled":
            rows["compiled gradient: read twice, write a new block"] = nv * (2 * workspace + grad)
        else:
            rows["Triton row program: read twice, write the gradient once"] = nv * (2 * workspace + grad)
        if bias:
            rows["d b: sum of d z"] = nv * grad
        if grad != gemm:
            rows["d z cast to the GEMM dtype (read, write)"] = nv * (grad + gemm)
        if column_scale or word_norm:
            rows["d z ∘ s for d h (read, write)"] = nv * 2 * gemm
        rows["d h and d W GEMMs read d z"] = nv * gemm * (1 if frozen else 2)
        grad_into_dot_grad(weight)
    elif impl == "liger":
        chunks = math.ceil(n / (chunk_rows or liger_chunk_rows(n, hidden, vocab)))
        mats["logits GEMM reads W, per chunk"] = chunks * vh * gemm
        mats["d h GEMM reads W, per chunk"] = chunks * vh * gemm
        if not frozen:
            mats["zero d W"] = vh * weight
            mats["d W addmm into d W (read, write), per chunk"] = chunks * vh * 2 * weight
        rows["logits GEMM writes"] = nv * gemm
        if bias:
            rows["+ b (read, write)"] = nv * 2 * gemm
        rows["cross-entropy kernel: read twice, write the gradient once"] = nv * 3 * gemm
        rows["d h and d W GEMMs read d z"] = nv * gemm * (1 if frozen else 2)
        if bias:
            rows["d b: sum of d z"] = nv * gemm
        grad_into_dot_grad(weight)
    else:  # cce: no (rows, V) buffer; W read by the forward log-sum-exp and the backward kernel, d W zeroed and added
        mats["forward log-sum-exp kernel reads W"] = vh * gemm
        mats["backward kernel reads W"] = vh * gemm
        if not frozen:
            mats["d W zeroed, then its tiles added (read, write)"] = 3 * vh * gemm
        grad_into_dot_grad(weight)
    out = {f"(rows, V): {k}": v for k, v in rows.items()}
    out.update({f"(V, H): {k}": v for k, v in mats.items()})
    out["(rows, V)"] = sum(rows.values())
    out["(V, H)"] = sum(mats.values())
    out["total"] = out["(rows, V)"] + out["(V, H)"]
    return out


def gb_cell(counted: dict[str, int] | None) -> str:
    """'total GB ((rows, V) + (V, H))' of a `step_bytes` result, or '—' (not counted)."""
    if counted is None:
        return "—"
    total, rows, mats = (counted[k] / 1e9 for k in ("total", "(rows, V)", "(V, H)"))
    return f"{total:.3g} ({rows:.3g} + {mats:.3g})"


def kernel_changes_table(n: int = 8192, hidden: int = 2304, vocab: int = 256_000) -> str:
    """Markdown table: the bytes per step of the naive bf16 step and of hf_heads' Triton kernel under bf16 autocast
    (float32 master weights, a bias, the backward scaling by d loss), as the kernel was and with each change."""
    g = dict(n=n, hidden=hidden, vocab=vocab, gemm=2, weight=4)
    ours = dict(scales_by_grad_out=True)
    was = dict(ours, unit_d_loss_skipped=False)  # until the d loss multiply became a device-side program
    rows = [
        ("naive bf16 (autocast)", "naive", dict(autocast_log_softmax=True)),
        ("naive bf16 + transformers' float32 upcast", "naive-upcast", dict(autocast_log_softmax=True)),
        ("hf_heads triton, 512-row chunks, before", "hf_heads-triton",
         dict(chunk_rows=512, zeroes_dw=True, bias_in_kernel=False, grad_in_gemm_dtype=False, **was)),
        ("+ d W written by the first chunk (no zeroing)", "hf_heads-triton",
         dict(chunk_rows=512, bias_in_kernel=False, grad_in_gemm_dtype=False, **was)),
        ("+ s ∘ z + b inside the row program", "hf_heads-triton",
         dict(chunk_rows=512, grad_in_gemm_dtype=False, **was)),
        ("+ d z written in bf16 by the program", "hf_heads-triton", dict(chunk_rows=512, **was)),
        ("+ float32 logits from the GEMM (mm out_dtype)", "hf_heads-triton",
         dict(chunk_rows=512, gemm_writes_float32=True, **was)),
        ("+ 1024-row chunks on a GPU", "hf_heads-triton", dict(chunk_rows=1024, gemm_writes_float32=True, **was)),
        ("+ d W left as it is where d loss = 1 (read on the device)", "hf_heads-triton",
         dict(chunk_rows=1024, gemm_writes_float32=True, **ours)),
        ("hf_heads triton-half, 1024-row chunks", "hf_heads-triton-half", dict(chunk_rows=1024, **ours)),
        ("triton, memory_budget=2048 (4 chunks of 2097 float32 rows)", "hf_heads-triton",
         dict(chunk_rows=2097, gemm_writes_float32=True, **ours)),
        ("triton-half, memory_budget=2048 (2 chunks of 4194 bf16 rows)", "hf_heads-triton-half",
         dict(chunk_rows=4194, **ours)),
        ("triton-half, memory_budget=4096 (one chunk)", "hf_heads-triton-half", dict(chunk_rows=8192, **ours)),
        ("margin with a word norm, triton, 1024-row chunks, s ∘ d W a pass of its own", "hf_heads-triton",
         dict(chunk_rows=1024, gemm_writes_float32=True, word_norm=True, rounds_while_scaling=False, **was)),
        ("+ s ∘ d W in the d loss pass", "hf_heads-triton",
         dict(chunk_rows=1024, gemm_writes_float32=True, word_norm=True, **ours)),
        ("sparse k=20 (every kernel runs the eager top-k path), 1024-row chunks", "hf_heads-triton",
         dict(chunk_rows=1024, gemm_writes_float32=True, top_k=20, **ours)),
        ("sparse k=20, memory_budget=2048 (4 chunks of 2097 float32 rows)", "hf_heads-triton",
         dict(chunk_rows=2097, gemm_writes_float32=True, top_k=20, **ours)),
    ]  # fmt: skip
    half = dict(n=n, hidden=hidden, vocab=vocab, gemm=2, weight=2, bias=False)
    rows += [
        ("bf16 weights, no bias: naive (no autocast)", "naive", half),
        ("bf16 weights, no bias: triton-half, 1024-row chunks, d W cast then scaled", "hf_heads-triton-half",
         dict(chunk_rows=1024, rounds_while_scaling=False, **half, **ours)),
        ("+ d W scaled while rounded to bf16 (one pass)", "hf_heads-triton-half",
         dict(chunk_rows=1024, **half, **ours)),
        ("+ memory_budget=2048 (2 chunks)", "hf_heads-triton-half", dict(chunk_rows=4194, **half, **ours)),
    ]  # fmt: skip
    lines = ["| step | GB moved | (rows, V) | (V, H) |", "|---|---:|---:|---:|"]
    for name, impl, kw in rows:
        r = step_bytes(impl, **{**g, **kw})
        lines.append(f"| {name} | {r['total'] / 1e9:.0f} | {r['(rows, V)'] / 1e9:.0f} | {r['(V, H)'] / 1e9:.0f} |")
    return "\n".join(lines)


if __name__ == "__main__":  # python benchmarks/common/_traffic.py [OUT.md]: the kernel changes at the Gemma-sized row
    import sys

    table = kernel_changes_table()
    print(table)
    if len(sys.argv) > 1:
        with open(sys.argv[1], "w") as out:
            out.write(
                "# Bytes per step of the chunk kernels, by their count (not a measurement)\n\n"
                "`python benchmarks/common/_traffic.py docs/results/kernel_traffic.md`: N = 8,192, H = 2,304, "
                "V = 256,000 under bf16 autocast, float32 master weights, a bias (benchmarks/common/_traffic.py: the "
                "passes counted).\n\n"
                f"{table}\n"
            )
