"""`DiscreteHead`: what the four discrete families (softmax, sparse, margin, sampled) share: the output layer
W (V, H), b (V,) and two buffers saved with the weights: `word_counts` (V,) training counts (-1 where not set)
and `context_norm_running` (the running max ‖h‖ of max-norm heads, -1 before training). The families differ
only in their hooks (hf_heads.heads.base)."""

from __future__ import annotations

from typing import ClassVar

import torch
import torch.nn.functional as F
from torch import nn

from hf_heads.heads.base import OutputHead
from hf_heads.losses.entry import FULL, output_loss
from hf_heads.losses.parts import Candidates, Criterion, Impl
from hf_heads.losses.precision import compute_dtype
from hf_heads.losses.reduction import RowCounting
from hf_heads.losses.scorer import Scorer
from hf_heads.losses.transforms import transform_logits
from hf_heads.losses.vocab_parallel import vocab_shard, whole_parameters
from hf_heads.validation import OptionError, check_number

COUNTS_DTYPE = torch.float32  # word counts: exact integers up to 2**24, whatever the model's dtype


class DiscreteHead(OutputHead):
    """Output layer over V classes for hidden states of size H (a softmax over its logits is p(c | x))."""

    # whether the training pass predicts each label (the chunk kernels' argmax, no second product with W):
    # `record_accuracy` counts them (softmax, sparse, margin; the sampled criteria see no full softmax)
    same_pass_accuracy: ClassVar[bool] = False
    accuracy_sums: torch.Tensor | None = None  # [correct, correct@k..., counted] since `take_accuracy`; None: off
    accuracy_top_k: tuple[int, ...] = ()  # the k of `record_accuracy`

    def _apply(self, fn, recurse: bool = True):
        """`nn.Module._apply` (`.to(dtype)`, `.half()`, `.cuda()`, ...) with `word_counts` kept in float32: counts
        above 256 are not exact in bf16 (12345 would become 12352), and the norms, ranks and noise read them."""
        counts = self.word_counts
        out = super()._apply(fn, recurse)
        if self.word_counts.dtype != COUNTS_DTYPE:
            self.word_counts = counts.to(device=self.word_counts.device, dtype=COUNTS_DTYPE)
        return out

    def __init__(self, hidden_size: int, num_classes: int, options=None) -> None:
        super().__init__(hidden_size, num_classes, options)
        options = self.options  # the options object, also where a head section or nothing was given
        self._num_classes = num_classes  # `num_classes`: never read from W (see there)
        self.weight = nn.Parameter(torch.empty(num_classes, hidden_size))
        initial = options.initial_bias(num_classes)
        self.bias = nn.Parameter(torch.full((num_classes,), initial)) if options.bias else None
        self.register_buffer("word_counts", torch.full((num_classes,), -1.0, dtype=COUNTS_DTYPE))
        self.register_buffer("context_norm_running", torch.tensor(-1.0))
        nn.init.normal_(self.weight, std=0.02)
        weights = options.class_weights
        if isinstance(weights, list) and len(weights) != num_classes:
            allowed = f"must give one weight per class: {num_classes}"
            raise OptionError("head.class_weights", describe_weights(weights), allowed)

    @property
    def num_classes(self) -> int:
        """V, as built: not read from W, which ZeRO-3 leaves an empty partition outside the head's forward
        (modeling.zero3)."""
        return self._num_classes

    def reset_parameters(self, init=nn.init) -> None:
        init.normal_(self.weight, mean=0.0, std=0.02)
        if self.bias is not None:
            init.constant_(self.bias, self.options.initial_bias(self.num_classes))

    def start_from(self, weight: torch.Tensor | None, bias: torch.Tensor | None) -> None:
        """Copy the checkpoint's output layer; `warm_start_pending` until `calibrate_to` where it
        `needs_calibration`."""
        self.warm_start_pending = self.needs_calibration
        with torch.no_grad():
            if weight is not None:
                self.weight.copy_(weight)
            if self.bias is not None:
                self.bias.copy_(bias.reshape(-1) if bias is not None else torch.zeros_like(self.bias))

    def copied_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """transform(W h + b): the checkpoint's output layer with its logit scale and soft-cap."""
        o = self.options
        return transform_logits(F.linear(hidden, self.weight, self.bias), o.logit_multiplier, o.logit_softcap)

    def set_word_counts(self, counts: torch.Tensor) -> None:
        counts = torch.as_tensor(counts)
        if counts.dim() != 1 or counts.numel() != self.num_classes:
            raise ValueError(f"word_counts has shape {tuple(counts.shape)}, expected ({self.num_classes},)")
        if not bool(torch.isfinite(counts.double()).all()) or bool((counts < 0).any()):
            raise ValueError("word_counts must be finite and >= 0")
        self.word_counts.copy_(counts.to(self.word_counts))

    @property
    def has_word_counts(self) -> bool:
        """Whether word counts were set (the buffer starts at −1), read on the host once per change of the buffer."""
        key = (self.word_counts.data_ptr(), self.word_counts._version)
        known = self.__dict__.get("_counts_known")
        if known is None or known[0] != key:
            known = self.__dict__["_counts_known"] = (key, not bool((self.word_counts < 0).any()))
        return known[1]

    def counts(self) -> torch.Tensor | None:
        """The word counts when the options need them (an error says how to give them when they are missing)."""
        if not self.needs_counts:
            return None
        if not self.has_word_counts:
            raise ValueError(
                f"head.{self.options.counts_reason() or f'family={self.family!r}'} needs word counts, but this head "
                "has none: pass word_counts=... to from_base(), call head.set_word_counts(...), or train with "
                "HeadsTrainer (it counts the training set)"
            )
        return self.word_counts

    @property
    def training_loss_is_nll(self) -> bool:
        """Not with a z-loss, class weights or a confidence penalty: the training loss is then no −log q(label)."""
        o = self.options
        reweighted = o.z_loss or o.class_weights is not None or o.confidence_penalty
        return super().training_loss_is_nll and not reweighted

    def record_accuracy(self, enabled: bool = True, top_k: tuple[int, ...] | list[int] = ()) -> None:
        """From now on every training pass of a `same_pass_accuracy` head counts, into `accuracy_sums` on the device,
        the labels it predicts (the argmax without the margin) and, for each k of `top_k`, those among its k most
        likely classes."""
        for k in top_k:
            check_number("top_k", k, minimum=1, integer=True)
        self.accuracy_sums = None
        self.accuracy_top_k = tuple(top_k)
        if enabled and self.same_pass_accuracy:
            self.accuracy_sums = torch.zeros(len(top_k) + 2, dtype=torch.float64, device=self.weight.device)

    def take_accuracy(self) -> torch.Tensor | None:
        """[correct, correct within each k, counted] labels of the training passes since the last call, or None."""
        if self.accuracy_sums is None:
            return None
        sums, self.accuracy_sums = self.accuracy_sums, torch.zeros_like(self.accuracy_sums)
        return sums

    @property
    def pass_is_inference_distribution(self) -> bool:
        """Whether a loss pass in the current mode scores the inference distribution, so its predictions and entropies
        serve `loss_and_token_statistics` (such heads compute `loss` as `_cross_entropy(hidden, labels, self.training,
        rows)`)."""
        return False

    def loss_and_token_statistics(self, hidden, labels, **counting):
        if not self.pass_is_inference_distribution:
            return super().loss_and_token_statistics(hidden, labels, **counting)
        return self._cross_entropy(hidden, labels, self.training, self.loss_counting(**counting), statistics=True)

    def layer_loss(
        self,
        hidden: torch.Tensor,
        labels: torch.Tensor,
        counting: RowCounting,
        *,
        scorer: Scorer | None = None,
        candidates: Candidates | None = None,
        criterion: Criterion | None = None,
        returns: tuple[str, ...] = (),
    ):
        """`hf_heads.losses.output_loss` of (W, b) on hidden (*, H) against labels (*), with the head's `Impl`
        options."""
        o = self.options
        candidates = FULL if candidates is None else candidates
        runs_kernel = candidates.runs_kernel and vocab_shard(self.weight) is None
        runs_kernel = runs_kernel and (scorer is None or scorer.posterior is None)
        impl = Impl(o.chunk_kernel if runs_kernel else None, o.chunk_size, self.loss_dtype(hidden), o.memory_budget)
        return output_loss(
            hidden, self.weight, self.bias, labels, scorer=scorer, candidates=candidates, criterion=criterion,
            returns=returns, impl=impl, **counting.kwargs(),
        )  # fmt: skip

    def _returns(self, training: bool, statistics: bool) -> tuple[str, ...]:
        """What a pass asks the loss for: predictions and ranks under `record_accuracy`, predictions and entropy for
        statistics."""
        counting = self._counting(training)
        out = ("predictions",) if counting or statistics else ()
        out += ("rank",) if counting and self.accuracy_top_k else ()
        return out + (("entropy",) if statistics else ())

    def _counting(self, training: bool) -> bool:
        """Whether a pass counts its predictions into `accuracy_sums`: training passes under `record_accuracy`."""
        return training and self.accuracy_sums is not None

    def _from_output(self, out, labels: torch.Tensor, counting: RowCounting, training: bool, statistics: bool = False):
        """The loss of a pass that asked for `_returns`, its predictions added to `accuracy_sums` in training under
        `record_accuracy`. With `statistics`: (loss, `token_statistics` of the same pass)."""
        if isinstance(out, torch.Tensor):
            return out
        if self._counting(training):
            target = labels.reshape(out.predictions.shape)
            counted = target != counting.ignore_index
            hits = [((out.predictions == target) & counted).sum()]
            if self.accuracy_top_k:  # the ranks (-1 on ignored rows), asked for only then: passes of their own (eager)
                hits += [((out.target_rank < k) & counted).sum() for k in self.accuracy_top_k]
            self.accuracy_sums += torch.stack([*hits, counted.sum()]).to(self.accuracy_sums)
        if not statistics:
            return out.loss
        target = labels.reshape(out.predictions.shape).to(out.predictions.device)
        hit = (out.predictions == target) & (target != counting.ignore_index)
        return out.loss, {"entropy": out.entropy.detach(), "is_top1": hit}

    def loss_dtype(self, hidden: torch.Tensor) -> torch.dtype:
        """float32 for a half model (float64 stays), as transformers' loss functions upcast the logits."""
        return compute_dtype(hidden, self.weight)

    def class_weight(self) -> torch.Tensor | None:
        """(V,) the class weights of the `class_weights` option, or None; rebuilt when the option, counts or device
        change."""
        weights = self.options.class_weights
        if weights is None:
            return None
        counts = self.counts() if weights == "balanced" else None
        key = (self.weight.device, None if counts is None else (counts.data_ptr(), counts._version))
        cached = self.__dict__.get("_class_weight")
        if cached is None or cached[0] is not weights or cached[1] != key:
            tensor = class_weight_tensor(self.options, counts, self.num_classes, self.weight)
            cached = self.__dict__["_class_weight"] = (weights, key, tensor)
        return cached[2]

    @torch.no_grad()
    def diagnostics(self) -> dict[str, float]:
        """Output-vector norms and, once set, the running max-norm."""
        with whole_parameters(self):
            norms = self.weight.float().norm(dim=1)
        out = {"head/weight_norm_mean": norms.mean().item(), "head/weight_norm_std": norms.std().item()}
        if float(self.context_norm_running) >= 0:
            out["head/context_norm_running"] = float(self.context_norm_running)
        return out


def loss_extras(options) -> str:
    """What the options add to a training cross-entropy, as its name shows them: ", label smoothing 0.1, z-loss
    0.0001, class weights" (empty without them)."""
    extras = [f"label smoothing {options.label_smoothing}"] if options.label_smoothing else []
    extras += [f"z-loss {options.z_loss}"] if options.z_loss else []
    extras += ["class weights"] if options.class_weights is not None else []
    extras += [f"confidence penalty {options.confidence_penalty}"] if options.confidence_penalty else []
    return "".join(f", {extra}" for extra in extras)


def describe_weights(value) -> str:
    """A class-weight list as an error message shows it (its length, not 50k numbers)."""
    return f"a list of {len(value)} numbers" if isinstance(value, list) else repr(value)


def class_weight_tensor(options, counts: torch.Tensor | None, num_classes: int, like: torch.Tensor):
    """(V,) float32 class weights that `options.class_weights` names, on `like`'s device, or None: a list as given, or
    'balanced' n / (C·count_c) over the C classes with a count > 0 (0 for the others)."""
    weights = options.class_weights
    if weights is None:
        return None
    if weights == "balanced":
        counts = counts.to(device=like.device, dtype=torch.float32)
        seen = counts > 0
        return torch.where(seen, counts.sum() / (seen.sum() * counts).clamp_min(1e-30), 0.0)
    if len(weights) != num_classes:
        raise OptionError("class_weights", describe_weights(weights), f"must give one weight per class: {num_classes}")
    return torch.tensor(weights, dtype=torch.float32, device=like.device)
