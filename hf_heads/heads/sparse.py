"""The sparse family: sparse-softmax (Sun et al. 2021, eqs. 4-5), a softmax head whose loss and inference distribution
keep only the k largest logits of each row.

Training uses eq. 5 (chunked, `top_k`); the inference logits are -inf outside each row's top `decode_k` (default k), so
softmax of them is eq. 4 and generation decodes with the truncated distribution. The eval loss is that distribution's
NLL, so exp(eval_loss) is the model's perplexity, infinite as soon as one label falls outside its row's top decode_k;
an evaluation also records eq. 5's loss and the share of labels inside the top decode_k (`eval_sparse_loss`,
`eval_in_top_k`).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field, replace
from typing import ClassVar

import torch

from hf_heads.components import register
from hf_heads.heads.discrete import loss_extras
from hf_heads.heads.options import ReferenceBatch
from hf_heads.heads.softmax import SoftmaxHead, SoftmaxHeadOptions
from hf_heads.losses.parts import CrossEntropy
from hf_heads.losses.scorer import Scorer
from hf_heads.losses.sparse import truncate_to_top_k
from hf_heads.validation import OptionError, check_number

logger = logging.getLogger(__name__)


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
        """Each row's k largest logits (eq. 5's support)."""
        return z.topk(min(self.k, z.shape[1]), dim=1).values

    def reference_loss(self, z: torch.Tensor, batch: ReferenceBatch) -> torch.Tensor:
        """Training: the softmax family's loss over `reference_support` (eq. 5). Evaluation: the NLL of eq. 4 over the
        top decode_k, +inf for a target not among them."""
        if batch.training:
            return super().reference_loss(z, batch)
        y, zv = batch.labels[batch.valid], z[batch.valid]  # (n,), (n, V)
        top = zv.topk(min(self.inference_k, zv.shape[1]), dim=1)
        inside = (top.indices == y[:, None]).any(1)  # (n,)
        nll = top.values.logsumexp(1) - zv.gather(1, y[:, None]).squeeze(1)
        return torch.where(inside, nll, torch.full_like(nll, float("inf")))

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
    support_is_truncated = True
    eval_sum_names = ("sparse_loss", "in_top_k")

    def __init__(self, hidden_size: int, num_classes: int, options=None) -> None:
        super().__init__(hidden_size, num_classes, options)
        self.warn_if_softmax()

    def warn_if_softmax(self) -> None:
        """Warn where k or decode_k is at least the number of classes: eq. 5 or eq. 4 is then the plain softmax."""
        o, classes = self.options, self.num_classes
        kept = [f"{name}={value}" for name, value in (("k", o.k), ("decode_k", o.inference_k)) if value >= classes]
        if kept:
            logger.warning(
                "sparse head with %s over %d classes keeps every logit, so it is the plain softmax there (eqs. 4-5 "
                "with k >= the number of classes): choose values below %d, or the softmax family",
                " and ".join(kept), classes, classes,
            )  # fmt: skip

    def top_k(self, inference: bool) -> int:
        return self.options.inference_k if inference else self.options.k

    def inference_logits(self, hidden):
        return truncate_to_top_k(super().inference_logits(hidden), self.top_k(True))

    def linear_form(self):
        """Refused unless decode_k >= V: which logits survive depends on each row's ranking, which no linear layer
        reproduces. The refusal names the nearest exact choice, the softmax layer with generation's `top_k`."""
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

    @property
    def training_loss_is_eval_loss(self) -> bool:
        """Never: the training loss is eq. 5 (finite for a label outside the top k), the eval loss eq. 4's NLL."""
        return False

    def eval_loss(self, hidden, labels, counting):
        """The NLL of eq. 4 over the top decode_k (+inf for a label outside it), so exp(eval_loss) is the perplexity;
        under `record_eval_sums` each pass adds eq. 5's loss and the labels inside the top decode_k."""
        o = self.options
        each, k = replace(counting, reduction="none"), o.inference_k
        scorer = Scorer(logit_multiplier=o.logit_multiplier, softcap=o.logit_softcap)
        # the ranks capped at k ("top_k_rank"): whether each label is inside the top k, read from the loss's own
        # top-k selection (a full "rank" would compare every logit of the row with the label's, several passes)
        out = self.layer_loss(
            hidden, labels, each, scorer=scorer, criterion=CrossEntropy(top_k=k), returns=("top_k_rank",)
        )
        loss, rank = out.loss.reshape(-1), out.target_rank.reshape(-1)  # (N,) each; min(rank, k), -1 on ignored rows
        counted, inside = rank >= 0, (rank >= 0) & (rank < k)
        nll = loss.masked_fill(counted & ~inside, float("inf"))  # (N,)
        if self.eval_sums is not None:
            sparse = (
                loss
                if k == o.k
                else self.layer_loss(hidden, labels, each, scorer=scorer, criterion=CrossEntropy(top_k=o.k)).reshape(
                    -1
                )
            )
            sums = torch.stack([torch.where(counted, sparse, 0.0).sum(), inside.sum(), counted.sum()])
            self.eval_sums += sums.to(self.eval_sums)
        return counting.reduce(nll, labels)

    def loss_names(self, target: str = "word") -> tuple[str, str]:
        name = f"sparse-softmax loss, eq. 5, top-{self.options.k}"
        k = self.options.inference_k
        return f"{name}{loss_extras(self.options)}", f"NLL of the {target} under the top-{k} distribution, eq. 4"

    def check_generation(self, num_beams: int) -> None:
        if num_beams > self.options.inference_k:
            raise OptionError(
                "num_beams",
                num_beams,
                f"must be <= decode_k={self.options.inference_k} (default: k): the sparse "
                "head gives every token outside its top decode_k probability 0",
            )
