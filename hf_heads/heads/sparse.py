"""The sparse family: sparse-softmax (Sun et al. 2021, eqs. 4-5), a softmax head whose loss and inference
distribution keep only the k largest logits of each row.

Training and evaluation use eq. 5 (chunked, hf_heads.losses.fused_linear with `top_k`); the inference logits are
-inf outside each row's top `decode_k` (default k), so softmax of them is eq. 4 and greedy / beam search decode
with the truncated distribution. Its perplexity is infinite whenever a target falls outside the top k, which is
why the eval loss is eq. 5 rather than that NLL (`eval_loss_is_nll = False`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

import torch

from hf_heads.components import register
from hf_heads.heads.discrete import loss_extras
from hf_heads.heads.softmax import SoftmaxHead, SoftmaxHeadOptions
from hf_heads.losses.sparse import truncate_to_top_k
from hf_heads.validation import OptionError, check_number


@dataclass
class SparseHeadOptions(SoftmaxHeadOptions):
    """Sparse-softmax: the loss and the inference distribution use only the k largest logits of each row (k >=
    num_beams for beam search)."""

    examples: ClassVar[dict[str, dict]] = {"sparse": {"k": 5}, "sparse-smoothed": {"k": 5, "label_smoothing": 0.1}}
    contract_examples: ClassVar[dict[str, dict]] = {
        "sparse-z-loss": {"k": 5, "z_loss": 0.1},
        "sparse-smoothed-decode-3": {"k": 5, "label_smoothing": 0.1, "decode_k": 3},
    }

    k: int = field(default=20, metadata={"help": "Logits kept per row (the paper's best: 20); k >= V is softmax."})
    decode_k: int | None = field(
        default=None,
        metadata={
            "help": "Logits kept per row by the inference distribution and generate() (the paper trains with k=20 "
            "and decodes with beam 5 over the top 5); default: k. Keep decode_k >= num_beams."
        },
    )

    def check(self) -> None:
        super().check()
        check_number("k", self.k, minimum=1, integer=True)
        if self.decode_k is not None:
            check_number("decode_k", self.decode_k, minimum=1, integer=True)

    @property
    def inference_k(self) -> int:
        """The k of the inference logits: `decode_k`, or the training `k`."""
        return self.k if self.decode_k is None else self.decode_k

    def describe(self) -> str:
        return f"sparse k={self.k}" + (f" decode_k={self.decode_k}" if self.decode_k is not None else "")

    def reference_support(self, z: torch.Tensor) -> torch.Tensor:
        """Each row's k largest logits (eq. 5: the log-sum-exp over them minus the target's logit, in training and
        evaluation alike; its smoothing and entropy over them too)."""
        return z.topk(min(self.k, z.shape[1]), dim=1).values

    def reference_inference(self, z: torch.Tensor) -> torch.Tensor:
        """The top `decode_k` logits of each row, −inf elsewhere (eq. 4's support)."""
        top = z.topk(min(self.inference_k, z.shape[1]), dim=1)
        return torch.full_like(z, float("-inf")).scatter(1, top.indices, top.values)


@register("family")
class SparseHead(SoftmaxHead):
    """A softmax head with the sparse-softmax criterion (eq. 5) and the truncated distribution (eq. 4)."""

    family = "sparse"
    options_class = SparseHeadOptions

    paper = (
        "Sun et al., *Sparse-softmax: A Simpler and Faster Alternative Softmax Transformation*, 2021 "
        "(softmax over the top-k logits)"
    )
    eval_loss_is_nll = False

    def top_k(self, inference: bool) -> int:
        return self.options.inference_k if inference else self.options.k

    def inference_logits(self, hidden):
        return truncate_to_top_k(super().inference_logits(hidden), self.top_k(True))

    def linear_form(self):
        """Refused unless decode_k >= V (then eq. 4 is the softmax): which logits survive depends on each row's
        ranking, which no linear layer reproduces. The refusal names the nearest exact choice, the softmax layer with
        generation's `top_k`, and what it does not give."""
        k = self.options.inference_k
        if k >= self.num_classes:
            return super().linear_form()
        raise ValueError(
            f"the sparse head keeps each row's top decode_k={k} logits and gives every other class probability 0 "
            "(sparse-softmax eq. 4): which classes survive depends on the row's ranking, so no linear output layer "
            "gives this distribution. Nearest exact choice: the same output layer as a plain softmax with "
            f"generation's top_k={k} (model.set_head_options(family='softmax'); model.generation_config.top_k = {k}; "
            "then export_base): greedy decoding and sampling (do_sample=True, no other warper) pick the same "
            "tokens; it does not give the same scores (log-probabilities, perplexity: the full softmax's) nor the "
            "same beam search (transformers applies top_k only when sampling)"
        )

    @property
    def logits_note(self) -> str:
        return f"the logits of the top {self.options.inference_k} classes (the others get -inf)"

    def loss_names(self, target: str = "word") -> tuple[str, str]:
        name = f"sparse-softmax loss, eq. 5, top-{self.options.k}"
        return f"{name}{loss_extras(self.options)}", f"{name}; not an NLL, no perplexity"

    def check_generation(self, num_beams: int) -> None:
        if num_beams > self.options.inference_k:
            raise OptionError(
                "num_beams",
                num_beams,
                f"must be <= decode_k={self.options.inference_k} (default: k): the sparse "
                "head gives every token outside its top decode_k probability 0",
            )
