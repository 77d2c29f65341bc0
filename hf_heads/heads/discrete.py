"""The discrete output layer: owns W (V, H), b (V,) and the word counts, and calls the losses.

Training (labels given) computes the chunked loss of the configured family and never builds the
(N, V) logits; inference returns logits whose softmax is the model's p(c | x) (no margin; norm
scaling kept, since it is part of the model). Families: `softmax` and `margin`
(hf_heads.losses.margin).
"""

from __future__ import annotations

import torch
from torch import nn

from hf_heads.heads.options import MarginHeadOptions, SoftmaxHeadOptions, head_options
from hf_heads.losses.fused_linear import fused_linear_cross_entropy
from hf_heads.losses.margin import margin_cross_entropy, margin_logits


class DiscreteHead(nn.Module):
    """Output layer over V classes for hidden states of size H.

    Buffers (saved with the weights): `word_counts` (V,) training counts, -1 where not set; and
    `context_norm_running` (the running max ‖h‖ used by max-norm at inference, -1 before training).
    """

    def __init__(self, hidden_size: int, num_classes: int, head: dict | None = None) -> None:
        super().__init__()
        self.options: SoftmaxHeadOptions = head_options(head)
        self.weight = nn.Parameter(torch.empty(num_classes, hidden_size))
        self.bias = nn.Parameter(torch.zeros(num_classes)) if self.options.bias else None
        self.register_buffer("word_counts", torch.full((num_classes,), -1.0))
        self.register_buffer("context_norm_running", torch.tensor(-1.0))
        nn.init.normal_(self.weight, std=0.02)

    @property
    def is_margin(self) -> bool:
        return isinstance(self.options, MarginHeadOptions)

    @property
    def num_classes(self) -> int:
        return self.weight.shape[0]

    def set_word_counts(self, counts: torch.Tensor) -> None:
        counts = torch.as_tensor(counts)
        if counts.dim() != 1 or counts.numel() != self.num_classes:
            raise ValueError(f"word_counts has shape {tuple(counts.shape)}, expected ({self.num_classes},)")
        if not bool(torch.isfinite(counts.double()).all()) or bool((counts < 0).any()):
            raise ValueError("word_counts must be finite and >= 0")
        self.word_counts.copy_(counts.to(self.word_counts))

    def _counts(self) -> torch.Tensor | None:
        if not (self.is_margin and self.options.needs_counts):
            return None
        if bool((self.word_counts < 0).any()):
            raise ValueError(
                f"head.word_norm={self.options.word_norm!r} needs word counts, but this head has none: pass "
                "word_counts=... to from_base(), call head.set_word_counts(...), or train with HeadsTrainer "
                "(it counts the training set)"
            )
        return self.word_counts

    def _margin_kwargs(self, with_margin: bool) -> dict:
        o = self.options
        return dict(
            margin=o.margin if with_margin else "none", m=o.m if with_margin else 0.0, scale=o.scale,
            word_norm=o.word_norm, context_norm=o.context_norm, word_counts=self._counts(),
        )  # fmt: skip

    def _running_context_norm(self) -> torch.Tensor | None:
        if self.is_margin and self.options.context_norm == "max-norm" and float(self.context_norm_running) >= 0:
            return self.context_norm_running
        return None

    @torch.no_grad()
    def _update_context_norm(self, hidden: torch.Tensor, labels: torch.Tensor, ignore_index: int) -> None:
        valid = hidden.reshape(-1, hidden.shape[-1])[labels.reshape(-1) != ignore_index]
        if valid.shape[0] == 0:
            return
        batch_max = valid.float().norm(dim=1).max()
        if float(self.context_norm_running) < 0:
            self.context_norm_running.copy_(batch_max)
        else:
            self.context_norm_running.lerp_(batch_max, self.options.context_norm_momentum)

    def loss(
        self,
        hidden: torch.Tensor,
        labels: torch.Tensor,
        *,
        num_items_in_batch: int | torch.Tensor | None = None,
        ignore_index: int = -100,
        reduction: str = "mean",
    ) -> torch.Tensor:
        """Loss of hidden (*, H) against labels (*).

        In training mode this is the training criterion (margin applied); in eval mode it is the
        negative log-likelihood of the inference distribution (no margin; max-norm uses the running
        value), so `exp(eval_loss)` is the model's perplexity.
        """
        common = dict(
            reduction=reduction, ignore_index=ignore_index, num_items_in_batch=num_items_in_batch,
            chunk_size=self.options.chunk_size,
        )  # fmt: skip
        if not self.is_margin:
            return fused_linear_cross_entropy(hidden, self.weight, self.bias, labels, **common)
        if self.training and self.options.context_norm == "max-norm":
            self._update_context_norm(hidden, labels, ignore_index)
        running = None if self.training else self._running_context_norm()
        return margin_cross_entropy(
            hidden, self.weight, self.bias, labels, **self._margin_kwargs(self.training),
            context_norm_value=running, **common,
        )  # fmt: skip

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """Inference logits (*, V): log p(c | x) up to a per-row constant; never carries the margin."""
        if not self.is_margin:
            out = hidden @ self.weight.T
            return out if self.bias is None else out + self.bias
        return margin_logits(
            hidden, self.weight, self.bias, None, **self._margin_kwargs(False),
            context_norm_value=self._running_context_norm(),
        )  # fmt: skip

    def forward(self, hidden: torch.Tensor, labels: torch.Tensor | None = None, **loss_kwargs):
        """(loss or None, logits or None): logits are skipped while training with labels."""
        loss = None if labels is None else self.loss(hidden, labels, **loss_kwargs)
        logits = None if (labels is not None and self.training) else self.logits(hidden)
        return loss, logits
