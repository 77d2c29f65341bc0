"""Mutants of the chunk engine and its kernels (eager, compiled, Triton) and of the loss paths every task model shares:
the fused loss's branches (training, loss-only evaluation, per-row losses; the CPU branch that compacts the ignored
rows and the accelerator branch that masks them), `num_items_in_batch` through the models, the trainer's word
counts, and the decoding scores of the continuous head."""

from __future__ import annotations

from mutants import Mutant, m, selection

T = "tests/test_kernels.py"
EVAL = "tests/test_eval_without_logits.py"
ON_ACCELERATOR = f"{T}::test_a_training_step_on_an_accelerator_reads_nothing_on_the_host"


def contract(*cases: str) -> tuple[str, ...]:
    """Node ids of the kernel contract (tests/test_kernels.py) for "kernel-options" cases, e.g. "eager-plain"."""
    return tuple(f"{T}::test_every_kernel_equals_the_naive_reference_and_passes_gradcheck[{c}]" for c in cases)


# fmt: off
MUTANTS: list[Mutant] = [
    # ---------------------------------------------------------------- the fused loss's branches
    m("eval-branch-sums-ignored-rows", "losses/fused_linear.py", "        return _kept(losses, keep).sum() * scale\n",
      "        return losses.sum() * scale\n",
      selection(f"{EVAL}::test_loss_only_evaluation_leaves_ignored_rows_out",
                f"{EVAL}::test_a_heads_eval_loss_with_ignored_rows_is_the_naive_mean"),
      "loss-only evaluation on an accelerator sums the ignored rows' losses into the mean"),
    m("eval-branch-drops-column-scale", "losses/fused_linear.py",
      "losses, _ = _run(h, w, b, y, t, opts.with_scale(s), eval_chunk, gemm)",
      "losses, _ = _run(h, w, b, y, t, opts, eval_chunk, gemm)",
      selection(f"{EVAL}::test_a_heads_eval_loss_with_ignored_rows_is_the_naive_mean",
                "tests/test_eval_without_logits.py::test_fused_loss_without_gradients_is_the_same_loss"),
      "loss-only evaluation leaves out a margin head's word-norm column scale"),
    m("rows-on-accelerator-ignored-kept", "losses/fused_linear.py",
      "rows = _kept(_FusedLinearCERows.apply(h, w, b, t, s, y, opts, chunk, gemm, weight_grad), keep)",
      "rows = _FusedLinearCERows.apply(h, w, b, t, s, y, opts, chunk, gemm, weight_grad)",
      selection(ON_ACCELERATOR),
      "reduction='none' on an accelerator reports a loss on the ignored rows"),
    m("grad-out-never-scales", "losses/fused_linear.py",
      "if not (host_reads_are_free(grad_out.device) and bool(grad_out == 1)):", "if False:",
      selection(f"{T}::test_the_gradients_computed_in_the_forward_are_scaled_by_the_incoming_gradient"),
      "a reduced loss's gradients are not scaled by the incoming gradient (a loss × 2.5 trains as × 1)"),
    m("rows-backward-ignores-grad-out", "losses/fused_linear.py",
      "row_weight=grad_out, needs=ctx.needs_input_grad[:5])",
      "row_weight=torch.ones_like(grad_out), needs=ctx.needs_input_grad[:5])",
      selection("tests/test_reduction_shapes.py", f"{ON_ACCELERATOR}[plain-none]"),
      "reduction='none''s backward weights every row by 1, not by its incoming gradient"),
    m("none-returns-flat-rows", "losses/fused_linear.py", 'return reduce_rows(rows, valid, target.shape, "none")',
      'return reduce_rows(rows, valid, valid.shape, "none")', selection("tests/test_reduction_shapes.py"),
      "reduction='none' returns a flat (N,) instead of the labels' shape"),
    m("weight-grad-zeroed-first", "losses/fused_linear.py",
      "grad_w = torch.empty(w.shape, dtype=accumulate, device=w.device) if wants_a else None",
      "grad_w = torch.zeros(w.shape, dtype=accumulate, device=w.device) if wants_a else None",
      selection(f"{T}::test_the_first_chunk_writes_the_weight_gradient_no_pass_zeroes_it[eager-plain]"),
      "the (V, H) weight-gradient accumulator is zeroed first: one needless pass over V·H floats per step"),
    m("first-chunk-adds-to-unset-buffer", "losses/kernels.py", "beta = 0.0 if unset else 1.0", "beta = 1.0",
      selection(f"{T}::test_the_first_chunk_writes_the_weight_gradient_no_pass_zeroes_it[eager-plain]"),
      "the first chunk adds its product to the uninitialised accumulator (garbage in d W)"),
    # ---------------------------------------------------------------- the chunk engine
    m("accelerator-chunks-cpu-sized", "losses/chunks.py", "        rows = max(rows, min(cap, -(-num_rows // 8)))\n",
      "", selection(f"{T}::test_chunks_fit_the_memory_budget_and_cover_every_row_once"),
      "on a GPU the chunks keep the CPU's 32 MiB budget: twice the (V, H) traffic at the Gemma-sized row"),
    m("chunk-loop-drops-last-row", "losses/chunks.py", "for start in range(0, num_rows, step):  # the one chunk loop",
      "for start in range(0, num_rows - 1, step):  # the one chunk loop",
      selection(f"{T}::test_chunks_fit_the_memory_budget_and_cover_every_row_once", *contract("eager-plain")),
      "the chunk loop stops one row early: the last chunk is lost when N − 1 is a multiple of the chunk size"),
    m("env-overrides-explicit-kernel", "losses/chunks.py",
      "chosen = name or from_env or chosen_in_context or automatic_kernel(device)",
      "chosen = from_env or name or chosen_in_context or automatic_kernel(device)",
      selection(f"{T}::test_kernel_choice_by_name_head_option_environment_and_device",
                f"{T}::test_the_triton_kernel_checks_itself_against_eager_before_its_first_use"),
      "HF_HEADS_CHUNK_KERNEL overrides a kernel named explicitly (a kernel's self-check compares it with itself)"),
    # ---------------------------------------------------------------- eager and compiled kernels
    m("bias-grad-ignores-row-weight", "losses/kernels.py",
      "grad_z.sum(0, dtype=grads.b.dtype) if row_weight is None else row_weight.to(grad_z.dtype) @ grad_z",
      "grad_z.sum(0, dtype=grads.b.dtype)", selection(*contract("eager-plain", "compiled-plain", "triton-plain")),
      "the bias gradient ignores the row weights (1 / num_items_in_batch, the ignored rows' 0)"),
    m("grad-h-row-weight-dropped", "losses/kernels.py",
      "        grads.h.mul_(row_weight.to(grads.h.dtype)[:, None])\n", "        pass\n",
      selection(*contract("eager-plain", "triton-plain")), "d h of the dense path misses the row weights"),
    m("sparse-path-row-weight-dropped", "losses/kernels.py", "coef = coef * row_weight.to(coef.dtype)[:, None]",
      "coef = coef", selection(*contract("eager-top-k")), "the sparse top-k path's gradients miss the row weights"),
    m("sparse-bias-grad-dropped", "losses/kernels.py",
      "            grads.b.index_add_(0, cols.reshape(-1), coef.reshape(-1))\n", "            pass\n",
      selection(*contract("eager-top-k")), "the sparse top-k path gives the bias no gradient"),
    m("compiled-top-k-smoothing-over-all", "losses/kernels.py", "mean_z = vals.mean(dim=1)", "mean_z = z.mean(dim=1)",
      selection(*contract("compiled-top-k-smoothing-target")),
      "the compiled kernel smooths a sparse loss over all V logits, not the top k"),
    m("half-logits-through-a-half-copy", "losses/kernels.py",
      "z = torch.mm(h, w.T, out_dtype=out.dtype, out=out)", "z = torch.mm(h, w.T).to(out.dtype)",
      selection(f"{T}::test_half_products_are_written_as_float32_logits_by_the_gemm_where_mm_can[plain-eager]"),
      "half products' float32 logits go through a half (n, V) product and a cast (CUDA)"),
    m("triton-gradient-cast-by-a-pass", "losses/triton_kernel.py",
      "grad_z = z if z.dtype == w.dtype or w.dtype not in HALF_DTYPES else torch.empty_like(z, dtype=w.dtype)",
      "grad_z = z",
      selection(f"{T}::test_the_gradient_of_float32_logits_is_written_in_the_products_dtype[triton-plain]"),
      "the Triton kernel's float32 gradient is cast to the products' dtype by a pass of its own"),
    m("compiled-gradient-cast-by-a-pass", "losses/kernels.py",
      "w.dtype if w.dtype in HALF_DTYPES and z.dtype != w.dtype else None,", "None,",
      selection(f"{T}::test_the_gradient_of_float32_logits_is_written_in_the_products_dtype[compiled-plain]"),
      "the compiled kernel's float32 gradient is cast to the products' dtype by a pass of its own"),
    m("compiled-bias-dropped", "losses/kernels.py", "    if b is not None:\n        z = z + b\n", "",
      selection(*contract("compiled-plain")), "the compiled kernel's logits lose the bias"),
    m("with-scale-drops-criterion", "losses/chunks.py",
      "return ChunkOptions(self.top_k, self.label_smoothing, self.softcap, column_scale, self.criterion)",
      "return ChunkOptions(self.top_k, self.label_smoothing, self.softcap, column_scale)",
      selection(*contract("eager-bce-target-softcap-column-scale")),
      "options given another column scale fall back to the softmax criterion (a bce head trains softmax)"),
    # ---------------------------------------------------------------- the Triton row program
    m("triton-bias-flag-off", "losses/triton_kernel.py", "flags.update(HAS_B=b is not None, HAS_S=s is not None)",
      "flags.update(HAS_B=False, HAS_S=s is not None)", selection(*contract("triton-plain")),
      "the Triton row program leaves out the bias"),
    m("triton-scale-after-bias", "losses/_triton_rows.py",
      "    if HAS_S:  # the column scale s ∘ (h wᵀ), applied as the tile is read (no pass of its own over the "
      "logits)\n"
      "        x = x * tl.load(s_ptr + cols, mask=mask, other=1.0).to(t.dtype)\n"
      "    if HAS_B:  # likewise the bias\n"
      "        x = x + tl.load(b_ptr + cols, mask=mask, other=0.0).to(t.dtype)\n",
      "    if HAS_B:\n"
      "        x = x + tl.load(b_ptr + cols, mask=mask, other=0.0).to(t.dtype)\n"
      "    if HAS_S:\n"
      "        x = x * tl.load(s_ptr + cols, mask=mask, other=1.0).to(t.dtype)\n",
      selection(*contract("triton-column-scale-target-softcap")),
      "the Triton row program scales the bias too: s ∘ (h wᵀ + b)"),
    m("triton-row-weight-dropped", "losses/_triton_rows.py", "            g = g * weight\n",
      "            g = g\n", selection(*contract("triton-plain")),
      "the Triton kernel's gradient misses the row weights"),
    m("triton-smoothing-mean-off-by-one", "losses/_triton_rows.py",
      "smooth * (lse - z_sum / num_classes)", "smooth * (lse - z_sum / (num_classes - 1))",
      selection(*contract("triton-target-logit-softcap-smoothing")),
      "the Triton kernel's label-smoothed loss averages the logits over V − 1"),
    m("self-check-under-tf32", "losses/_rows.py", 'precision, matmul.fp32_precision = matmul.fp32_precision, "ieee"',
      "precision = matmul.fp32_precision", selection(f"{T}::test_the_self_check_compares_in_ieee_float32_under_tf32"),
      "the Triton kernel's self-check compares under the user's TF32 and refuses a correct kernel"),
    # ---------------------------------------------------------------- the task models, the trainer, decoding
    m("seq2seq-num-items-dropped", "modeling/seq2seq.py",
      "loss, logits = self._head_forward(hidden, labels, num_items_in_batch, self._wants_logits(labels))",
      "loss, logits = self._head_forward(hidden, labels, None, self._wants_logits(labels))",
      selection("tests/test_accumulation.py"),
      "HeadsForSeq2SeqLM drops num_items_in_batch: gradient accumulation is inexact for every seq2seq model"),
    m("trainer-overwrites-user-counts", "training/trainer.py",
      "        if model.head_needs_counts() and not head.has_word_counts:\n",
      "        if model.head_needs_counts():\n",
      selection("tests/test_accumulation.py::test_word_counts_the_user_set_are_kept_through_train"),
      "HeadsTrainer replaces the word counts the user set with the training set's"),
    m("continuous-decodes-raw-dot-product", "heads/continuous.py",
      "pred = F.normalize(pred, dim=-1) * self.logit_scale", "pred = pred",
      selection("tests/test_continuous_head.py::test_beam_search_scores_are_the_heads_decoding_scores"),
      "continuous margin / softmax heads decode with û·E instead of s · cos(û, E) (same argmax, other beam scores)"),
    m("automatic-kernel-without-its-dependency", "losses/chunks.py",
      "if device.type in kernel.automatic_on and kernel.automatic_available(device):",
      "if device.type in kernel.automatic_on:",
      selection("tests/test_kernels.py::test_kernel_choice_by_name_head_option_environment_and_device"),
      "CUDA tensors get the triton kernel where the triton package does not import"),
]
# fmt: on
