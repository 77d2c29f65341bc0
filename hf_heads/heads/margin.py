"""The margin family: large-margin softmax for language models (Huo et al., Interspeech 2020, eqs. 5-14;
hf_heads.losses.margin): L-Softmax, ArcFace, CosFace on the target logit, word- and context-vector norm scaling.

Training: the chunked cross-entropy of eq. 13 with the margin of eq. 14 on the target. Evaluation and inference: eq. 13
without the margin (norm scaling kept: it is part of the model), so `exp(eval_loss)` is the model's perplexity.
max-norm uses the batch maximum in training and a running maximum (`context_norm_momentum`, saved as
`context_norm_running`) outside it, so a prediction does not depend on the rest of its batch.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import ClassVar

import torch

from hf_heads.components import component_config, register
from hf_heads.heads.base import SERVED_AS_IT_IS
from hf_heads.heads.discrete import DiscreteHead, loss_extras
from hf_heads.heads.options import ReferenceBatch
from hf_heads.heads.registry import COMPONENT
from hf_heads.heads.softmax import SoftmaxHeadOptions
from hf_heads.losses.margin import margin_logits
from hf_heads.losses.parts import CrossEntropy
from hf_heads.losses.precision import autocast_off
from hf_heads.losses.reduction import RowCounting
from hf_heads.losses.scorer import CONTEXT_NORMS, MARGINS, WORD_NORMS, Scorer, make_margin, word_norm_values
from hf_heads.losses.vocab_parallel import whole_parameters
from hf_heads.validation import OptionError, check_number


@dataclass
class MarginHeadOptions(SoftmaxHeadOptions):
    """Large-margin softmax (margin paper, eqs. 5-14)."""

    examples: ClassVar[dict[str, dict]] = {
        "margin": {"margin": "arc", "m": 0.2},
        "margin-max-norm": {"margin": "arc", "m": 0.2, "context_norm": "max-norm"},  # g from the batch (eq. 10)
        "margin-cos-log-unigram": {"margin": "cos", "m": 0.1, "word_norm": "log-unigram"},  # needs word counts
    }
    contract_examples: ClassVar[dict[str, dict]] = {
        "margin-arc-norms-z-loss": {
            "margin": "arc", "m": 0.2, "word_norm": "log-unigram", "context_norm": "max-norm", "z_loss": 0.1,
        },
        "margin-cos-scale": {"margin": "cos", "m": 0.1, "scale": 8.0},
        "margin-lsm-penalty-gain": {"margin": "lsm", "m": 2, "confidence_penalty": 0.2, "warm_start_gain": 0.7},
    }  # fmt: skip

    margin: str | dict = field(
        default="none",
        metadata={
            "help": f"Target-class margin φ: {', '.join(MARGINS)} or a type registered in your own module; its "
            "parameters as margin:m=0.2 (or --m 0.2 for a one-parameter margin; a config takes "
            '{"type": "arc", "m": 0.2}).',
            COMPONENT: "margin",
        },
    )
    scale: float | None = field(
        default=None, metadata={"help": "Face-recognition setting: normalise both vectors, ‖W‖=1, ‖h‖=scale."}
    )
    word_norm: str | dict = field(
        default="no-mod",
        metadata={
            "help": f"Word-vector norm f(y): {', '.join(WORD_NORMS)}, or a registered one.",
            COMPONENT: "word_norm",
        },
    )
    context_norm: str | dict = field(
        default="no-mod",
        metadata={
            "help": f"Context-vector norm g(i): {', '.join(CONTEXT_NORMS)}, or a registered one.",
            COMPONENT: "context_norm",
        },
    )
    context_norm_momentum: float = field(
        default=0.01,
        metadata={"help": "Momentum of the running max-norm used at inference (0 < momentum <= 1)."},
    )
    warm_start_gain: float = field(
        default=1.0,
        metadata={
            "help": "Global factor on g(i)·f(c)·φ (not the bias); 1 = eq. 13 as written. Set by from_base, which fits "
            "it so a norm-scaled head starts at the checkpoint's distribution (hf_heads.losses.scorer)."
        },
    )

    # the flat form of older configs and flags: `m` beside a one-parameter margin's name (migrated on reading)
    flat_options: ClassVar[dict] = {"m": (float, "Margin m of a one-parameter margin (same as --margin arc:m=0.2).")}

    @classmethod
    def migrate(cls, head: dict) -> dict:
        """A head section of the older flat form (`margin` a name, `m` beside it) as the nested form."""
        if "m" not in head:
            return head
        head = dict(head)
        m = head.pop("m")
        try:
            margin = make_margin(head.get("margin", "none"), m)
        except OptionError as err:
            raise err.renamed("m" if err.field == "m" else err.name) from None
        head["margin"] = component_config(margin)
        return head

    def check(self) -> None:
        super().check()
        if self.label_smoothing:
            raise OptionError(
                "label_smoothing", self.label_smoothing, "is only available for the softmax and sparse families"
            )
        check_number("context_norm_momentum", self.context_norm_momentum, exclusive_minimum=0)
        if self.context_norm_momentum > 1:
            raise OptionError("context_norm_momentum", self.context_norm_momentum, "must be <= 1")
        check_number("warm_start_gain", self.warm_start_gain, exclusive_minimum=0)
        self.scorer()  # eq. 13's scorer, built once here: its construction checks margin, m, scale and the norms
        default = type(self).__dataclass_fields__["context_norm_momentum"].default
        if self.context_norm_momentum != default and not self.batch_context_norm:
            allowed = "is the momentum of a batch context norm's running value (context_norm='max-norm')"
            raise OptionError("context_norm_momentum", self.context_norm_momentum, allowed)

    @property
    def norm_scaled(self) -> bool:
        """Whether f or g replaces the vectors' own norms (eq. 9-10; not in the face-recognition setting)."""
        scorer = self.scorer()
        return self.scale is None and not (scorer.word_norm.identity and scorer.context_norm.identity)

    @property
    def needs_counts(self) -> bool:
        return super().needs_counts or self.scorer().needs_counts

    def counts_reason(self) -> str:
        return f"word_norm={self.word_norm!r}" if self.scorer().needs_counts else super().counts_reason()

    @property
    def batch_context_norm(self) -> bool:
        """Whether g is a batch statistic (max-norm), replaced by a running value outside training."""
        return self.scorer().context_norm.batch_dependent

    @property
    def loss_depends_on_batch(self) -> bool:
        return self.batch_context_norm

    def scorer(self, with_margin: bool = True) -> Scorer:
        """Eq. 13's scorer of these options with the output transform, with the margin (training) or without it
        (`with_margin=False`); built on first use and kept."""
        scorers = self.__dict__.get("_scorers")
        if scorers is None:
            train = Scorer.from_options(
                self.margin,
                None,
                self.scale,
                self.word_norm,
                self.context_norm,
                gain=self.warm_start_gain,
                logit_multiplier=self.logit_multiplier,
                softcap=self.logit_softcap,
            )
            scorers = self.__dict__["_scorers"] = (train, train.without_margin())
        return scorers[0] if with_margin else scorers[1]

    def reference(self, batch: ReferenceBatch) -> tuple[torch.Tensor, torch.Tensor]:
        """Eq. 13 on the dense logits from the components' own references: l(c, i) = g(i)·f(c)·cos θ_ic + b_c (`scale`
        s: g = s, f = 1; in evaluation a batch-dependent g is `batch.running` when given), g times `warm_start_gain`;
        in training the target's entry is g(i)·f(y)·φ(θ) + b_y with the margin's `phi` (eq. 14); then the checkpoint's
        transform. The loss is the softmax family's over those logits; the inference logits are l without margin."""
        plain, with_margin = self.reference_scores(batch)
        return self.reference_loss(with_margin if batch.training else plain, batch), plain

    def reference_scores(self, batch: ReferenceBatch) -> tuple[torch.Tensor, torch.Tensor]:
        """(l (N, V) without margin, l with the margin on each counted row's target) of eq. 13, transformed."""
        word_norm, context_norm, margin = (self.component(k) for k in ("word_norm", "context_norm", "margin"))
        h, weight, bias = batch.hidden, batch.params["weight"], batch.params.get("bias")
        valid = batch.valid
        cos = (h @ weight.T) / (h.norm(dim=1)[:, None] * weight.norm(dim=1)[None, :])  # (N, V)
        if self.scale is not None:
            g, f = torch.full_like(cos[:, 0], self.scale), torch.ones_like(cos[0])
        else:
            g = context_norm.reference(h, valid)  # (N,)
            if not batch.training and batch.running is not None and context_norm.batch_dependent:
                g = batch.running.to(h.dtype).expand(h.shape[0])
            f = word_norm.reference(weight, batch.counts if word_norm.needs_counts else None)  # (V,)
        g = g * self.warm_start_gain
        plain = g[:, None] * f[None, :] * cos  # (N, V)
        rows, y = torch.nonzero(valid).squeeze(1), batch.labels[valid]
        theta = torch.acos(cos[rows, y].clamp(-1, 1))
        target = g[rows] * f[y] * margin.phi(theta) if margin.changes_target else plain[rows, y]
        with_margin = plain.index_put((rows, y), target)
        if bias is not None:
            plain, with_margin = plain + bias, with_margin + bias
        plain, with_margin = plain * self.logit_multiplier, with_margin * self.logit_multiplier
        if self.logit_softcap is not None:  # cap · tanh(multiplier · l / cap)
            cap = self.logit_softcap
            plain, with_margin = cap * torch.tanh(plain / cap), cap * torch.tanh(with_margin / cap)
        return plain, with_margin

    def describe(self) -> str:
        scorer = self.scorer()
        parts = [scorer.margin.describe() if scorer.margin.changes_target else scorer.margin.name]
        if self.scale:
            parts.append(f"s={self.scale}")
        else:
            parts += [f"f={scorer.word_norm.describe()}", f"g={scorer.context_norm.describe()}"]
        return "margin " + " ".join(parts)


@register("family")
class MarginHead(DiscreteHead):
    """Output layer with the large-margin criterion (see the module docstring)."""

    family = "margin"
    options_class = MarginHeadOptions

    paper = "Huo et al., *Investigation of Large-Margin Softmax in Neural Language Modeling*, Interspeech 2020"
    logits_note = "the model's own scores, never the margin"

    # ------------------------------------------------------------------ max-norm

    def check_scorable(self) -> None:
        """A max-norm head scores with its running max ‖h‖; before one exists a score would depend on its batch."""
        if self.options.batch_context_norm and self.running_context_norm() is None:
            raise ValueError(
                "head.context_norm='max-norm' has no running max ‖h‖ yet (it is set by training or by from_base's "
                "calibration): without it a score would depend on the rest of its batch"
            )

    def running_context_norm(self) -> torch.Tensor | None:
        """The running max ‖h‖ used by max-norm outside training (None before the first training step)."""
        if self.options.batch_context_norm and float(self.context_norm_running) >= 0:
            return self.context_norm_running
        return None

    @torch.no_grad()
    def _observe(self, hidden: torch.Tensor, labels: torch.Tensor, ignore_index: int) -> None:
        """Update the running max-norm with a training batch."""
        if not self.options.batch_context_norm:
            return
        # on the device, no host read: a batch without a counted row leaves the running value as it is
        valid = labels.reshape(-1) != ignore_index  # (N,)
        hidden = hidden.reshape(-1, hidden.shape[-1]).float()  # (N, H)
        running = self.context_norm_running
        batch_max = self.scorer().context_norm.batch_value(hidden, valid).to(running.dtype)
        updated = torch.where(running < 0, batch_max, running.lerp(batch_max, self.options.context_norm_momentum))
        running.copy_(torch.where(valid.any(), updated, running))

    # ------------------------------------------------------------------ hooks

    def scorer(self, with_margin: bool = True) -> Scorer:
        """The head's scorer (`MarginHeadOptions.scorer`), with or without the margin."""
        return self.options.scorer(with_margin)

    def training_loss(self, hidden, labels, counting):
        self._observe(hidden, labels, counting.ignore_index)
        return self.criterion(hidden, labels, counting)

    def _scorer_arguments(self, training: bool) -> dict:
        """`scorer`, `word_counts` and `context_norm_value` of `margin_logits`: with the margin and max-norm's batch
        maximum in training, else without the margin and with the running maximum."""
        return dict(
            scorer=self.scorer(training),
            word_counts=self.counts(),
            context_norm_value=None if training else self.running_context_norm(),
        )

    def loss_scorer(self, training: bool) -> Scorer:
        """The scorer of a pass's loss with its data (`_scorer_arguments`)."""
        arguments = self._scorer_arguments(training)
        return arguments.pop("scorer").given(**arguments)

    def criterion(self, hidden, labels, counting: RowCounting) -> torch.Tensor:
        """The training criterion once the running statistics are updated: cross-entropy of eq. 13 with margin."""
        return self._cross_entropy(hidden, labels, True, counting)

    def eval_loss(self, hidden, labels, counting):
        """NLL of the inference distribution (no margin; max-norm uses the running value)."""
        return self._cross_entropy(hidden, labels, False, counting)

    same_pass_accuracy = True

    def _cross_entropy(self, hidden, labels, training: bool, counting: RowCounting, statistics: bool = False):
        """Eq. 4 over the logits of eq. 13 (in training with the margin and the options' extras). `statistics`: (loss,
        the same pass's token statistics)."""
        o = self.options
        criterion = CrossEntropy()
        if training:
            criterion = CrossEntropy(
                z_loss=o.z_loss, confidence_penalty=o.confidence_penalty, class_weight=self.class_weight()
            )
        out = self.layer_loss(
            hidden, labels, counting, scorer=self.loss_scorer(training), criterion=criterion,
            returns=self._returns(training, statistics),
        )  # fmt: skip
        return self._from_output(out, labels, counting, training, statistics)

    @property
    def pass_is_inference_distribution(self) -> bool:
        """In eval mode only: the training pass carries the margin (and max-norm the batch's maximum)."""
        return not self.training

    def inference_logits(self, hidden):
        """Computed in float32 with autocast off, returned in the head's dtype."""
        return self._inference_scores(hidden).to(self.weight.dtype)

    @autocast_off
    def _inference_scores(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.posterior(self.scores(hidden))

    def scores(self, hidden: torch.Tensor, gain: float | None = None) -> torch.Tensor:
        """l(c, i) of eq. 13 without margin, (*, V) in float32; `gain` replaces `warm_start_gain` (the calibration's
        search)."""
        hidden = hidden if hidden.dtype == torch.float64 else hidden.float()
        arguments = self._scorer_arguments(False)
        if gain is not None:
            arguments["scorer"] = dataclasses.replace(arguments["scorer"], gain=gain)
        out = margin_logits(hidden, self.weight, self.bias, None, **arguments)
        return out if out.dtype == torch.float64 else out.float()

    def posterior(self, scores: torch.Tensor) -> torch.Tensor:
        """Inference logits from the scores (the margin family: the scores themselves)."""
        return scores

    @torch.no_grad()
    def linear_form(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Eq. 13 without margin with the context norm no-mod (g(i) = gain·‖h_i‖) is (gain·f(c)/‖W_c‖)·W_c·h_i + b_c:
        W's rows scaled by gain·f(c)/‖W_c‖, the bias as it is; float32 (float64 stays). Refused where g is not ‖h_i‖
        (max-norm, any other context norm, the face-recognition `scale`): the logit then divides by ‖h_i‖, which no
        linear layer does."""
        scorer = self.scorer(False)
        if scorer.scale is not None or not scorer.context_norm.identity:
            g = f"scale={scorer.scale}" if scorer.scale is not None else f"context_norm={scorer.context_norm.name!r}"
            raise ValueError(
                f"the {self.family} head's {g} scores g·f(c)·cos θ + b_c with g a constant at inference (eq. 13; "
                "max-norm: its running max ‖h‖), i.e. g·f(c)·W_c·h / (‖W_c‖·‖h‖) + b_c: the logits divide by ‖h‖, "
                "which no linear output layer on h does, so the base architecture cannot hold this distribution. "
                "Nearest exact "
                f"choice: none in the base architecture; {SERVED_AS_IT_IS}"
            )
        weight = self.weight if self.weight.dtype == torch.float64 else self.weight.float()  # (V, H)
        norms = torch.linalg.vector_norm(weight, dim=1).clamp_min(1e-12)  # (V,), clamped as the scorer does
        f = word_norm_values(weight, scorer.word_norm, self.counts(), norms)  # (V,) or None (f = ‖W_c‖)
        if f is None and scorer.gain == 1.0:
            return weight, self.bias  # eq. 13 as written is W h + b
        scale = scorer.gain * (1.0 if f is None else f / norms)  # (V,) or a number
        return weight * (scale[:, None] if torch.is_tensor(scale) else scale), self.bias  # (V, H)

    def loss_names(self, target: str = "word") -> tuple[str, str]:
        o = self.options
        name = f"margin softmax cross-entropy, {o.scorer().margin.describe()}{loss_extras(o)}"
        return name, f"NLL of the {target}, no margin"

    # ------------------------------------------------------------------ warm start

    @property
    def needs_calibration(self) -> bool:
        """Whether `calibrate_to` has something to do (norm scalings, max-norm)."""
        return self.options.norm_scaled or self.options.batch_context_norm

    @torch.no_grad()
    def calibrate_to(self, hidden: torch.Tensor, base_log_probs: torch.Tensor) -> dict[str, float]:
        """Start as close to a checkpoint's distribution as the family allows (`from_base`, once, on probe positions):
        hidden (N, H) the probe's final hidden states, base_log_probs (N, V) the checkpoint's log-probabilities.
        max-norm's running value becomes the probe's max ‖h‖; sampled heads shift their bias; norm-scaled heads fit
        `warm_start_gain` by golden-section search minimising KL(checkpoint ‖ head). Returns what was set."""
        o = self.options
        h = hidden.reshape(-1, hidden.shape[-1]).float()  # (N, H)
        target = base_log_probs.reshape(-1, base_log_probs.shape[-1]).float()  # (N, V)
        report: dict[str, float] = {}
        if o.batch_context_norm:
            self.context_norm_running.fill_(float(self.scorer().context_norm.batch_value(h, None)))
            report["context_norm_running"] = float(self.context_norm_running)
        report.update(self.calibrate_bias(h))
        if o.norm_scaled:
            p = target.exp()

            def kl(log_gain: float) -> float:
                with whole_parameters(self):  # the inference logits (in the head's dtype) at this gain
                    logits = self.posterior(self.scores(h, gain=math.exp(log_gain))).to(self.weight.dtype).float()
                return float((p * (target - torch.log_softmax(logits, dim=-1))).sum(-1).mean())

            gain = math.exp(_golden_section(kl, math.log(1e-3), math.log(1e3), steps=40))
            self.options = dataclasses.replace(o, warm_start_gain=gain)
            report["warm_start_gain"] = self.options.warm_start_gain
        self.warm_start_pending = False
        return report

    def calibrate_bias(self, hidden: torch.Tensor) -> dict[str, float]:
        """Shift the bias so the inference distribution starts at the checkpoint's (margin heads: nothing to do)."""
        return {}


def _golden_section(fn, lo: float, hi: float, steps: int) -> float:
    """The midpoint of the bracket left after `steps` golden-section steps minimising `fn` on [lo, hi]."""
    ratio = (math.sqrt(5) - 1) / 2
    a, b = hi - ratio * (hi - lo), lo + ratio * (hi - lo)
    fa, fb = fn(a), fn(b)
    for _ in range(steps):
        if fa < fb:
            hi, b, fb = b, a, fa
            a = hi - ratio * (hi - lo)
            fa = fn(a)
        else:
            lo, a, fa = a, b, fb
            b = lo + ratio * (hi - lo)
            fb = fn(b)
    return (lo + hi) / 2
