"""The softmax family: the plain softmax output layer (the baseline every other family is compared with),
trained with the chunked cross-entropy of hf_heads.losses.fused_linear (never the (N, V) logits)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import ClassVar

import torch
import torch.nn.functional as F

from hf_heads.components import register
from hf_heads.heads.discrete import DiscreteHead, describe_weights, loss_extras
from hf_heads.heads.options import HeadOptions, ReferenceBatch
from hf_heads.heads.registry import COMPONENT
from hf_heads.losses.parts import CrossEntropy, check_chunking
from hf_heads.losses.reduction import RowCounting
from hf_heads.losses.scorer import Scorer
from hf_heads.losses.transforms import check_transform, transform_logits
from hf_heads.validation import OptionError, check_number


@dataclass
class SoftmaxHeadOptions(HeadOptions):
    """The plain softmax output layer."""

    examples: ClassVar[dict[str, dict]] = {"softmax": {}}
    contract_examples: ClassVar[dict[str, dict]] = {
        "softmax-smoothed": {"label_smoothing": 0.1},
        "softmax-z-loss-penalty": {"z_loss": 0.1, "confidence_penalty": 0.2},
        "softmax-transform": {"logit_multiplier": 0.5, "logit_softcap": 3.0, "bias": False},
    }

    bias: bool = field(default=True, metadata={"help": "Keep an output bias b_c (the margin paper always does)."})
    chunk_size: int | None = field(
        default=None,
        metadata={
            "help": "Tokens per chunk of the chunked loss (default: 2^23 logits per chunk, at least 512 tokens; "
            "not with memory_budget)."
        },
    )
    memory_budget: int | None = field(
        default=None,
        metadata={
            "help": "MiB of each chunk's (tokens, V) block of logits in the chunked loss, from which the tokens per "
            "chunk follow (at least one; not with chunk_size). A larger budget reads the output weight and writes its "
            "gradient fewer times per step; memory grows with it. Default: 32 MiB but at least 512 tokens on a CPU, "
            "up to 1 GiB on a GPU. A sampled head's training scores K candidates, no (tokens, V) block: there it "
            "bounds the evaluation's full-vocabulary passes and the token statistics."
        },
    )
    chunk_kernel: str | None = field(
        default=None,
        metadata={
            "help": "Implementation of the chunked loss's per-chunk work: eager, compiled (torch.compile) or triton "
            "(hand-written; GPU). Default: triton on a GPU when triton is installed, else eager; the environment "
            "variable HF_HEADS_CHUNK_KERNEL overrides this option. Every choice computes the same loss.",
            COMPONENT: "kernel",
        },
    )
    label_smoothing: float = field(
        default=0.0,
        metadata={
            "help": "Label smoothing of the training loss, softmax and sparse families only (sparse: over the top-k "
            "support; the sparse-softmax paper's seq2seq runs use 0.1). Eval losses are never smoothed."
        },
    )
    z_loss: float = field(
        default=0.0,
        metadata={
            "help": "Coefficient λ of the auxiliary z-loss λ·lse² added to each target token's training loss, lse the "
            "log of its softmax normaliser (PaLM; Liger-Kernel's lse_square_scale; OLMo trains with 1e-4): keeps "
            "the normaliser near 1 (bf16 training). Softmax, sparse (lse over the top k) and margin families; "
            "computed inside the chunked loss; eval losses never have it."
        },
    )
    class_weights: list[float] | str | None = field(
        default=None,
        metadata={
            "help": "Weight of each class in the training loss, as F.cross_entropy(weight=...): 'balanced' "
            "(n / (C·count_c) from the training word counts over the C classes seen, as scikit-learn's "
            "class_weight='balanced'; unseen classes 0) or a JSON list of one number >= 0 per class. The weighted "
            "sum is divided by the sum of the target tokens' weights, or, under the Trainer, by its token count of "
            "the accumulated batch (exact gradient accumulation). Softmax, sparse and margin families; not with "
            "label smoothing; eval losses are never weighted."
        },
    )

    confidence_penalty: float = field(
        default=0.0,
        metadata={
            "help": "Coefficient β of the confidence penalty (Pereyra et al. 2017; an entropy bonus): the training "
            "loss becomes cross-entropy − β·H, H the entropy of each target token's softmax (over the top k for "
            "sparse, over the margin logits for margin), averaged as the loss: β > 0 penalises peaked predictions. "
            "H and its gradient come from the chunked loss (its backward recomputes the chunks: one more product "
            "with W per step). Softmax, sparse and margin families; eval losses never have it."
        },
    )

    def __post_init__(self) -> None:
        if isinstance(self.class_weights, str) and self.class_weights.lstrip().startswith("["):  # a flag's JSON list
            try:
                self.class_weights = json.loads(self.class_weights)
            except json.JSONDecodeError as err:
                raise OptionError("class_weights", self.class_weights, f"is not a JSON list ({err})") from None
        super().__post_init__()

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
        check_chunking(self.chunk_size, self.memory_budget)
        check_number("label_smoothing", self.label_smoothing, minimum=0)
        if self.label_smoothing >= 1:
            raise OptionError("label_smoothing", self.label_smoothing, "must be < 1")
        check_number("z_loss", self.z_loss, minimum=0)
        check_number("confidence_penalty", self.confidence_penalty, minimum=0)
        weights = self.class_weights
        if isinstance(weights, str) and weights != "balanced":
            raise OptionError("class_weights", weights, "allowed: 'balanced' or a list of one number >= 0 per class")
        if isinstance(weights, list):
            if not weights:
                raise OptionError("class_weights", weights, "must give one number >= 0 per class")
            for value in weights:
                check_number("class_weights", value, minimum=0)
        if weights is not None and self.label_smoothing:
            allowed = f"cannot be combined with label_smoothing={self.label_smoothing}"
            raise OptionError("class_weights", describe_weights(weights), allowed)

    @property
    def needs_counts(self) -> bool:
        return self.class_weights == "balanced"

    def reference(self, batch: ReferenceBatch) -> tuple[torch.Tensor, torch.Tensor]:
        """z = cap · tanh(multiplier · (W h + b) / cap) (hf_heads.losses.transforms); the loss `reference_loss(z)`,
        the inference logits `reference_inference(z)`."""
        weight, bias = batch.params["weight"], batch.params.get("bias")
        z = batch.hidden @ weight.T + (0.0 if bias is None else bias)  # (N, V)
        z = z * self.logit_multiplier
        if self.logit_softcap is not None:
            z = self.logit_softcap * torch.tanh(z / self.logit_softcap)
        return self.reference_loss(z, batch), self.reference_inference(z)

    def reference_loss(self, z: torch.Tensor, batch: ReferenceBatch) -> torch.Tensor:
        """(n,) from the logits z (N, V): in training each counted row's cross-entropy over `reference_support(z)` with
        label smoothing over that support, + λ · lse² (z-loss), − β · H (confidence penalty); in evaluation the bare
        NLL. Class weights reweight the mean, not a row: their training reference is refused."""
        if batch.training and self.class_weights is not None:
            raise NotImplementedError("the family reference has no class weights: they reweight the mean, not a row")
        valid = batch.valid
        y, zv = batch.labels[valid], z[valid]  # (n,), (n, V)
        support = self.reference_support(zv)  # (n, V) or (n, k)
        lse = support.logsumexp(1)  # (n,)
        losses = lse - zv.gather(1, y[:, None]).squeeze(1)
        if batch.training:
            eps = self.label_smoothing
            losses = (1 - eps) * losses + eps * (lse - support.mean(1)) + self.z_loss * lse.square()
            log_p = support.log_softmax(1)
            losses = losses + self.confidence_penalty * (log_p.exp() * log_p).sum(1)  # − β · H
        return losses

    def reference_support(self, z: torch.Tensor) -> torch.Tensor:
        """The logits (n, ·) of each row that the softmax of the loss runs over: all of them."""
        return z

    def reference_inference(self, z: torch.Tensor) -> torch.Tensor:
        """The inference logits (N, V) from the transformed logits z: z itself."""
        return z

    def counts_reason(self) -> str:
        return "class_weights='balanced'" if self.class_weights == "balanced" else ""


@register("family")
class SoftmaxHead(DiscreteHead):
    """z = W h + b; the training loss is cross-entropy (label smoothing in training only), the eval loss its NLL."""

    family = "softmax"
    options_class = SoftmaxHeadOptions

    paper = "plain softmax cross-entropy (baseline)"
    logits_note = "the logits of a plain softmax"

    def top_k(self, inference: bool) -> int | None:
        """The logits the distribution keeps per row (None: all of them)."""
        return None

    same_pass_accuracy = True

    def loss_criterion(self, training: bool) -> CrossEntropy:
        """The cross-entropy of a pass over the row's support, with the options' extras in training, the bare NLL in
        eval."""
        o = self.options
        if not training:
            return CrossEntropy(top_k=self.top_k(False))
        return CrossEntropy(
            top_k=self.top_k(False), label_smoothing=o.label_smoothing, z_loss=o.z_loss,
            confidence_penalty=o.confidence_penalty, class_weight=self.class_weight(),
        )  # fmt: skip

    def _cross_entropy(self, hidden, labels, training: bool, counting: RowCounting, statistics: bool = False):
        """The chunked cross-entropy of W h + b with the checkpoint's output transform (and the predictions, under
        `record_accuracy`). `statistics`: (loss, the same pass's token statistics)."""
        o = self.options
        out = self.layer_loss(
            hidden, labels, counting, scorer=Scorer(logit_multiplier=o.logit_multiplier, softcap=o.logit_softcap),
            criterion=self.loss_criterion(training), returns=self._returns(training, statistics),
        )  # fmt: skip
        return self._from_output(out, labels, counting, training, statistics)

    @property
    def pass_is_inference_distribution(self) -> bool:
        """The softmax of W h + b in both modes (sparse: no, eq. 5 keeps the target beside the top k)."""
        return self.top_k(False) is None

    def training_loss(self, hidden, labels, counting):
        return self._cross_entropy(hidden, labels, True, counting)

    def eval_loss(self, hidden, labels, counting):
        return self._cross_entropy(hidden, labels, False, counting)

    def inference_logits(self, hidden):
        """The base model's own `F.linear` (in the autocast dtype under autocast) and output transform, in the head's
        dtype."""
        z = F.linear(hidden, self.weight, self.bias)
        return transform_logits(z, self.options.logit_multiplier, self.options.logit_softcap).to(self.weight.dtype)

    def linear_form(self) -> tuple[torch.Tensor, torch.Tensor | None]:
        """(W, b) themselves: the training options never change the inference distribution transform(W h + b)."""
        return self.weight, self.bias

    @property
    def training_loss_is_eval_loss(self) -> bool:
        """Without label smoothing, z-loss or class weights the training cross-entropy is the eval loss (sparse:
        eq. 5 both)."""
        o = self.options
        return not (o.label_smoothing or o.z_loss or o.class_weights is not None or o.confidence_penalty)

    def loss_names(self, target: str = "word") -> tuple[str, str]:
        return f"cross-entropy{loss_extras(self.options)}", f"NLL of the {target}"
