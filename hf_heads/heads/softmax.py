"""The softmax family: the plain softmax output layer (the baseline every other family is compared with),
trained with the chunked cross-entropy of hf_heads.losses.fused_linear (never the (N, V) logits)."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from hf_heads.heads.discrete import DiscreteHead
from hf_heads.heads.options import HeadOptions
from hf_heads.heads.registry import COMPONENT, register_family
from hf_heads.losses.chunks import CHUNK_KERNELS
from hf_heads.losses.fused_linear import fused_linear_cross_entropy
from hf_heads.losses.transforms import check_transform, transform_logits
from hf_heads.validation import OptionError, check_choice, check_number


@dataclass
class SoftmaxHeadOptions(HeadOptions):
    """The plain softmax output layer."""

    bias: bool = field(default=True, metadata={"help": "Keep an output bias b_c (the margin paper always does)."})
    chunk_size: int | None = field(
        default=None,
        metadata={
            "help": "Tokens per chunk of the chunked loss (default: 2^23 logits per chunk, at least 512 tokens)."
        },
    )
    chunk_kernel: str | None = field(
        default=None,
        metadata={
            "help": "Implementation of the chunked loss's per-chunk work: eager, compiled (torch.compile) or triton "
            "(hand-written; GPU). Default: triton on a GPU when triton is installed, else eager; the environment "
            "variable HF_HEADS_CHUNK_KERNEL overrides this option. Every choice computes the same loss.",
            COMPONENT: CHUNK_KERNELS,
        },
    )
    label_smoothing: float = field(
        default=0.0,
        metadata={
            "help": "Label smoothing of the training loss, softmax and sparse families only (sparse: over the top-k "
            "support; the sparse-softmax paper's seq2seq runs use 0.1). Eval losses are never smoothed."
        },
    )

    logit_multiplier: float = field(
        default=1.0,
        metadata={
            "help": "Output transform of the checkpoint (hf_heads.losses.transforms): every logit is multiplied by it "
            "(Cohere logit_scale, Granite 1/logits_scaling, T5's d_model^-0.5 before a tied LM head). from_base "
            "sets it; training and inference both apply it."
        },
    )
    logit_softcap: float | None = field(
        default=None,
        metadata={
            "help": "Output transform of the checkpoint: final soft-cap cap·tanh(z/cap) of every logit (Gemma 2/3 "
            "final_logit_softcapping). from_base sets it; training and inference both apply it."
        },
    )

    def check(self) -> None:
        super().check()
        check_transform(self.logit_multiplier, self.logit_softcap)
        if self.chunk_size is not None:
            check_number("chunk_size", self.chunk_size, minimum=1, integer=True)
        if self.chunk_kernel is not None:
            check_choice("chunk_kernel", self.chunk_kernel, CHUNK_KERNELS)
        check_number("label_smoothing", self.label_smoothing, minimum=0)
        if self.label_smoothing >= 1:
            raise OptionError("label_smoothing", self.label_smoothing, "must be < 1")


class SoftmaxHead(DiscreteHead):
    """z = W h + b; the training loss is cross-entropy (label smoothing in training only), the eval loss its NLL."""

    paper = "plain softmax cross-entropy (baseline)"
    logits_note = "the logits of a plain softmax"

    def top_k(self, inference: bool) -> int | None:
        """The logits the distribution keeps per row (None: all of them)."""
        return None

    def _cross_entropy(self, hidden, labels, smoothing: float, **rows) -> torch.Tensor:
        out = fused_linear_cross_entropy(
            hidden,
            self.weight,
            self.bias,
            labels,
            top_k=self.top_k(False),
            label_smoothing=smoothing,
            chunk_size=self.options.chunk_size,
            logit_multiplier=self.options.logit_multiplier,
            softcap=self.options.logit_softcap,
            **rows,
        )
        return out.reshape(labels.shape) if rows["reduction"] == "none" else out  # (*,) like the labels

    def training_loss(self, hidden, labels, **rows):
        return self._cross_entropy(hidden, labels, self.options.label_smoothing, **rows)

    def eval_loss(self, hidden, labels, **rows):
        return self._cross_entropy(hidden, labels, 0.0, **rows)

    def inference_logits(self, hidden):
        """The base model's own `F.linear` (under autocast it runs in the autocast dtype, as the wrapped
        checkpoint's output layer does) and its output transform, returned in the head's dtype."""
        z = F.linear(hidden, self.weight, self.bias)
        return transform_logits(z, self.options.logit_multiplier, self.options.logit_softcap).to(self.weight.dtype)

    @property
    def training_loss_is_eval_loss(self) -> bool:
        """Without label smoothing the training cross-entropy is the eval loss (sparse: eq. 5 both)."""
        return not self.options.label_smoothing

    def loss_names(self, target: str = "word") -> tuple[str, str]:
        smoothing = f", label smoothing {self.options.label_smoothing}" if self.options.label_smoothing else ""
        return f"cross-entropy{smoothing}", f"NLL of the {target}"


register_family("softmax", SoftmaxHeadOptions, SoftmaxHead)
