"""The sampled family: sampling-based training criteria with the correction back to class posteriors (Gao et al.,
Interspeech 2021, eqs. 1-22; hf_heads.losses.sampled). A margin head (eq. 13 scorer, margin options composing) whose
training criterion runs over K shared noise samples. Inference logits are the corrected log-posteriors over the full
vocabulary, and the eval loss is their NLL, so perplexity and `generate()` see p(c|x). The samples are drawn with the
device's default torch generator, which the Trainer seeds and checkpoints, so a resumed run draws the same samples as
the uninterrupted one.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import ClassVar

import torch

from hf_heads.components import component_config, register
from hf_heads.heads.base import SERVED_AS_IT_IS
from hf_heads.heads.margin import MarginHead, MarginHeadOptions
from hf_heads.heads.options import ReferenceBatch
from hf_heads.heads.registry import COMPONENT
from hf_heads.losses.margin import Full
from hf_heads.losses.noise import NOISES, UnigramNoise, make_noise, noise_distribution
from hf_heads.losses.parts import CRITERIA, Criterion, make_criterion
from hf_heads.losses.sampled import (
    METHODS,
    Correction,
    Sampled,
    SamplingMethod,
    corrected_log_probs,
    self_normalization,
    validate_sampled_options,
)
from hf_heads.losses.vocab_parallel import whole_parameters
from hf_heads.validation import OptionError

_DIAGNOSTIC_ROWS = 64  # rows of the last training batch kept for the self-normalisation diagnostic


@dataclass
class SampledHeadOptions(MarginHeadOptions):
    """Sampling-based criteria with the posterior correction (sampling paper, eqs. 1-22); the margin options
    compose."""

    examples: ClassVar[dict[str, dict]] = {
        "sampled": {"criterion": "bce", "method": "nce", "num_samples": 8, "noise": "uniform"},
        "sampled-ce-is": {"criterion": "ce", "method": "is", "num_samples": 8, "noise": "uniform"},
    }
    contract_examples: ClassVar[dict[str, dict]] = {
        "sampled-mse-full": {"criterion": "mse", "method": "full"},
        "sampled-ce-mcs-max-norm": {
            "criterion": "ce", "method": "mcs", "num_samples": 5, "noise": "log-uniform", "context_norm": "max-norm",
        },
        "sampled-ce-is-cos-no-hits": {  # K = 12 of 13 classes in the contract suite: accidental hits in its batch
            "criterion": "ce", "method": "is", "num_samples": 12, "noise": "uniform", "margin": "cos", "m": 0.2,
            "remove_accidental_hits": True,
        },
        "sampled-bce-cps-unnormalized": {
            "criterion": "bce", "method": "cps", "num_samples": 5, "noise": "unigram", "normalize": False,
        },
    }  # fmt: skip

    criterion: str = field(
        default="ce", metadata={"help": f"Training criterion: {', '.join(CRITERIA)}, or a registered one."}
    )
    method: str | dict = field(
        default="full",
        metadata={
            "help": f"Sampling method: {', '.join(METHODS)} (full = no sampling), or a registered one.",
            COMPONENT: "sampling_method",
        },
    )
    num_samples: int | None = field(
        default=None,
        metadata={
            "help": "K noise samples per batch, shared by all positions (1 <= K < V); the batch does not average the "
            "draw out, so K·D(c) should be about 0.8 or more for the classes to tell apart (choosing-a-head.md: how "
            "many samples)."
        },
    )
    noise: str | dict = field(
        default="log-uniform",
        metadata={
            "help": f"Noise distribution D: {', '.join(NOISES)} (ranks / counts from the training set), or a "
            "registered one; the unigram noise's parameters as unigram:smoothing=0.75,add=1 "
            "(D(c) ∝ (count + add)^smoothing).",
            COMPONENT: "noise",
        },
    )
    remove_accidental_hits: bool = field(
        default=False, metadata={"help": "Drop samples equal to the target (default: keep, as in the paper)."}
    )
    normalize: bool = field(
        default=True,
        metadata={"help": "Inference: renormalise the corrected posterior over V (false: raw corrected scores)."},
    )

    def check(self) -> None:
        super().check()
        refused = (("z_loss", self.z_loss, 0.0), ("class_weights", self.class_weights, None))
        for option, value, off in (*refused, ("confidence_penalty", self.confidence_penalty, 0.0)):
            if value != off:
                shown = f"a list of {len(value)} numbers" if isinstance(value, list) else value
                allowed = "is for the softmax, sparse and margin families (a full softmax), not the sampled family"
                raise OptionError(option, shown, allowed)
        if not self.sampler.draws_samples and self.num_samples is not None:
            raise OptionError(
                "num_samples",
                self.num_samples,
                "is only used by a sampling method, not method='full'; drop it or choose method mcs / is / cps / nce",
            )
        validate_sampled_options(self.criterion, self.method, self.num_samples, None)

    # the older flat form: the unigram noise's parameters beside its name (migrated on reading)
    flat_options: ClassVar[dict] = {
        **MarginHeadOptions.flat_options,
        "noise_smoothing": (
            float,
            "Unigram noise: D(c) ∝ (count + add)^smoothing (same as --noise unigram:smoothing=…).",
        ),
        "noise_add": (float, "Unigram noise: count added to every class (same as --noise unigram:add=…)."),
    }
    _FLAT_NOISE_DEFAULTS: ClassVar[dict] = {"noise_smoothing": 0.75, "noise_add": 0.0}  # what older configs stored

    @classmethod
    def migrate(cls, head: dict) -> dict:
        """Also `noise_smoothing` / `noise_add` beside the noise's name, as the unigram noise's parameters; beside
        another noise they are dropped at their old defaults and refused otherwise."""
        head = super().migrate(head)
        flat = {key: head[key] for key in ("noise_smoothing", "noise_add") if key in head}
        if not flat:
            return head
        head = {key: value for key, value in head.items() if key not in flat}
        noise = make_noise(head.get("noise", "log-uniform"))
        if isinstance(noise, UnigramNoise):
            given = {key.removeprefix("noise_"): value for key, value in flat.items()}
            inner = head.get("noise") if isinstance(head.get("noise"), dict) else {}
            for key, value in given.items():
                if key in inner and inner[key] != value:
                    raise OptionError(f"noise_{key}", value, f"is given twice, as noise_{key} and noise.{key}")
            try:
                head["noise"] = component_config(make_noise({**noise.parameters(), **given, "type": noise.name}))
            except OptionError as err:  # named as it was given: noise_smoothing, noise_add
                raise OptionError(f"noise_{err.field}", err.value, err.allowed) from None
            return head
        for key, value in flat.items():
            if value != cls._FLAT_NOISE_DEFAULTS[key]:
                raise OptionError(key, value, f"is a parameter of the unigram noise only, not of noise={noise.name!r}")
        return head

    def initial_bias(self, num_classes: int) -> float:
        """−log V for the BCE and MSE criteria, 0 otherwise: their outputs q = σ(s) (or exp(s) for NCE) are not
        renormalised and their optimum is q ≈ p(c|x) ~ 1/V, so from b = 0 the first thousands of steps would only pull
        the normaliser down (the usual NCE initialisation; the paper is silent)."""
        return 0.0 if self.loss_criterion.softmax else -math.log(num_classes)

    @property
    def loss_criterion(self) -> Criterion:
        """The criterion object the `criterion` option names (hf_heads.losses.parts)."""
        cached = self.__dict__.get("_criterion")
        if cached is None:
            cached = self.__dict__["_criterion"] = make_criterion(self.criterion)
        return cached

    @property
    def sampler(self) -> SamplingMethod:
        """The sampling method object (hf_heads.losses.sampled)."""
        return self.component("method")

    @property
    def samples(self) -> bool:
        """Whether the criterion draws noise samples (every method but `full`)."""
        return self.sampler.draws_samples

    @property
    def needs_counts(self) -> bool:
        return super().needs_counts or (self.samples and self.component("noise").needs_counts)

    def counts_reason(self) -> str:
        return super().counts_reason() or f"noise={self.noise!r}"

    def correction(self) -> dict:
        """Keyword arguments of `corrected_log_probs` (without the noise distribution)."""
        return dict(criterion=self.loss_criterion, method=self.sampler, num_samples=self.num_samples)

    def reference(self, batch: ReferenceBatch) -> tuple[torch.Tensor, torch.Tensor]:
        """The margin family's scores l of eq. 13; in training each counted row's criterion from its method's
        `reference` with the target's score (with the margin) and the other candidates': every other class, or the K
        samples drawn for the batch from the noise's `reference` (accidental hits dropped with
        `remove_accidental_hits`). In evaluation the NLL of log_softmax(correction(l)) (eqs. 2-22); the inference
        logits are that posterior."""
        plain, with_margin = self.reference_scores(batch)  # (N, V) each
        valid, num_classes = batch.valid, plain.shape[1]
        y = batch.labels[valid]
        noise = None
        if self.samples:
            counts = batch.counts if self.component("noise").needs_counts else None
            noise = self.component("noise").reference(num_classes, counts, None)  # (V,) D
        log_d = None if noise is None else noise.log().to(plain.dtype)
        corrected = self.sampler.correction(plain, self.loss_criterion, log_d, self.num_samples, num_classes)
        logits = corrected.log_softmax(1) if self.normalize else corrected
        if not batch.training:
            return -corrected[valid].log_softmax(1).gather(1, y[:, None]).squeeze(1), logits
        samples = None  # the K draws of the batch, i.i.d. with replacement
        if noise is not None:
            samples = torch.multinomial(noise.float(), self.num_samples, replacement=True).tolist()
        t, s = with_margin[valid].gather(1, y[:, None]).squeeze(1), plain[valid]  # (n,), (n, V)
        rows = []
        for i, yi in enumerate(y.tolist()):
            if samples is None:
                others = [c for c in range(num_classes) if c != yi]
                log_kd_t, log_kd = t.new_zeros(()), t.new_zeros(len(others))
            else:
                others = [c for c in samples if not (self.remove_accidental_hits and c == yi)]
                log_kd_t = torch.log(self.num_samples * noise[yi]).to(t.dtype)
                log_kd = torch.log(self.num_samples * noise[others]).to(t.dtype)
            rows.append(
                self.sampler.reference(
                    self.loss_criterion, t[i], s[i, others], log_kd_t, log_kd, self.num_samples, num_classes
                )
            )
        return torch.stack(rows) if rows else t.new_zeros(0), logits

    def describe(self) -> str:
        name = f"sampled {self.criterion}-{self.sampler.describe().replace(' ', ',')}"
        return name + (f" K={self.num_samples} {self.component('noise').describe()}" if self.samples else "")


@register("family")
class SampledHead(MarginHead):
    """A margin head trained with a sampling-based criterion (see the module docstring)."""

    family = "sampled"
    options_class = SampledHeadOptions

    paper = "Gao et al., *On Sampling-Based Training Criteria for Neural Language Modeling*, Interspeech 2021"
    logits_note = "the paper's correction of the trained scores, renormalised over the vocabulary"

    has_unnormalized_scores = True
    same_pass_accuracy = False  # its criteria score the target and K samples, not every class

    def unnormalized_log_scores(self, hidden: torch.Tensor) -> torch.Tensor:
        """(*, V) corrected log-scores log p̃(c|x) without renormalisation (the sampling paper's table 4)."""
        return self.posterior(self.scores(hidden), normalize=False)

    @property
    def training_loss_is_nll(self) -> bool:
        """CE full, CE-MCS and CE-NCE are −log of a softmax over the vocabulary or the candidates (eqs. 5, 9, 21);
        CE-IS and CE-CPS weight the denominator (1 / (K·D), α = C/K: eqs. 13, 17), BCE and MSE are not softmaxes."""
        return self.options.loss_criterion.softmax and self.options.sampler.ce_is_softmax

    def __init__(self, hidden_size: int, num_classes: int, options: SampledHeadOptions | dict | None = None) -> None:
        super().__init__(hidden_size, num_classes, options)
        o = self.options
        if o.samples and o.num_samples >= num_classes:
            raise OptionError("head.num_samples", o.num_samples, f"must be < the number of classes ({num_classes})")

    def noise_probs(self) -> torch.Tensor | None:
        """D (V,) (from the word counts for log-uniform / unigram noise); None for method full."""
        o = self.options
        if not o.samples:
            return None
        # D depends only on the counts: rebuild it when they change (in-place writes, e.g. set_word_counts or
        # load_state_dict, bump the buffer's version), not at every step.
        key = (self.word_counts._version, self.weight.device)
        cached = getattr(self, "_noise_cache", None)
        if cached is not None and cached[0] == key:
            return cached[1]
        noise = o.component("noise")
        counts = self.counts() if noise.needs_counts else None
        probs = noise_distribution(noise, self.num_classes, counts=counts).to(self.weight.device)
        self._noise_cache = (key, probs)
        return probs

    def criterion(self, hidden, labels, counting):
        """The criterion over the target and K noise samples (`Sampled`), or every class for "full", margin on the
        target."""
        o = self.options
        self._last_hidden = hidden.detach().reshape(-1, hidden.shape[-1])[:_DIAGNOSTIC_ROWS]
        candidates = Full()
        if o.samples:
            candidates = Sampled(o.sampler, o.num_samples, self.noise_probs(), o.remove_accidental_hits)
        return self.layer_loss(
            hidden, labels, counting, scorer=self.loss_scorer(True), candidates=candidates, criterion=o.loss_criterion
        )

    def eval_loss(self, hidden, labels, counting):
        """NLL of the corrected full-vocabulary posterior (no margin; max-norm uses the running value)."""
        o = self.options
        posterior = Correction(o.loss_criterion, o.sampler, o.num_samples, self.noise_probs())
        return self.layer_loss(hidden, labels, counting, scorer=self.loss_scorer(False).given(posterior=posterior))

    def posterior(self, scores: torch.Tensor, normalize: bool | None = None) -> torch.Tensor:
        normalize = self.options.normalize if normalize is None else normalize
        return corrected_log_probs(
            scores, **self.options.correction(), noise_probs=self.noise_probs(), normalize=normalize
        ).to(scores.dtype)

    @torch.no_grad()
    def linear_form(self) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The margin family's (W', b') with the correction's per-class offset o(c) in the bias, b' + o / multiplier,
        for the corrections s + o(c) (eqs. 6, 8, 10, 12, 14, 16, 18, 20). Refused: the σ-based corrections (eqs. 2,
        4, 22) and a per-class offset under the soft-cap (added after the cap, outside any layer)."""
        o = self.options
        if not o.sampler.correction_is_additive(o.loss_criterion):
            raise ValueError(
                f"the sampled head's {o.criterion}-{o.sampler.name} posterior correction is not the score plus a "
                "per-class offset (full BCE / MSE: log σ(s), eqs. 2, 4; CE-NCE: σ(z) + log D(c), eq. 22): it is "
                "non-linear in the score, so no linear output layer gives this distribution. Nearest exact choice: "
                f"none in the base architecture; {SERVED_AS_IT_IS}"
            )
        weight, bias = super().linear_form()  # (V, H), (V,) or None
        offset = self.posterior(weight.new_zeros(1, self.num_classes), normalize=False)[0]  # (V,) o(c)
        if bool((offset == offset[0]).all()):
            return weight, bias  # the same for every class: no change to the distribution
        if o.logit_softcap is not None:
            raise ValueError(
                f"the sampled head's {o.criterion}-{o.sampler.name} correction adds a per-class offset (log D(c) of "
                f"the {o.component('noise').name} noise) after the checkpoint's soft-cap cap·tanh(·) "
                f"(logit_softcap={o.logit_softcap}), outside any output layer: the base architecture, which caps its "
                f"layer's logits last, cannot hold this distribution. Nearest exact choice: none in the base "
                f"architecture; {SERVED_AS_IT_IS}"
            )
        shift = offset / o.logit_multiplier  # (V,): s + o = multiplier·(W' h + b' + o / multiplier)
        return weight, shift if bias is None else bias.to(shift.dtype) + shift

    def loss_names(self, target: str = "word") -> tuple[str, str]:
        o = self.options
        method = o.sampler.describe()
        train = f"sampled criterion {o.criterion}-{method}" + (f", K={o.num_samples}" if o.samples else "")
        return train, f"NLL of the {target}, corrected posterior, no margin"

    @property
    def needs_calibration(self) -> bool:
        return super().needs_calibration or self.bias is not None

    @torch.no_grad()
    def calibrate_bias(self, hidden: torch.Tensor) -> dict[str, float]:
        """Shift the bias by −log Z (the checkpoint's mean log-normaliser over the probe) minus the correction's
        per-class offset, so the corrected scores start at the checkpoint's log p(c|x), every criterion's optimum but
        CE-NCE's (σ-bounded: left as copied; full BCE/MSE: log σ(s) ≈ s). With a logit scale s the shift is divided by
        s."""
        o = self.options
        if self.bias is None or (o.loss_criterion.softmax and not o.sampler.ce_optimum_is_posterior):
            return {}
        log_z = torch.logsumexp(self.scores(hidden), dim=1).mean()  # scalar
        offset = torch.zeros_like(self.bias, dtype=torch.float32)  # (V,) per-class offset of the correction
        if o.samples or o.loss_criterion.softmax:
            zeros = torch.zeros(1, self.num_classes, device=self.bias.device)
            offset = self.posterior(zeros, normalize=False)[0]
        self.bias.sub_(((log_z + offset) / o.logit_multiplier).to(self.bias.dtype))
        return {"bias_shift_mean": -float((log_z + offset).mean())}

    @torch.no_grad()
    def diagnostics(self) -> dict[str, float]:
        """Also the mean / std of log Σ_c p̃(c|x) on the last training batch (0: self-normalised)."""
        out = super().diagnostics()
        last = getattr(self, "_last_hidden", None)
        if last is not None and last.shape[0]:
            with whole_parameters(self):  # a vocabulary-sharded W: its whole tensor
                raw = self.posterior(self.scores(last), normalize=False)
            out["head/self_norm_logz_mean"], out["head/self_norm_logz_std"] = self_normalization(raw)
        return out
