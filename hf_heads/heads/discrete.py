"""The discrete output layer: owns W (V, H), b (V,) and the word counts, and calls the losses.

Training (labels given) computes the chunked loss of the configured family and never builds the
(N, V) logits; inference returns logits whose softmax is the model's p(c | x) (no margin; norm
scaling kept, since it is part of the model). Families: `softmax`, `margin`
(hf_heads.losses.margin), `sampled` (hf_heads.losses.sampled: the training criterion over K
shared noise samples; inference logits are the corrected log-posteriors over the full vocabulary,
and the eval loss is their NLL, so perplexity and `generate()` see p(c|x)) and `sparse`
(hf_heads.losses.sparse: eq. 5 in training and evaluation; inference logits are -inf outside each
row's top k, so softmax of them is eq. 4 and greedy / beam search decode with the truncated
distribution; its perplexity is infinite whenever a target falls outside the top k, which is why
the eval loss is eq. 5 rather than that NLL).

Sampled heads draw their K samples with the default torch generator of the device, which the
transformers Trainer seeds (`--seed`) and saves/restores with every checkpoint (`rng_state*.pth`),
so a resumed run draws the same samples as the uninterrupted one.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from hf_heads.heads.options import (
    MarginHeadOptions,
    SampledHeadOptions,
    SoftmaxHeadOptions,
    SparseHeadOptions,
    head_options,
)
from hf_heads.losses._rows import autocast_off
from hf_heads.losses.fused_linear import fused_linear_cross_entropy
from hf_heads.losses.margin import margin_cross_entropy, margin_logits
from hf_heads.losses.noise import noise_distribution
from hf_heads.losses.sampled import corrected_log_probs, corrected_nll, sampled_loss, self_normalization
from hf_heads.losses.sparse import truncate_to_top_k

_DIAGNOSTIC_ROWS = 64  # rows of the last training batch kept for the self-normalisation diagnostic


class DiscreteHead(nn.Module):
    """Output layer over V classes for hidden states of size H.

    Buffers (saved with the weights): `word_counts` (V,) training counts, -1 where not set; and
    `context_norm_running` (the running max ‖h‖ used by max-norm at inference, -1 before training).
    """

    def __init__(self, hidden_size: int, num_classes: int, head: dict | None = None) -> None:
        super().__init__()
        self.options: SoftmaxHeadOptions = head_options(head)
        if self.is_sampled and self.options.samples and self.options.num_samples >= num_classes:
            raise ValueError(
                f"head.num_samples={self.options.num_samples} must be < the number of classes ({num_classes})"
            )
        self.weight = nn.Parameter(torch.empty(num_classes, hidden_size))
        initial = self.options.initial_bias(num_classes)
        self.bias = nn.Parameter(torch.full((num_classes,), initial)) if self.options.bias else None
        self.register_buffer("word_counts", torch.full((num_classes,), -1.0))
        self.register_buffer("context_norm_running", torch.tensor(-1.0))
        nn.init.normal_(self.weight, std=0.02)

    @property
    def is_margin(self) -> bool:
        return isinstance(self.options, MarginHeadOptions)

    @property
    def is_sampled(self) -> bool:
        return isinstance(self.options, SampledHeadOptions)

    @property
    def eval_loss_is_nll(self) -> bool:
        """Whether the eval-mode loss is the NLL of p(c|x), so exp(loss) is a perplexity (not for sparse
        heads: their eval loss is eq. 5, and their truncated distribution's NLL is infinite off the top k)."""
        return not isinstance(self.options, SparseHeadOptions)

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
            o = self.options
            what = (
                f"word_norm={o.word_norm!r}" if o.scale is None and o.word_norm != "no-mod" else f"noise={o.noise!r}"
            )
            raise ValueError(
                f"head.{what} needs word counts, but this head has none: pass "
                "word_counts=... to from_base(), call head.set_word_counts(...), or train with HeadsTrainer "
                "(it counts the training set)"
            )
        return self.word_counts

    def _margin_kwargs(self, with_margin: bool, inference: bool = False) -> dict:
        o = self.options
        out = dict(scale=o.scale, word_norm=o.word_norm, context_norm=o.context_norm, word_counts=self._counts(),
                   gain=o.warm_start_gain)  # fmt: skip
        return (
            out
            if inference
            else dict(margin=o.margin if with_margin else "none", m=o.m if with_margin else 0.0, **out)
        )

    def noise_probs(self) -> torch.Tensor | None:
        """D (V,) of a sampled head (from the word counts for log-uniform / unigram noise)."""
        if not (self.is_sampled and self.options.samples):
            return None
        # D depends only on the counts: rebuild it when they change (in-place writes, e.g. set_word_counts
        # or load_state_dict, bump the buffer's version), not at every step.
        key = (self.word_counts._version, self.weight.device)
        cached = getattr(self, "_noise_cache", None)
        if cached is not None and cached[0] == key:
            return cached[1]
        o = self.options
        counts = None if o.noise == "uniform" else self._counts()
        probs = noise_distribution(
            o.noise, self.num_classes, counts=counts, smoothing=o.noise_smoothing, add=o.noise_add
        ).to(self.weight.device)
        self._noise_cache = (key, probs)
        return probs

    def _sampled_kwargs(self) -> dict:
        o = self.options
        return dict(criterion=o.criterion, method=o.method, num_samples=o.num_samples, noise_probs=self.noise_probs())

    def _running_context_norm(self) -> torch.Tensor | None:
        if self.is_margin and self.options.context_norm == "max-norm" and float(self.context_norm_running) >= 0:
            return self.context_norm_running
        return None

    @torch.no_grad()
    def _update_context_norm(self, hidden: torch.Tensor, labels: torch.Tensor, ignore_index: int) -> None:
        valid = hidden.reshape(-1, hidden.shape[-1])[labels.reshape(-1) != ignore_index]
        if valid.shape[0] == 0:
            return
        batch_max = valid.float().norm(dim=1).max().to(self.context_norm_running.dtype)
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
        if not self.is_margin:  # softmax, or sparse (eq. 5, chunked); label smoothing in training only
            top_k = self.options.k if isinstance(self.options, SparseHeadOptions) else None
            smoothing = self.options.label_smoothing if self.training else 0.0
            return fused_linear_cross_entropy(
                hidden, self.weight, self.bias, labels, top_k=top_k, label_smoothing=smoothing, **common
            )
        if self.training and self.options.context_norm == "max-norm":
            self._update_context_norm(hidden, labels, ignore_index)
        running = None if self.training else self._running_context_norm()
        if self.is_sampled:
            if not self.training:  # NLL of the corrected full-vocabulary posterior
                return corrected_nll(
                    hidden, self.weight, self.bias, labels, **self._sampled_kwargs(), **common,
                    **self._margin_kwargs(False, inference=True), context_norm_value=running,
                )  # fmt: skip
            self._last_hidden = hidden.detach().reshape(-1, hidden.shape[-1])[:_DIAGNOSTIC_ROWS]
            return sampled_loss(
                hidden, self.weight, self.bias, labels, **self._sampled_kwargs(), **common,
                remove_accidental_hits=self.options.remove_accidental_hits, **self._margin_kwargs(True),
            )  # fmt: skip
        return margin_cross_entropy(
            hidden, self.weight, self.bias, labels, **self._margin_kwargs(self.training),
            context_norm_value=running, **common,
        )  # fmt: skip

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """Inference logits (*, V): log p(c | x) up to a per-row constant; never carries the margin.

        Returned in the head's (the model's) dtype. The softmax / sparse projection is the base model's own
        `F.linear` (so under autocast it runs in the autocast dtype, as the wrapped checkpoint's output layer
        does); the margin / sampled scores are computed in float32 with autocast off."""
        if not self.is_margin:
            out = F.linear(hidden, self.weight, self.bias).to(self.weight.dtype)
            return (
                truncate_to_top_k(out, self.options.inference_k)
                if isinstance(self.options, SparseHeadOptions)
                else out
            )
        return self._margin_inference_logits(hidden).to(self.weight.dtype)

    @autocast_off
    def _margin_inference_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        scores = self._margin_inference_scores(hidden)
        if not self.is_sampled:
            return scores
        o = self.options
        return corrected_log_probs(
            scores, criterion=o.criterion, method=o.method, noise_probs=self.noise_probs(),
            num_samples=o.num_samples, normalize=o.normalize,
        ).to(scores.dtype)  # fmt: skip

    @property
    def needs_calibration(self) -> bool:
        """Whether copying a checkpoint's output layer leaves this head's distribution different from the
        checkpoint's (norm scalings, sampled corrections), so that `calibrate_to` has something to do."""
        if not self.is_margin:
            return False
        o = self.options
        norms = o.scale is None and (o.word_norm != "no-mod" or o.context_norm != "no-mod")
        return norms or o.context_norm == "max-norm" or (self.is_sampled and self.bias is not None)

    @torch.no_grad()
    def calibrate_to(self, hidden: torch.Tensor, base_log_probs: torch.Tensor) -> dict[str, float]:
        """Start as close to a checkpoint's distribution as the family allows (`from_base` calls this once, on
        probe positions, right after copying the checkpoint's output layer). hidden (N, H) are the probe's
        final hidden states and base_log_probs (N, V) the checkpoint's log-probabilities there.

        - max-norm: the running max-norm is set to the probe's max ‖h‖ (inference no longer depends on the batch).
        - sampled heads: the bias is shifted by −log Z (mean log-normaliser of the checkpoint's logits over the
          probe) minus the per-class offset of the criterion's correction (e.g. log K·D(c) for BCE-MCS, log D(c)
          for CE-MCS/CPS): the corrected scores then start at the checkpoint's log p(c|x), which is the optimum of
          every criterion but CE-NCE (its σ-bounded output cannot represent it; left as copied). For full BCE/MSE
          log σ(s) ≈ s for the small probabilities of a large vocabulary, so the same shift applies.
        - norm-scaled heads (word_norm or context_norm not no-mod, `scale` unset): `warm_start_gain` is fitted
          (golden-section search on log gain) to minimise KL(checkpoint ‖ head) over the probe.
        The margin itself never enters (inference logits carry none). Returns what was set."""
        o = self.options
        report: dict[str, float] = {}
        if not self.is_margin:
            return report
        h = hidden.reshape(-1, hidden.shape[-1]).float()  # (N, H)
        target = base_log_probs.reshape(-1, base_log_probs.shape[-1]).float()  # (N, V)
        if o.context_norm == "max-norm":
            self.context_norm_running.fill_(float(h.norm(dim=1).max()))
            report["context_norm_running"] = float(self.context_norm_running)
        if self.is_sampled and self.bias is not None and not (o.criterion == "ce" and o.method == "nce"):
            log_z = torch.logsumexp(self._margin_inference_scores(h), dim=1).mean()  # scalar
            offset = torch.zeros_like(self.bias, dtype=torch.float32)  # (V,) per-class offset of the correction
            if not (o.method == "full" and o.criterion in ("bce", "mse")):
                zeros = torch.zeros(1, self.num_classes, device=self.bias.device)
                offset = corrected_log_probs(zeros, criterion=o.criterion, method=o.method,
                                             noise_probs=self.noise_probs(), num_samples=o.num_samples,
                                             normalize=False)[0]  # fmt: skip
            self.bias.sub_((log_z + offset).to(self.bias.dtype))
            report["bias_shift_mean"] = -float((log_z + offset).mean())
        if o.scale is None and (o.word_norm != "no-mod" or o.context_norm != "no-mod"):
            p = target.exp()

            def kl(log_gain: float) -> float:
                o.warm_start_gain = math.exp(log_gain)
                return float((p * (target - torch.log_softmax(self.logits(h).float(), dim=-1))).sum(-1).mean())

            lo, hi = math.log(1e-3), math.log(1e3)
            ratio = (math.sqrt(5) - 1) / 2
            a, b = hi - ratio * (hi - lo), lo + ratio * (hi - lo)
            fa, fb = kl(a), kl(b)
            for _ in range(40):
                if fa < fb:
                    hi, b, fb = b, a, fa
                    a = hi - ratio * (hi - lo)
                    fa = kl(a)
                else:
                    lo, a, fa = a, b, fb
                    b = lo + ratio * (hi - lo)
                    fb = kl(b)
            o.warm_start_gain = math.exp((lo + hi) / 2)
            report["warm_start_gain"] = o.warm_start_gain
        return report

    def _margin_inference_scores(self, hidden: torch.Tensor) -> torch.Tensor:
        """l(c, i) of eq. 13 without margin (before any sampled correction), (*, V) in float32 (float64 stays)."""
        hidden = hidden if hidden.dtype == torch.float64 else hidden.float()
        scores = margin_logits(hidden, self.weight, self.bias, None, **self._margin_kwargs(False),
                               context_norm_value=self._running_context_norm())  # fmt: skip
        return scores if scores.dtype == torch.float64 else scores.float()

    @torch.no_grad()
    def diagnostics(self) -> dict[str, float]:
        """Statistics logged next to the loss: output-vector norms, the running max-norm and, for
        sampled heads, the self-normalisation of the corrected scores on the last training batch
        (mean / std over positions of log Σ_c p̃(c|x); 0 means self-normalised)."""
        norms = self.weight.float().norm(dim=1)
        out = {"head/weight_norm_mean": norms.mean().item(), "head/weight_norm_std": norms.std().item()}
        if float(self.context_norm_running) >= 0:
            out["head/context_norm_running"] = float(self.context_norm_running)
        last = getattr(self, "_last_hidden", None)
        if self.is_sampled and last is not None and last.shape[0]:
            o = self.options
            scores = self._margin_inference_scores(last)
            raw = corrected_log_probs(scores, criterion=o.criterion, method=o.method, noise_probs=self.noise_probs(),
                                      num_samples=o.num_samples, normalize=False)  # fmt: skip
            out["head/self_norm_logz_mean"], out["head/self_norm_logz_std"] = self_normalization(raw)
        return {k: round(v, 4) for k, v in out.items()}

    def forward(self, hidden: torch.Tensor, labels: torch.Tensor | None = None, **loss_kwargs):
        """(loss or None, logits or None): logits are skipped while training with labels."""
        loss = None if labels is None else self.loss(hidden, labels, **loss_kwargs)
        logits = None if (labels is not None and self.training) else self.logits(hidden)
        return loss, logits
