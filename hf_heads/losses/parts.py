"""The parts of an output layer's loss as types, what `hf_heads.losses.output_loss` takes one of each:

- the scorer (margin paper, eq. 13) with the checkpoint's output transform: `hf_heads.losses.scorer.Scorer`;
- the candidates a row's criterion runs over: `Candidates`, with `Full` (every class, in chunks of rows) and `Sampled`
  (the target and K classes drawn once per batch). NCE is a sampling method (sampling paper eqs. 19-22);
- the criterion over the row's candidate logits z: `Criterion` — `CrossEntropy`, `BinaryCrossEntropy` (sampling paper
  eq. 3) and `MeanSquaredError` (eq. 1), each with its naive dense `reference`.

Besides them: `Impl`, how the loss is computed, and `LossResult`, what `output_loss` returns with `returns`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import ClassVar, NamedTuple

import torch

from hf_heads.components import REGISTRIES, Component, component_base, make_component, register
from hf_heads.validation import OptionError, check_number

# what `output_loss(..., returns=...)` can ask for beside the loss (`LossResult`)
RETURNS = ("lse", "z_loss", "predictions", "rank", "top_k_rank", "entropy")


@component_base("criterion")
@dataclass(frozen=True)
class Criterion(Component, ABC):
    """A criterion over each row's candidate logits z, a registered component. `softmax`: the loss is −log of a softmax
    over the row, else a sum of per-class sigmoid terms; `code`: its number in the Triton row program."""

    softmax: ClassVar[bool] = False
    code: ClassVar[int] = -1
    sampled_form: ClassVar[bool] = True  # whether the sampling paper defines it over sampled candidates (not MSE)

    @abstractmethod
    def reference(self, z: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """The loss (n,) of each row of the logits z (n, C) against its class y (n,), written from the paper's
        equation on the dense logits (the training criterion: smoothing, z-loss and penalty included)."""

    @staticmethod
    def terms_(z: torch.Tensor, rows: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """A sigmoid criterion's losses (n,) of the logits z (n, C) against classes y (n,), z overwritten in place by d
        loss / d z (the eager chunk kernel's form). A static method: the compiled kernel traces it (`terms`)."""
        raise NotImplementedError("a softmax criterion runs the chunk kernels' softmax path")

    @staticmethod
    def negative(z: torch.Tensor) -> torch.Tensor:
        """A sigmoid criterion's term of each non-target logit (elementwise): the loss is Σ_c negative(z_c) +
        positive(z_y) − negative(z_y), so blocks of classes (row chunks, vocabulary shards) add their sums of it."""
        raise NotImplementedError("a softmax criterion has no per-class terms")

    @staticmethod
    def positive(z: torch.Tensor) -> torch.Tensor:
        """A sigmoid criterion's term of the target's logit (elementwise; see `negative`)."""
        raise NotImplementedError("a softmax criterion has no per-class terms")

    @classmethod
    def terms(cls, z: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(the losses (n,), d loss / d z (n, C)) of `terms_`, without touching z."""
        grad = z.clone()
        loss = cls.terms_(grad, torch.arange(z.shape[0], device=z.device), y)
        return loss, grad


CRITERIA = REGISTRIES["criterion"]  # name -> criterion class


@register("criterion")
@dataclass(frozen=True, eq=False)
class CrossEntropy(Criterion):
    """Softmax cross-entropy over each row's support: every class, or its `top_k` largest logits (sparse-softmax eq.
    5; a target outside the support keeps its logit in the numerator). Label smoothing ε: (1 − ε)(lse − z_y) + ε (lse
    − mean of the support), as `F.cross_entropy`; z-loss λ: + λ · lse² (PaLM); confidence penalty β: − β · H (Pereyra
    et al. 2017); `class_weight` (V,): row i's loss times a[y_i], "mean" over Σ a[y_i] as
    `F.cross_entropy(weight=...)`."""

    name: ClassVar[str] = "ce"
    softmax: ClassVar[bool] = True
    code: ClassVar[int] = 0
    example: ClassVar[dict] = {"top_k": 5, "label_smoothing": 0.1, "z_loss": 0.1, "confidence_penalty": 0.2}
    top_k: int | None = None
    label_smoothing: float = 0.0
    z_loss: float = 0.0
    confidence_penalty: float = 0.0
    class_weight: torch.Tensor | None = field(default=None, repr=False)

    def check(self) -> None:
        if self.top_k is not None:
            check_number("top_k", self.top_k, minimum=1, integer=True)
        check_number("label_smoothing", self.label_smoothing, minimum=0)
        if self.label_smoothing >= 1:
            raise OptionError("label_smoothing", self.label_smoothing, "must be < 1")
        check_number("z_loss", self.z_loss, minimum=0)
        check_number("confidence_penalty", self.confidence_penalty, minimum=0)
        if self.class_weight is not None and not isinstance(self.class_weight, torch.Tensor):
            raise OptionError("class_weight", type(self.class_weight).__name__, "must be a tensor (V,) or None")
        if self.class_weight is not None and self.label_smoothing:
            raise OptionError(
                "class_weight", "a tensor", f"cannot be combined with label_smoothing={self.label_smoothing}"
            )

    @property
    def plain(self) -> bool:
        """Whether this is the bare −log p_y over every class (the evaluation loss, an NLL)."""
        return not (self.top_k or self.label_smoothing or self.z_loss or self.confidence_penalty) and (
            self.class_weight is None
        )

    def support(self, z: torch.Tensor) -> torch.Tensor:
        """The logits (n, ·) each row's softmax runs over: all of them, or the top k."""
        return z if self.top_k is None or self.top_k >= z.shape[1] else z.topk(self.top_k, dim=1).values

    def reference(self, z, y):
        support = self.support(z)  # (n, V) or (n, k)
        lse = support.logsumexp(1)  # (n,)
        loss = lse - z.gather(1, y[:, None]).squeeze(1)
        eps = self.label_smoothing
        loss = (1 - eps) * loss + eps * (lse - support.mean(1)) + self.z_loss * lse.square()
        log_p = support.log_softmax(1)
        loss = loss + self.confidence_penalty * (log_p.exp() * log_p).sum(1)  # − β · H
        if self.class_weight is not None:
            loss = loss * self.class_weight.to(z)[y]
        return loss


@register("criterion")
@dataclass(frozen=True)
class BinaryCrossEntropy(Criterion):
    """The sampling paper's BCE over every candidate (eq. 3): −log σ(z_y) − Σ_{c≠y} log(1 − σ(z_c)) =
    Σ_c softplus(z_c) − z_y; its gradient σ(z_c) − δ_cy."""

    name: ClassVar[str] = "bce"
    code: ClassVar[int] = 1

    def reference(self, z, y):
        sig = torch.sigmoid(z)
        target = torch.zeros_like(z).scatter(1, y[:, None], 1.0)
        return -(target * torch.log(sig) + (1 - target) * torch.log1p(-sig)).sum(1)

    @staticmethod
    def negative(z):
        return torch.nn.functional.softplus(z)  # −log(1 − σ(z))

    @staticmethod
    def positive(z):
        return torch.nn.functional.softplus(-z)  # −log σ(z)

    @staticmethod
    def terms_(z, rows, y):
        loss = torch.nn.functional.softplus(z).sum(1) - z[rows, y]  # (n,)
        z.sigmoid_()  # d / d z_c: σ(z_c) − δ_cy
        z[rows, y] -= 1.0
        return loss


@register("criterion")
@dataclass(frozen=True)
class MeanSquaredError(Criterion):
    """The sampling paper's MSE over every class (eq. 1): Σ_c (σ(z_c) − δ_cy)²; its gradient
    2 (σ − δ) σ (1 − σ). It has no sampled form (the paper defines none)."""

    name: ClassVar[str] = "mse"
    code: ClassVar[int] = 2
    sampled_form: ClassVar[bool] = False

    def reference(self, z, y):
        target = torch.zeros_like(z).scatter(1, y[:, None], 1.0)
        return (torch.sigmoid(z) - target).square().sum(1)

    @staticmethod
    def negative(z):
        return torch.sigmoid(z).square()

    @staticmethod
    def positive(z):
        return (torch.sigmoid(z) - 1).square()

    @staticmethod
    def terms_(z, rows, y):
        z.sigmoid_()
        loss = torch.linalg.vector_norm(z, dim=1).square() - 2 * z[rows, y] + 1  # (n,): Σ σ² − 2σ_y + 1
        slope = torch.addcmul(z, z, z, value=-1.0)  # σ(1 − σ)
        z[rows, y] -= 1.0  # d / d z_c: 2 (σ_c − δ_cy) σ_c (1 − σ_c)
        z.mul_(slope).mul_(2.0)
        return loss


def make_criterion(value: str | dict | Criterion | None, field: str = "criterion") -> Criterion:
    """The criterion of a name ("ce", "bce", "mse"), a config dict or an object; None: plain cross-entropy."""
    return CrossEntropy() if value is None else make_component("criterion", value, field=field)


class Candidates(ABC):
    """The classes a row's criterion runs over, and how the loss over them is computed (`loss`). `Full` and the
    sampled family's `Sampled` are the two; `output_loss` asks the candidates, never their type."""

    runs_kernel: ClassVar[bool] = False  # whether the loss runs a chunk kernel (then `Impl.kernel` applies)

    @abstractmethod
    def loss(self, inputs, scorer, criterion: Criterion, returns: tuple[str, ...], impl: Impl):
        """The loss of `inputs` (hf_heads.losses.reduction.LossInputs) with `scorer` and `criterion`: a tensor, or a
        `LossResult` when `returns` names extras."""


def check_chunking(chunk_size: int | None, memory_budget: int | None) -> int | None:
    """Refuse a bad `chunk_size` (rows per chunk) or `memory_budget` (MiB of each chunk's (rows, V) logits), and the
    two together (each decides the rows per chunk); the budget in bytes, or None."""
    if chunk_size is not None:
        check_number("chunk_size", chunk_size, minimum=1, integer=True)
    if memory_budget is None:
        return None
    check_number("memory_budget", memory_budget, minimum=1, integer=True)
    if chunk_size is not None:
        why = f"cannot be combined with chunk_size={chunk_size}: both set the rows per chunk"
        raise OptionError("memory_budget", memory_budget, why)
    return int(memory_budget) << 20


@dataclass(frozen=True)
class Impl:
    """How a loss is computed, not what it is: `kernel`, the chunk kernel (a name, a `ChunkKernel`, or None: the
    automatic choice or `HF_HEADS_CHUNK_KERNEL`); `chunk_size`, rows per chunk, or `memory_budget`, the MiB of
    each chunk's (rows, V) logits block from which the rows follow (not both; neither: the defaults of
    `hf_heads.losses.chunks.rows_per_chunk`); `loss_dtype` (None: torch's rule for `F.cross_entropy(hidden @
    weight.T + bias)`)."""

    kernel: object = None
    chunk_size: int | None = None
    loss_dtype: torch.dtype | None = None
    memory_budget: int | None = None

    def __post_init__(self) -> None:
        check_chunking(self.chunk_size, self.memory_budget)

    @property
    def budget_bytes(self) -> int | None:
        """`memory_budget` in bytes (None: not set)."""
        return check_chunking(self.chunk_size, self.memory_budget)


def make_impl(impl) -> Impl:
    """An `Impl` of `output_loss(..., impl=...)`: an `Impl`, a kernel (its name or object), or None / "auto"."""
    if isinstance(impl, Impl):
        return impl
    return Impl(kernel=None if impl in (None, "auto") else impl)


class LossResult(NamedTuple):
    """What `output_loss` returns when `returns` asks for more than the loss (0, or -1 for ranks, on ignored rows): the
    loss; `z_loss`, the z-loss term alone (no gradient); `lse`, each row's log-sum-exp (no gradient; None for BCE /
    MSE); `predictions`, each row's argmax without a margin (lowest index on a tie) and `token_accuracy`;
    `target_rank`, each label's rank in that order (under "top_k_rank" alone capped at the criterion's top_k);
    `entropy` of the softmax the loss takes (differentiable). The rest is None."""

    loss: torch.Tensor
    z_loss: torch.Tensor | None = None
    lse: torch.Tensor | None = None
    predictions: torch.Tensor | None = None
    token_accuracy: torch.Tensor | None = None
    target_rank: torch.Tensor | None = None
    entropy: torch.Tensor | None = None

    def accuracy_at(self, k: int) -> torch.Tensor:
        """The fraction of the non-ignored rows whose label is among their k most likely classes (top-k accuracy;
        `accuracy_at(1)` is `token_accuracy`), as a scalar tensor (no host read)."""
        if self.target_rank is None:
            raise ValueError("accuracy_at needs the ranks: call with returns=('rank',)")
        check_number("k", k, minimum=1, integer=True)
        counted = self.target_rank >= 0
        return ((self.target_rank < k) & counted).sum() / counted.sum().clamp_min(1)
