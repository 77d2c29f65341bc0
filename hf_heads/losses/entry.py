"""One entry point for the loss of an output layer: `output_loss(rows, loss, kernel=...)`.

`rows` is an `OutputRows` (hf_heads.losses._rows): the hidden states, the layer's weight and bias, the labels and how
the rows count (`ignore_index`, `num_items_in_batch`, `reduction`). `loss` says which loss, with its own options in a
frozen dataclass, one per loss of the papers:

- `SoftmaxLoss`: softmax cross-entropy of W h + b (label smoothing, z-loss, class weights, the checkpoint's output
  transform; the sampling paper's full BCE / MSE criteria, eqs. 1 and 3) — `fused_linear_cross_entropy`
  (hf_heads.losses.fused_linear);
- `SparseSoftmaxLoss`: the sparse-softmax loss over the top k logits (sparse-softmax paper, eq. 5) —
  `sparse_linear_cross_entropy` (hf_heads.losses.sparse);
- `LargeMarginLoss`: cross-entropy (eq. 4) of the large-margin logits of eq. 13 (margin paper), its `Scorer` holding
  the margin and the norm scalings — `margin_cross_entropy` (hf_heads.losses.margin);
- `SampledCriterion`: a sampling-based criterion (MCS, IS, CPS, NCE × CE / BCE, or the full criteria; sampling paper
  eqs. 7-21) — `sampled_loss`; `CorrectedNLL`: the NLL of the corrected full-vocabulary posterior of a sampled
  criterion (eqs. 2-22) — `corrected_nll` (both hf_heads.losses.sampled).

Each lives beside its function, in its family's module; this module holds their base class, `OutputLoss`, and
imports none of them (a saved model's code carries only its family's loss module).

`kernel` is the chunk kernel of the call, explicit: a name of `CHUNK_KERNELS` or a `ChunkKernel`; None lets the
chunk engine choose (`HF_HEADS_CHUNK_KERNEL` when set, else the automatic choice of the device: `chunk_kernel`). A
loss that runs no chunk kernel for these rows (`runs_kernel` False: a sampling method scoring its K candidates, a
vocabulary-sharded weight, the corrected NLL) refuses one. The heads call this entry point with the kernel their
`chunk_kernel` option names (`OutputHead.kernel_for`).

The five loss functions stay, for a call with keyword arguments as in `F.cross_entropy`; each `OutputLoss` calls its
function with its fields, so the two forms compute the same thing (tests/test_entry.py).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, fields

import torch

from hf_heads.losses._rows import OutputRows
from hf_heads.losses.chunks import ChunkKernel
from hf_heads.losses.vocab_parallel import vocab_shard

Kernel = str | ChunkKernel | None


@dataclass(frozen=True, kw_only=True)
class OutputLoss(ABC):
    """A loss of an output layer and its options (module docstring). `chunk_size`: rows per chunk (None: the chunk
    engine's memory budget); `loss_dtype`: the dtype of the returned loss (None: torch's rule for
    `F.cross_entropy(hidden @ weight.T + bias)`; the heads pass float32)."""

    chunk_size: int | None = None
    loss_dtype: torch.dtype | None = None

    def options(self) -> dict:
        """The loss function's keyword arguments these fields are."""
        return {f.name: getattr(self, f.name) for f in fields(self)}

    def runs_kernel(self, rows: OutputRows) -> bool:
        """Whether this loss runs a chunk kernel for `rows` (not for a vocabulary-sharded weight: its loss runs in
        eager PyTorch on each process's rows)."""
        return vocab_shard(rows.weight) is None

    @abstractmethod
    def __call__(self, rows: OutputRows, kernel: Kernel = None) -> torch.Tensor | tuple:
        """The loss of `rows` with the chunk kernel `kernel` (`output_loss`)."""


def output_loss(rows: OutputRows, loss: OutputLoss, *, kernel: Kernel = None) -> torch.Tensor | tuple:
    """The loss `loss` (an `OutputLoss`) of `rows` (an `OutputRows`), its chunks run by `kernel` (module docstring):
    the loss (a scalar for "mean" / "sum", the labels' shape for "none"), or a `LinearCrossEntropyOutput` where
    `loss` asks for predictions, ranks, entropies or the z-loss term."""
    if not isinstance(rows, OutputRows):
        raise TypeError(f"rows: expected an OutputRows, got {type(rows).__name__}")
    if not isinstance(loss, OutputLoss):
        raise TypeError(f"loss: expected an OutputLoss (SoftmaxLoss, LargeMarginLoss, ...), got {type(loss).__name__}")
    return loss(rows, kernel)
