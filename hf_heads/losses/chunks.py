"""The chunk engine: the one walk over rows that every chunked computation of hf_heads takes.

A loss, a statistic or a score over V classes needs the (N, V) logits of N rows; hf_heads never builds them at once.
`map_chunks` cuts the rows into chunks whose (rows, V) block fits a memory budget (`rows_per_chunk`) and calls a
per-chunk function on each: the fused loss of every discrete head (hf_heads.losses.fused_linear, through a
`ChunkKernel`), the sampled family's corrected evaluation NLL (under activation checkpointing), and
`OutputHead.statistics` (without gradient).

The kernel seam: a `ChunkKernel` is the per-chunk work of the fused loss, a component of kind "kernel"
(hf_heads.components) listed by `CHUNK_KERNELS`; every one runs the same contract tests against the naive references
(tests/losses/test_kernels.py). `chunk_kernel` resolves the loss's choice: an explicit kernel, else
`HF_HEADS_CHUNK_KERNEL` (a debugging switch), else "triton" on CUDA when triton imports ("triton-half" for half
products over a large vocabulary), else "eager".
"""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import ClassVar, NamedTuple

import torch
from torch.utils.checkpoint import checkpoint

from hf_heads.components import REGISTRIES, Component, component_base, register
from hf_heads.losses.parts import Criterion, CrossEntropy
from hf_heads.validation import OptionError

CHUNK_BYTES = 1 << 25  # a training chunk's (rows, V) float32 block: 32 MiB (2^23 logits) ...
MIN_CHUNK_ROWS = 512  # ... but at least 512 rows: each chunk's products read all of W (V, H) for its rows only
ACCELERATOR_CHUNK_BYTES = 1 << 30  # on an accelerator, up to 1 GiB of float32 logits per chunk (`rows_per_chunk`)
EVAL_CHUNK_ROWS = 256  # a CPU GEMM of fewer rows runs slower than one (N, H) @ (H, V) matmul
EVAL_CHUNK_BYTES = 1 << 28  # ... but never more than 256 MiB of float32 logits per chunk (nor below a training chunk)


def rows_per_chunk(
    num_rows: int,
    num_classes: int,
    budget_bytes: int | None = None,
    itemsize: int = 4,
    device: torch.device | None = None,
) -> int:
    """Rows per chunk of `num_rows` rows over `num_classes` classes, for a (rows, `num_classes`) block of
    `itemsize`-byte logits (the kernel's workspace dtype), at most `num_rows`.

    `budget_bytes` (a loss's `memory_budget`, in bytes): the most rows whose block fits it, at least one. None: the
    defaults, `CHUNK_BYTES` but at least `MIN_CHUNK_ROWS` (a larger V gets a larger block rather than products too
    thin for the GEMM); on an accelerator a chunk may also take up to an eighth of the rows, within
    `ACCELERATOR_CHUNK_BYTES`: there the (V, H) traffic of each chunk (W read twice, the float32 weight-gradient
    accumulator read and written), not the GEMM's shape, is what small chunks cost. Measurements:
    docs/performance.md."""
    per_row = itemsize * max(num_classes, 1)
    if budget_bytes is not None:
        return max(1, min(num_rows, budget_bytes // per_row))
    rows = max(MIN_CHUNK_ROWS, CHUNK_BYTES // per_row)
    if device is not None and torch.device(device).type != "cpu":
        rows = max(rows, min(ACCELERATOR_CHUNK_BYTES // per_row, -(-num_rows // 8)))
    return max(1, min(num_rows, rows))


def eval_rows_per_chunk(num_rows: int, num_classes: int, chunk: int, budget_bytes: int | None = None) -> int:
    """Rows per chunk of a loss alone (no gradient blocks kept): 4 × the training `chunk`, at least `EVAL_CHUNK_ROWS`,
    but no more than `EVAL_CHUNK_BYTES` of logits unless the training chunk itself is larger. With a `budget_bytes`,
    the rows of float32 logits that fit it (`rows_per_chunk`)."""
    if budget_bytes is not None:
        return rows_per_chunk(num_rows, num_classes, budget_bytes)
    cap = max(1, EVAL_CHUNK_BYTES // (4 * max(num_classes, 1)))
    return min(num_rows, max(chunk, min(cap, max(4 * chunk, EVAL_CHUNK_ROWS))))


def map_chunks(
    fn: Callable[..., torch.Tensor | None],
    row_args: tuple,
    shared_args: tuple = (),
    step: int = 1,
    *,
    recompute: bool = False,
) -> torch.Tensor | None:
    """`fn(*row_args[chunk], *shared_args)` over chunks of `step` rows along dim 0 of every tensor in `row_args` (None
    stays None), concatenated (None when `fn` returns None, e.g. when it writes into buffers). `recompute=True`: a
    chunk that needs a gradient runs under activation checkpointing. With no rows, `fn` of the empty rows: a (0,)
    result still in the graph (a batch of padding trains with a zero loss)."""
    num_rows = row_args[0].shape[0]
    if num_rows == 0:
        return fn(*row_args, *shared_args)
    outs = []
    for start in range(0, num_rows, step):  # the one chunk loop
        args = (*(None if a is None else a[start : start + step] for a in row_args), *shared_args)
        needs_grad = any(isinstance(a, torch.Tensor) and a.requires_grad for a in args)
        if recompute and needs_grad and torch.is_grad_enabled():
            outs.append(checkpoint(fn, *args, use_reentrant=False))
        else:
            outs.append(fn(*args))
    return None if outs[0] is None else torch.cat(outs)


# ----------------------------------------------------------------------------- the kernel seam


CROSS_ENTROPY = CrossEntropy()


def cross_entropy_options(criterion: Criterion) -> tuple[int | None, float, float, torch.Tensor | None, float]:
    """(top_k, label_smoothing, z_loss, class_weight, confidence_penalty) of a cross-entropy criterion (the chunk
    kernels' options), the neutral values for a sigmoid criterion."""
    if isinstance(criterion, CrossEntropy):
        c = criterion
        return c.top_k, c.label_smoothing, c.z_loss, c.class_weight, c.confidence_penalty
    return None, 0.0, 0.0, None, 0.0


class ChunkOptions(NamedTuple):
    """What a fused chunk computes besides plain softmax: the top k of the log-sum-exp (sparse), label smoothing, the
    soft-cap, a column scale s (V,) of the products (a margin head's word-norm scaling: z_ic = s_c · h_i · w_c +
    b_c, applied per chunk instead of to a scaled copy of W), and the `Criterion` (hf_heads.losses.parts):
    cross-entropy lse(z) − z_y, or a sigmoid one (the sampling paper's full BCE, eq. 3, or MSE, eq. 1) through its
    `terms_`. For cross-entropy only: top-k, label smoothing and `z_loss` λ, whose λ · lse_i² per row (PaLM's
    z-loss) enters the gradient weighted by the kernel's `z_weight` (default: the row weight) but not the returned
    losses."""

    top_k: int | None
    label_smoothing: float
    softcap: float | None
    column_scale: torch.Tensor | None = None
    criterion: Criterion = CROSS_ENTROPY
    z_loss: float = 0.0
    # the target ranks a pass returns need be exact only below `top_k` (min(rank, top_k), `returns=("top_k_rank",)`):
    # a kernel may then read them from the top-k selection instead of ranking the whole row
    capped_rank: bool = False

    @classmethod
    def of(
        cls, criterion: Criterion, softcap: float | None = None, column_scale=None, capped_rank: bool = False
    ) -> ChunkOptions:
        """The options of a criterion (its top-k, label smoothing and z-loss, `cross_entropy_options`) with a
        soft-cap, a column scale and whether the ranks may be capped at top_k."""
        top_k, smooth, z_loss, _, _ = cross_entropy_options(criterion)
        return cls(top_k, smooth, softcap, column_scale, criterion, float(z_loss), capped_rank)

    def with_scale(self, column_scale: torch.Tensor | None) -> ChunkOptions:
        """These options with another column scale. (Not `_replace`: dynamo cannot read back a `_replace`d named tuple
        after a graph break.)"""
        return ChunkOptions(
            self.top_k, self.label_smoothing, self.softcap, column_scale, self.criterion, self.z_loss, self.capped_rank
        )


class Grads(NamedTuple):
    """Buffers a kernel writes into: d h and d t for the chunk's rows, d w and d b accumulated over chunks, and
    `logits`, a (rows, V) workspace shared by every chunk of the call, or None. `w_unset`: `w` holds no value yet
    (the first chunk), so the kernel writes its part instead of adding it (no pass to zero the (V, H) buffer)."""

    h: torch.Tensor  # (n, H)
    w: torch.Tensor | None  # (V, H); None: no weight gradient wanted (a frozen output layer), its product skipped
    b: torch.Tensor | None  # (V,)
    t: torch.Tensor | None  # (n,)
    logits: torch.Tensor | None = None  # (n, V)
    w_unset: bool = False


@component_base("kernel", requires="where it runs (available) and the chunk's loss with and without gradients")
@dataclass(frozen=True)
class ChunkKernel(Component, ABC):
    """The per-chunk work of the fused cross-entropy, for rows h (n, H), weight w (V, H), bias b (V,) or None, targets
    y (n,) and replaced target logits t (n,) or None:

        z = h wᵀ + b, z[i, y_i] = t_i, z = cap·tanh(z / cap), loss_i = lse_i(z) − z[i, y_i]  (label smoothing and
        the top-k support as in hf_heads.losses.fused_linear; the "bce" and "mse" criteria of `ChunkOptions`).

    `loss` returns the (n,) losses; `loss_and_grads` also adds d(Σ_i row_weight_i · loss_i + Σ_i z_weight_i · λ ·
    lse_i²) to `grads`. Both write each row's log-sum-exp into `lse` (n,) when given. Inputs are float32 (float64
    for gradcheck).

    A kernel is a frozen dataclass registered with `@register("kernel")` under its `name`, defining `available`,
    `loss` and `loss_and_grads`; tests/losses/test_kernels.py runs every registered kernel against the naive dense
    loss."""

    # the device types on which the kernel is the automatic choice where `available` says it can run
    automatic_on: ClassVar[tuple[str, ...]] = ()

    def automatic_choice(self, device: torch.device, gemm: torch.dtype | None, num_classes: int | None) -> str | None:
        """The kernel to run when nobody chose one, where this kernel is the automatic choice on `device` (its type in
        `automatic_on`, `available` there): its own name, or a sibling's where the products' dtype `gemm` and the
        `num_classes` make that one faster (`TritonKernel`); None where it is not the automatic choice."""
        return self.name if device.type in self.automatic_on and self.available(device) else None

    @abstractmethod
    def available(self, device: torch.device) -> bool:
        """Whether the kernel can run on tensors of `device` here (its dependencies import, the device is one it
        supports)."""

    @abstractmethod
    def loss(
        self, h, w, b, y, t, opts: ChunkOptions, lse: torch.Tensor | None = None, pred: torch.Tensor | None = None,
        ent: torch.Tensor | None = None,
    ) -> torch.Tensor:  # fmt: skip
        """The chunk's losses (n,), without gradient. When given: each row's log-sum-exp into `lse`; into `pred` (n, 2)
        its argmax over the logits with the target's own logit (a replaced target logit does not take part; the
        lowest index wins a tie) and its target's rank (`hf_heads.losses.tiles.predict`); into `ent` (n,) the
        entropy of each row's softmax over the logits the loss takes (cross-entropy only)."""

    @abstractmethod
    def loss_and_grads(
        self, h, w, b, y, t, opts: ChunkOptions, row_weight: torch.Tensor, grads: Grads,
        lse: torch.Tensor | None = None, z_weight: torch.Tensor | None = None, pred: torch.Tensor | None = None,
        ent: torch.Tensor | None = None, ent_weight: torch.Tensor | None = None,
    ):  # fmt: skip
        """The chunk's losses (n,); adds d(Σ_i row_weight_i · loss_i (+ the z-loss) + Σ_i ent_weight_i · H_i) / d(h, w,
        b, t) to `grads` (d h and d t written for the chunk's rows, d w and d b accumulated); `lse`, `pred` and
        `ent` as in `loss`, from the same pass."""

    def workspace_dtype(self, opts: ChunkOptions, num_classes: int, gemm: torch.dtype) -> torch.dtype:
        """The dtype of the (rows, V) `Grads.logits` workspace for products in `gemm`: float32 (float64 for
        float64 products) unless a kernel keeps half-precision logits."""
        return torch.promote_types(gemm, torch.float32)


class _Kernels(Mapping):
    """{name: kernel}: the registered chunk kernels (`REGISTRIES["kernel"]`, in registration order), one instance
    each (a kernel has no parameters)."""

    _instances: ClassVar[dict[type, ChunkKernel]] = {}

    def __getitem__(self, name: str) -> ChunkKernel:
        cls = REGISTRIES["kernel"][name]
        if cls not in self._instances:
            self._instances[cls] = cls()
        return self._instances[cls]

    def __iter__(self) -> Iterator[str]:
        return iter(REGISTRIES["kernel"])

    def __len__(self) -> int:
        return len(REGISTRIES["kernel"])


CHUNK_KERNELS: Mapping[str, ChunkKernel] = _Kernels()
KERNEL_ENV = "HF_HEADS_CHUNK_KERNEL"


def refuse_kernel(kernel: str | ChunkKernel | None, why: str) -> None:
    """Raise `OptionError` on field `kernel` when a kernel is named for a loss that runs none (`why` says so)."""
    if kernel is not None:
        raise OptionError("kernel", kernel if isinstance(kernel, str) else kernel.name, why)


def register_kernel(cls: type[ChunkKernel]) -> type[ChunkKernel]:
    """Class decorator: `register("kernel")` for a `ChunkKernel` subclass, made a frozen dataclass first where it is
    not one."""
    if "__dataclass_params__" not in cls.__dict__:
        cls = dataclass(frozen=True)(cls)
    return register("kernel")(cls)


def automatic_kernel(
    device: torch.device | None, gemm: torch.dtype | None = None, num_classes: int | None = None
) -> str:
    """The kernel chosen when nobody chose, for products of dtype `gemm` over `num_classes` classes (None: not
    known): the `automatic_choice` of the first registered kernel that names the device's type in its `automatic_on`
    and can run there (on CUDA tensors where triton imports: "triton", or "triton-half" for half-precision products
    over a large vocabulary, `TritonKernel.half_from_classes`), else "eager" (on a CPU the compiled kernel compiles
    per option set for seconds, so it is opt-in)."""
    if device is not None:
        for kernel in CHUNK_KERNELS.values():
            chosen = kernel.automatic_choice(device, gemm, num_classes)
            if chosen is not None:
                return chosen
    return "eager"


def chunk_kernel(
    name: str | ChunkKernel | None = None,
    device: torch.device | None = None,
    gemm: torch.dtype | None = None,
    num_classes: int | None = None,
) -> ChunkKernel:
    """The kernel called `name` (a `ChunkKernel` as it is); None: `HF_HEADS_CHUNK_KERNEL` when set, else
    `automatic_kernel(device, gemm, num_classes)`."""
    if isinstance(name, ChunkKernel):
        return name
    from_env = os.environ.get(KERNEL_ENV)
    picked = name or from_env or automatic_kernel(device, gemm, num_classes)
    if picked not in CHUNK_KERNELS:
        field = "kernel" if name else KERNEL_ENV
        raise OptionError(field, picked, f"is not a chunk kernel; allowed: {', '.join(CHUNK_KERNELS)}")
    return CHUNK_KERNELS[picked]
