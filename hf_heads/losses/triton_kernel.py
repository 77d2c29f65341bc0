"""The hand-written Triton chunk kernel: the per-chunk softmax math of the fused cross-entropy in one program per row.

After the chunk's product h wᵀ (cuBLAS, in the GEMM dtype), one Triton program per row walks the row's V products
twice in tiles of `BLOCK` columns, making each tile the logits z = s ∘ (h wᵀ) + b as it reads it, with the replaced
target logit t_i (every margin: margin paper, eq. 13–14) and the soft-cap cap·tanh(z / cap):

1. the online log-sum-exp (running maximum and rescaled sum, as in FlashAttention / Liger-Kernel), the target logit,
   the row's sum of logits (label smoothing), the argmax and the target's rank;
2. (training) the gradient d loss_i / d z_ic = row_weight_i · (p_ic − (1 − ε)[c = y_i] − ε / V) · (1 − (z_ic /
   cap)²) written over the logits in place (or, for half products of float32 logits, into a half buffer ready for
   the next GEMMs), the target's entry moved to d t_i when the target logit was replaced; with the z-loss λ, p_ic
   carries the factor r_i + 2λ u_i lse_i.

So the (n, V) block is read twice and written once. The loss is lse_i − z_iy (label smoothing ε: (1 − ε)(lse_i −
z_iy) + ε(lse_i − mean_c z_ic), as `F.cross_entropy`). The sampling paper's sigmoid criteria take the same passes:
BCE (eq. 3) Σ_c softplus(z_ic) − z_iy with gradient σ(z_ic) − δ_cy, MSE (eq. 1) Σ_c σ(z_ic)² − 2σ(z_iy) + 1 with
gradient 2(σ − δ)σ(1 − σ). The top-k support (sparse-softmax paper, eq. 5) needs a selection and runs the eager
kernel.

Runs on CUDA (and ROCm) tensors, and on CPU tensors under Triton's interpreter (`TRITON_INTERPRET=1` before triton
is imported; for tests). Anything else is refused, never replaced by another kernel.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch

from hf_heads.components import register
from hf_heads.losses.chunks import ChunkOptions, Grads
from hf_heads.losses.kernels import EagerKernel, _linear_grads, _raw_logits
from hf_heads.losses.precision import HALF_DTYPES, full_precision
from hf_heads.losses.triton_programs import _interpreting, _triton, program, triton_available
from hf_heads.validation import OptionError


@register("kernel")
@dataclass(frozen=True)
class TritonKernel(EagerKernel):
    """The eager kernel's GEMMs around a hand-written Triton program for the per-row softmax / replaced target logit
    / soft-cap / label smoothing math (module docstring); `top_k` < V runs the eager kernel's top-k paths."""

    name = "triton"
    automatic_on = ("cuda",)
    # Nobody chose: half-precision products over at least this many classes run "triton-half". Measured on an H200
    # (bf16 autocast, docs/results/gpu_NVIDIA-H200_2026-11-27*.md and _2026-11-28.md): at V=256,000 (N=8192,
    # H=2304) triton-half took 0.97-0.99x the triton step in all four runs at 0.81x its memory; at V=50,000 (N=4096,
    # H=512) 1.01x at 0.70x its memory (one run). Sizes between the two were not measured; the rule's edge lies
    # between them (docs/performance.md, "The automatic kernel").
    half_from_classes: ClassVar[int] = 100_000
    _checked: ClassVar[set[torch.device]] = set()
    max_block = 8192  # columns per tile (a power of two); tests lower it to cross tile edges at small V
    num_warps = 16

    def available(self, device: torch.device) -> bool:
        """CUDA (and ROCm) tensors where the triton package imports; CPU tensors under Triton's interpreter."""
        return triton_available() and (device.type != "cpu" or _interpreting())

    def automatic_choice(self, device: torch.device, gemm: torch.dtype | None, num_classes: int | None) -> str | None:
        """The name "triton" where it is the automatic choice (CUDA tensors, triton imports); "triton-half" instead for
        half-precision products over at least `half_from_classes` classes (the class comment's measurements)."""
        chosen = super().automatic_choice(device, gemm, num_classes)
        if chosen is not None and gemm in HALF_DTYPES and (num_classes or 0) >= self.half_from_classes:
            return TritonHalfKernel.name
        return chosen

    @classmethod
    def check_device(cls, device: torch.device) -> None:
        """Refuse what the kernel cannot run: no `triton` package, or CPU tensors outside the interpreter."""
        if not triton_available():
            raise OptionError("kernel", cls.name, "needs the triton package (pip install 'hf_heads[triton]')")
        if device.type == "cpu" and not _interpreting():
            raise OptionError(
                "kernel",
                cls.name,
                "runs on GPU tensors, or on CPU ones when TRITON_INTERPRET=1 was set before triton was imported "
                "(Triton's interpreter: slow, for tests); use 'eager' here",
            )

    def self_check(self, device: torch.device, force: bool = False) -> None:
        """Once per GPU device, before the first use: the kernel's loss and gradients on a small problem crossing tile
        edges against the eager kernel's; a mismatch raises instead of training on a wrong gradient. `force`: check
        on a CPU too."""
        if device in TritonKernel._checked or (device.type == "cpu" and not force):
            return
        TritonKernel._checked.add(device)
        object.__setattr__(self, "max_block", 1024)  # three tiles per row of 2051 logits (this instance only)
        try:  # first use is inside an autograd.Function's forward or an evaluation: gradients switched back on
            with torch.inference_mode(False), torch.enable_grad(), full_precision():  # float32 under --bf16 too
                g = torch.Generator().manual_seed(0)
                h, w, b, t = (torch.randn(*shape, generator=g) for shape in ((6, 16), (2051, 16), (2051,), (6,)))
                y = torch.randint(0, w.shape[0], (6,), generator=g)
                self._compare_with_eager(device, h, w, b, t, y)
        finally:
            object.__delattr__(self, "max_block")

    def _compare_with_eager(self, device, h, w, b, t, y) -> None:
        from hf_heads.losses.fused_linear import chunked_loss
        from hf_heads.losses.parts import CrossEntropy

        for options in ({}, {"target": t, "softcap": 5.0, "criterion": CrossEntropy(label_smoothing=0.1)}):
            results = {}
            for name, kernel in (("eager", "eager"), (self.name, self)):  # this instance: its lowered tile width
                inputs = [x.to(device).requires_grad_() for x in (h, w, b, options.get("target", t))]
                loss = chunked_loss(
                    *inputs[:3], y.to(device), target_logit=inputs[3] if "target" in options else None,
                    softcap=options.get("softcap"), criterion=options.get("criterion"), chunk_size=4, kernel=kernel,
                )  # fmt: skip
                grads = torch.autograd.grad(loss, inputs, allow_unused=True)
                results[name] = [loss, *(x for x in grads if x is not None)]
            for got, want in zip(results[self.name], results["eager"], strict=True):
                if not torch.allclose(got, want, rtol=1e-4, atol=1e-5):
                    raise RuntimeError(
                        f"the {self.name} chunk kernel disagrees with the eager one on {device} (options "
                        f"{sorted(options)}): max difference {float((got - want).detach().abs().max()):.3g}; "
                        "use the eager kernel: model.set_head_options(chunk_kernel='eager'), or kernel='eager'"
                    )

    def _launch(
        self, z, b, y, t, row_weight, opts: ChunkOptions, grad_t=None, grad_z=None, lse=None, z_weight=None, pred=None,
        ent=None, ent_weight=None,
    ):  # fmt: skip
        """The row program over the products z (n, V), with the column scale and the bias b (V,) applied as it reads
        them: the losses (n,); with `row_weight` the gradient of the logits into `grad_z` (n, V) (None: over z),
        with the z-loss's weighted by `z_weight` (default the row weights). When given: lse (n,), the argmax (and
        target rank) into `pred` ((n, 1) or (n, 2), contiguous), the entropy into `ent` (n,), and with `ent_weight`
        (n,) the gradient of Σ_i ent_weight_i · H_i."""
        n, num_classes = z.shape
        compute = torch.promote_types(z.dtype, torch.float32)  # the row math's dtype, for half logits too
        loss = torch.empty(n, dtype=compute, device=z.device)
        s = opts.column_scale
        flags = dict(HAS_T=t is not None, SOFTCAP=opts.softcap is not None, GRAD=row_weight is not None)
        flags.update(HAS_B=b is not None, HAS_S=s is not None)
        flags["CRITERION"] = opts.criterion.code  # the program's criterion (hf_heads.losses.parts)
        z_loss = opts.z_loss > 0 and opts.criterion.softmax and row_weight is not None
        flags.update(Z_LOSS=z_loss, HAS_LSE=lse is not None, PRED=pred is not None)
        flags["RANK"] = pred is not None and pred.shape[1] > 1
        ent_grad = ent_weight is not None and row_weight is not None and opts.criterion.softmax
        if ent_grad and ent is None:
            ent = torch.empty(n, dtype=compute, device=z.device)  # pass 1 computes it for pass 2
        flags.update(ENT=ent is not None, ENT_GRAD=ent_grad)
        params = torch.full((3,), float(opts.softcap or 1.0), dtype=compute, device=z.device)
        params[:1].fill_(float(opts.label_smoothing))  # fill_ runs on the device; `params[0] = x` would copy from
        params[2:].fill_(float(opts.z_loss))  # a CPU scalar tensor (a synchronising host-to-device copy on CUDA)
        unused = loss  # a pointer the program does not read when its flag is off
        if z_loss:
            z_weight = (row_weight if z_weight is None else z_weight).to(compute).contiguous()
        program()[(n,)](
            z, z.stride(0), z if grad_z is None else grad_z, z.stride(0) if grad_z is None else grad_z.stride(0),
            unused if b is None else b.to(compute).contiguous(), unused if s is None else s.to(compute).contiguous(),
            y.contiguous(),
            unused if t is None else t.to(compute).contiguous(),
            unused if row_weight is None else row_weight.to(compute).contiguous(),  # may be an expanded scalar
            loss, unused if grad_t is None else grad_t,
            num_classes, params, z_weight if z_loss else unused, unused if lse is None else lse,
            unused if pred is None else pred, unused if ent is None else ent,
            ent_weight.to(compute).contiguous() if ent_grad else unused,
            **flags, BLOCK=min(_triton().next_power_of_2(num_classes), self.max_block), num_warps=self.num_warps,
        )  # fmt: skip
        return loss

    def _ready(self, device: torch.device) -> None:
        self.check_device(device)
        self.self_check(device)

    def loss_and_grads(
        self, h, w, b, y, t, opts, row_weight, grads, lse=None, z_weight=None, pred=None, ent=None, ent_weight=None
    ):
        self._ready(h.device)
        return super().loss_and_grads(h, w, b, y, t, opts, row_weight, grads, lse, z_weight, pred, ent, ent_weight)

    def loss(self, h, w, b, y, t, opts, lse=None, pred=None, ent=None):
        self._ready(h.device)
        if h.shape[0] == 0 or self._selects(opts, w.shape[0]):
            return super().loss(h, w, b, y, t, opts, lse, pred, ent)
        z = _raw_logits(h, w, None).contiguous()
        return self._launch(z, b, y, t, None, opts, lse=lse, pred=pred, ent=ent)

    def _dense(
        self, h, w, b, y, t, opts, row_weight, grads: Grads, lse=None, z_weight=None, pred=None, ent=None,
        ent_weight=None,
    ):  # fmt: skip
        if h.shape[0] == 0 or self._selects(opts, w.shape[0]):
            return super()._dense(h, w, b, y, t, opts, row_weight, grads, lse, z_weight, pred, ent, ent_weight)
        z = _raw_logits(h, w, None, grads.logits).contiguous()  # (n, V) h wᵀ
        # for half products of float32 logits, d z in the products' dtype straight from the program (no cast pass)
        grad_z = z if z.dtype == w.dtype or w.dtype not in HALF_DTYPES else torch.empty_like(z, dtype=w.dtype)
        grad_t = None if grads.t is None else torch.empty(z.shape[0], dtype=grads.t.dtype, device=z.device)
        loss = self._launch(z, b, y, t, row_weight, opts, grad_t, grad_z, lse, z_weight, pred, ent, ent_weight)
        if grads.t is not None:
            grads.t.copy_(grad_t)
        _linear_grads(grad_z, h, w, grads, None, opts.column_scale)
        return loss


@register("kernel")
@dataclass(frozen=True)
class TritonHalfKernel(TritonKernel):
    """The Triton kernel with half-precision logits when the products are half precision: each chunk's logits are the
    GEMM's output in that dtype (as a plain bf16 output layer rounds them) and their gradient is written over them
    in that dtype, halving the (chunk, V) traffic. The row math, the loss and the bias, t and weight gradients stay
    float32; float32 / float64 products and the top-k support run as `triton`. The automatic choice for half
    products over `TritonKernel.half_from_classes` classes or more (where it measured faster); a choice by name
    elsewhere."""

    name = "triton-half"
    automatic_on = ()  # chosen automatically through `TritonKernel.automatic_choice`, not on its own

    def workspace_dtype(self, opts: ChunkOptions, num_classes: int, gemm: torch.dtype) -> torch.dtype:
        if gemm in HALF_DTYPES and not self._selects(opts, num_classes):
            return gemm
        return super().workspace_dtype(opts, num_classes, gemm)
