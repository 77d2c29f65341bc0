"""One entry point for the loss of an output layer: `output_loss`, and its module form `OutputLayerLoss`.

    output_loss(hidden, weight, bias, labels, *, scorer=Scorer(), candidates=Full(), criterion=CrossEntropy(),
                reduction="mean", ignore_index=-100, num_items_in_batch=None, returns=(), impl=None)

The loss of the output layer (weight (V, H), bias (V,) or None) on hidden (*, H) against labels (*), as the three parts
of hf_heads.losses.parts say: the `scorer` (margin paper eq. 13 and the checkpoint's output transform), the
`candidates` (`Full` or `Sampled`, sampling paper eqs. 7-21) and the `criterion`. The rows count as in
`F.cross_entropy` and the Trainer: "mean" divides the sum by `num_items_in_batch` (exact gradient accumulation) or by
the counted rows. `returns` names extras from the same pass (a `LossResult`). `impl` says how, never what: every kernel
computes the same loss, and a kernel named for candidates that run none (`Sampled`) is refused.
"""

from __future__ import annotations

import torch
from torch import nn

from hf_heads.losses.margin import Full
from hf_heads.losses.parts import RETURNS, Candidates, Criterion, CrossEntropy, Impl, LossResult, make_impl
from hf_heads.losses.reduction import LossInputs
from hf_heads.losses.scorer import Scorer
from hf_heads.validation import OptionError

FULL = Full()
CROSS_ENTROPY = CrossEntropy()
IDENTITY = Scorer()


def output_loss(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    labels: torch.Tensor,
    *,
    scorer: Scorer | None = None,
    candidates: Candidates | None = None,
    criterion: Criterion | None = None,
    reduction: str = "mean",
    ignore_index: int = -100,
    num_items_in_batch: int | torch.Tensor | None = None,
    returns: tuple[str, ...] = (),
    impl: Impl | str | object | None = None,
) -> torch.Tensor | LossResult:
    """The loss of the output layer (module docstring): a tensor (a scalar for "mean" / "sum", the labels' shape for
    "none"), or a `LossResult` when `returns` names extras."""
    scorer = IDENTITY if scorer is None else scorer
    candidates = FULL if candidates is None else candidates
    criterion = CROSS_ENTROPY if criterion is None else criterion
    for name, value, kind in (("scorer", scorer, Scorer), ("candidates", candidates, Candidates),
                              ("criterion", criterion, Criterion)):  # fmt: skip
        if not isinstance(value, kind):
            shown = value if isinstance(value, str) else type(value).__name__
            raise OptionError(name, shown, f"must be a {kind.__name__} (hf_heads.losses.parts)")
    returns = tuple(returns)
    for name in returns:
        if name not in RETURNS:
            raise OptionError("returns", name, f"is not allowed; allowed: {', '.join(map(repr, RETURNS))}")
    inputs = LossInputs(hidden, weight, bias, labels, ignore_index, num_items_in_batch, reduction)
    return candidates.loss(inputs, scorer, criterion, returns, make_impl(impl))


class OutputLayerLoss(nn.Module):
    """`output_loss` as a module: the parts, reduction, `ignore_index`, `returns` and `impl` fixed at construction."""

    def __init__(
        self,
        *,
        scorer: Scorer | None = None,
        candidates: Candidates | None = None,
        criterion: Criterion | None = None,
        reduction: str = "mean",
        ignore_index: int = -100,
        returns: tuple[str, ...] = (),
        impl: Impl | str | object | None = None,
    ) -> None:
        super().__init__()
        self.scorer, self.candidates, self.criterion = scorer, candidates, criterion
        self.reduction, self.ignore_index, self.returns, self.impl = reduction, ignore_index, tuple(returns), impl

    def forward(self, hidden, weight, bias, labels, num_items_in_batch=None):
        return output_loss(
            hidden, weight, bias, labels, scorer=self.scorer, candidates=self.candidates, criterion=self.criterion,
            reduction=self.reduction, ignore_index=self.ignore_index, num_items_in_batch=num_items_in_batch,
            returns=self.returns, impl=self.impl,
        )  # fmt: skip
