"""How the rows of a loss count and reduce: the non-ignored rows, the label checks, the reductions, and the two
records a loss is called with (`RowCounting`, `LossInputs`).

A row is one position of the flattened batch: one hidden vector h_i (a row of the (N, H) matrix) and its label y_i.
As in `F.cross_entropy` and the transformers Trainer: a row whose target is `ignore_index` contributes nothing;
"none" returns one loss per row (0 on ignored rows), "sum" their sum, "mean" the sum divided by `num_items_in_batch`
when given (which makes gradient accumulation exact) or else by the non-ignored rows; a divisor is never below 1, so
an all-ignored batch has loss 0, never NaN.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from hf_heads.losses.precision import compute_dtype
from hf_heads.validation import check_choice

REDUCTIONS = ("mean", "sum", "none")
IGNORE_INDEX = -100  # the label of a row that counts nothing: torch's and the Trainer's default


def valid_rows(
    hidden: torch.Tensor, target: torch.Tensor, ignore_index: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(h (N, H), y (N,), valid (N,)): hidden (*, H) and target (*) flattened to rows, and the mask of the rows
    whose target is not `ignore_index`."""
    h = hidden.reshape(-1, hidden.shape[-1])
    y = target.reshape(-1)
    if h.shape[0] != y.shape[0]:
        raise ValueError(f"hidden has {h.shape[0]} rows but target has {y.shape[0]}")
    return h, y, y != ignore_index


def host_reads_are_free(device: torch.device) -> bool:
    """Whether reading a tensor's value on the host costs nothing: CPU tensors. On an accelerator a read (`bool(t)`,
    `.item()`, indexing by a boolean mask) waits for every queued kernel, so a training step avoids them there."""
    return device.type == "cpu"


def check_labels(target: torch.Tensor, num_classes: int, ignore_index: int = -100) -> None:
    """Raise for a label outside [0, num_classes) that is not `ignore_index`: `ValueError` naming the label on a CPU;
    on an accelerator an asynchronous device assertion (`torch._assert_async`, no host sync), reported at the next
    synchronisation."""
    bad = (target != ignore_index) & ((target < 0) | (target >= num_classes))
    allowed = f"allowed 0 <= label < {num_classes} or ignore_index={ignore_index}"
    if not host_reads_are_free(target.device):
        torch._assert_async(~bad.any(), f"labels: a label is out of range; {allowed}")
    elif bool(bad.any()):
        raise ValueError(f"labels: found {int(target[bad][0])}, {allowed}")


def counted_rows(
    hidden: torch.Tensor, target: torch.Tensor, valid: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """(h, y, keep) of the rows (N, H), (N,) a loss computes: on a CPU the rows that count, compacted (keep None); on
    an accelerator every row, the ignored ones with class 0 and `keep` = `valid` (compacting would read the row
    count on the host)."""
    if host_reads_are_free(hidden.device):
        return hidden[valid], target[valid], None
    return hidden, torch.where(valid, target, 0), valid


def linear_inputs(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    target: torch.Tensor,
    ignore_index: int,
    reduction: str,
    keep_dtype: bool = False,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None, torch.Tensor, torch.Tensor]:
    """The checked inputs of an output layer's loss: (h (N, H), weight (C, H), bias (C,), y (N,), valid (N,)) in the
    compute dtype of `hidden` (`keep_dtype`: h and weight as given, for a loss that casts them to `gemm_dtype`
    itself); refuses an unknown reduction and a label outside [0, C)."""
    check_reduction(reduction)
    h, y, valid = valid_rows(hidden, target, ignore_index)
    check_labels(y, weight.shape[0], ignore_index)
    compute = compute_dtype(h)
    b = None if bias is None else bias.to(compute)
    if keep_dtype:
        return h, weight, b, y, valid
    return h.to(compute), weight.to(compute), b, y, valid


def check_reduction(reduction: str) -> None:
    check_choice("reduction", reduction, REDUCTIONS)


@dataclass(frozen=True)
class RowCounting:
    """How a loss counts and reduces its rows (module docstring), what a head's loss hooks take beside the hidden
    states and labels: `ignore_index`, `reduction` ("mean", "sum" or "none") and `num_items_in_batch` (what "mean"
    divides by; None: the counted rows). `kwargs()` passes them on to a loss function."""

    num_items_in_batch: int | torch.Tensor | None = None
    ignore_index: int = IGNORE_INDEX
    reduction: str = "mean"

    def __post_init__(self) -> None:
        check_reduction(self.reduction)

    def kwargs(self) -> dict:
        """{"num_items_in_batch", "ignore_index", "reduction"}: the loss functions' keyword arguments."""
        return {"num_items_in_batch": self.num_items_in_batch, "ignore_index": self.ignore_index,
                "reduction": self.reduction}  # fmt: skip

    def reduce(self, losses: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """A family's per-row losses (the labels' shape, or one per row) reduced as these rows count, with no host
        read: a row labelled `ignore_index` counts 0 whatever `losses` holds there (compute it finite, e.g. on class
        0, so its gradient is 0 and not NaN). What a family written outside hf_heads returns from its loss hooks."""
        keep = (labels != self.ignore_index).reshape(-1)
        if losses.numel() != keep.numel():
            raise ValueError(f"losses has {losses.numel()} entries, labels {keep.numel()}: give one loss per label")
        return reduce_rows(losses.reshape(-1), None, labels.shape, self.reduction, self.num_items_in_batch, keep=keep)


@dataclass(frozen=True)
class LossInputs:
    """The inputs of an output layer's loss, what `hf_heads.losses.output_loss` takes: `hidden` (*, H), the layer's
    `weight` (V, H) and `bias` (V,) or None, `labels` (*) (class ids; `ignore_index` on a row that counts nothing),
    and how the rows count (`RowCounting`'s `ignore_index`, `num_items_in_batch` and `reduction`)."""

    hidden: torch.Tensor
    weight: torch.Tensor
    bias: torch.Tensor | None
    labels: torch.Tensor
    ignore_index: int = IGNORE_INDEX
    num_items_in_batch: int | torch.Tensor | None = None
    reduction: str = "mean"

    def __post_init__(self) -> None:
        check_reduction(self.reduction)

    @property
    def counting(self) -> RowCounting:
        """How the rows count, as a `RowCounting`."""
        return RowCounting(self.num_items_in_batch, self.ignore_index, self.reduction)

    def tensors(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None, torch.Tensor]:
        """(hidden, weight, bias, labels): a loss function's positional arguments."""
        return self.hidden, self.weight, self.bias, self.labels


def mean_divisor(
    num_items_in_batch: int | float | torch.Tensor | None,
    num_valid: int | torch.Tensor,
    device: torch.device | None = None,
) -> int | float | torch.Tensor:
    """What "mean" divides the sum of the row losses by: `num_items_in_batch` when given, else the number of
    non-ignored rows (an int, or a tensor counted on the device); at least 1."""
    if num_items_in_batch is None:
        return num_valid.clamp_min(1) if isinstance(num_valid, torch.Tensor) else max(num_valid, 1)
    if isinstance(num_items_in_batch, torch.Tensor):
        return (num_items_in_batch if device is None else num_items_in_batch.to(device)).clamp_min(1)
    return max(num_items_in_batch, 1)


def reduce_rows(
    per_row: torch.Tensor,
    valid: torch.Tensor | None,
    target_shape: torch.Size | tuple[int, ...],
    reduction: str,
    num_items_in_batch: int | float | torch.Tensor | None = None,
    keep: torch.Tensor | None = None,
) -> torch.Tensor:
    """Reduce the losses `per_row` (M,) of the non-ignored rows, M = valid.sum() (`valid` None: every row), or, with
    `keep` (`counted_rows` on an accelerator), the losses (N,) of every row, those `keep` drops counted as 0. "none"
    returns them in `target_shape` (0 on ignored rows); "mean" divides by `mean_divisor`."""
    check_reduction(reduction)
    if keep is not None:  # no host read: the ignored rows' losses masked, the row count a tensor
        per_row = torch.where(keep, per_row, 0.0)
        if reduction == "none":
            return per_row.reshape(target_shape)
        total = per_row.sum()
        return total if reduction == "sum" else total / mean_divisor(num_items_in_batch, keep.sum(), total.device)
    if reduction == "none":
        if valid is None or per_row.shape[0] == valid.numel():  # every row valid: nothing to scatter
            return per_row.reshape(target_shape)
        return per_row.new_zeros(valid.numel()).masked_scatter(valid.reshape(-1), per_row).reshape(target_shape)
    total = per_row.sum()
    if reduction == "sum":
        return total
    return total / mean_divisor(num_items_in_batch, per_row.numel(), total.device)
