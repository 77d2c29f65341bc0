"""The scorer of the large-margin softmax: the logit of class c for the context vector h_i,

    l(c, i) = g(i) · f(c) · φ_c(cos θ_{c,i}) + b_c            (margin paper, eq. 13)

with φ_c = cos for every class but the target y, whose φ is the margin (eq. 14), then the checkpoint's output transform
cap · tanh(multiplier · l / cap). Paper: Huo, Gao, Wang, Schlüter, Ney, "Investigation of Large-Margin Softmax in
Neural Language Modeling", Interspeech 2020 (shared/papers/large_margin_softmax_lm.md).

- `Margin`: φ of the target, one registered component class per margin type (`register_margin`): `NoMargin`, `CosFace`
  (eq. 5), `ArcFace` (eq. 6), `LSoftmax` (eqs. 7–8). `phi` is the definition (the reference), `safe_phi` a form whose
  value and gradient are finite on all of [−1, 1] (what the losses use).
- f (eq. 9, with v and u of eqs. 11–12) and g (eq. 10): one component class per norm (`WordNorm`, `ContextNorm`).
- `Scorer`: frozen, validated on construction, built once per head from its options. `resolve_scorer` is the one place
  that turns the losses' keyword options into a scorer.

Choices where the paper is silent (each is tested; the norms' and margins' own are in their docstrings):
- amax / amin are the ids with the largest / smallest count; `rank` is the frequency rank taken from the counts (0 =
  most frequent), not the token id, so Hub subword vocabularies work too.
- u (eq. 12) divides by the largest count c_max, so f(amax) = ‖W_amax‖ exactly.
- f and g are recomputed from the current weights at every call and gradients flow through them ("dynamically updated
  in each update step"); max-norm's maximum is over the non-ignored rows, or `context_norm_value` when given (the
  heads' running maximum at inference, so a prediction does not depend on the rest of its batch).
- The margin is applied only when targets are given (training); inference logits never carry it.
- `gain` (default 1, not in the paper) multiplies g(i), not the bias: `HeadsForCausalLM.from_base` fits it once so that
  a norm-scaled head starts as close to the checkpoint's distribution as one global factor allows.
- The output transform applies to every logit of eq. 13, the margin's target logit included: the margin is taken on the
  raw logit and the cap bounds the result, as the checkpoint's own logits are capped.
"""

from __future__ import annotations

import dataclasses
import math
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import ClassVar

import torch

from hf_heads.components import (
    REGISTRIES,
    Component,
    component_base,
    component_class,
    component_config,
    make_component,
    register,
)
from hf_heads.losses.fused_linear import WeightGradSlot
from hf_heads.losses.noise import frequency_ranks
from hf_heads.losses.precision import compute_dtype
from hf_heads.losses.reduction import host_reads_are_free
from hf_heads.losses.transforms import check_transform, soft_cap
from hf_heads.validation import OptionError, check_number

_EPS = 1e-12
_ACOS_EPS = 1e-7  # the default `safe_phi` keeps cos θ this far inside (−1, 1), where acos' derivative is finite


# ----------------------------------------------------------------------------- φ of the target (eq. 14)


@component_base("margin")
@dataclass(frozen=True)
class Margin(Component, ABC):
    """φ of the target class (eq. 14), one registered component class per margin type, its parameters its fields. A
    subclass defines `phi` (the definition, its reference) and, where φ(acos(cos θ)) is not gradient-safe,
    `safe_phi`."""

    changes_target: ClassVar[bool] = True  # False: φ = cos, the target logit is computed like every other

    def __getattr__(self, name: str):
        if name == "m":  # a margin written for the one-parameter base of hf_heads 0.1
            raise AttributeError(
                f"margin {self.name!r} ({type(self).__qualname__}) has no parameter m: a margin with the paper's one "
                "parameter m subclasses OneParameterMargin; a Margin's parameters are its own dataclass fields"
            )
        raise AttributeError(name)

    @abstractmethod
    def phi(self, theta: torch.Tensor) -> torch.Tensor:
        """φ(θ) (*,) for angles θ (*,) in [0, π]: the definition (eq. 14), and the reference of the contract."""

    def safe_phi(self, cos: torch.Tensor) -> torch.Tensor:
        """φ from cos θ (*,), the form the losses use: value and gradient finite for every cos θ in [−1, 1].
        Default: `phi(acos(cos θ))` with cos θ kept inside (−1, 1) (a zero gradient in the last 1e-7)."""
        return self.phi(torch.acos(cos.clamp(-1.0 + _ACOS_EPS, 1.0 - _ACOS_EPS)))


@dataclass(frozen=True)
class OneParameterMargin(Margin, ABC):
    """A margin type with the one parameter m of the paper's types (eqs. 5-8), a finite number >= 0 by default."""

    m: float = 0.0
    example: ClassVar[dict] = {"m": 0.3}

    def check(self) -> None:
        super().check()
        check_number("m", self.m, minimum=0)


MARGIN_TYPES: dict[str, type[Margin]] = REGISTRIES["margin"]  # name -> margin class, in registration order


def register_margin(cls: type[Margin]) -> type[Margin]:
    """Class decorator: make the `Margin` subclass `cls` the margin type `cls.name` (`register("margin")`)."""
    return register("margin")(cls)


def margin_type(name: str) -> type[Margin]:
    """The registered margin class called `name` (`OptionError` on field `margin` for an unknown name)."""
    return component_class("margin", name)


def make_margin(margin: str | dict | Margin = "none", m: float | None = None) -> Margin:
    """The margin of a config value (a name, `{"type": name, **parameters}`, or a `Margin`), with the older form's
    flat `m` given apart (None or 0: not given); an `m` the type does not have, or given twice with two values, is
    refused."""
    given = m not in (None, 0, 0.0)
    if isinstance(margin, Margin):
        if given:
            raise OptionError("m", m, f"must not be given with a Margin object ({margin!r})")
        return margin
    inner = margin.get("m") if isinstance(margin, dict) else None
    if given and inner is not None and inner != m:
        raise OptionError("m", m, f"is given twice, as m and as margin.m={inner!r}")
    try:
        out = make_component("margin", margin, **({} if m is None else {"m": m}))
    except OptionError as err:
        if err.field == "m" and m is not None and inner is None:  # the flat m was given: name it so
            raise OptionError("m", err.value, err.allowed) from None
        raise
    if given and "m" not in out.parameters():
        names = ", ".join(out.parameters()) or "none"
        raise OptionError("m", m, f"is not a parameter of margin {out.name!r}; its parameters: {names}")
    return out


def lsm_psi(cos: torch.Tensor, m: int) -> torch.Tensor:
    """L-Softmax ψ(θ) = (−1)^k cos(mθ) − 2k for θ ∈ [kπ/m, (k+1)π/m] (eq. 8), from cos θ."""
    x = cos.clamp(-1.0, 1.0)
    t_prev, t_cur = torch.ones_like(x), x  # Chebyshev T_0, T_1: T_m(cos θ) = cos(mθ)
    for _ in range(m - 1):
        t_prev, t_cur = t_cur, 2 * x * t_cur - t_prev
    k = torch.zeros_like(x)
    for j in range(1, m):
        k = k + (x <= math.cos(j * math.pi / m)).to(x.dtype)
    sign = 1.0 - 2.0 * torch.remainder(k, 2)  # (−1)^k
    return sign * t_cur - 2.0 * k


def arc_phi(cos: torch.Tensor, m: float) -> torch.Tensor:
    """ArcFace cos(θ + m) (eq. 6), continued as −2 − cos(θ + m) where θ + m > π."""
    x = cos.clamp(-1.0, 1.0)
    sin = torch.sqrt((1.0 - x * x).clamp_min(1e-12))
    shifted = x * math.cos(m) - sin * math.sin(m)  # cos(θ + m)
    past_pi = x < math.cos(math.pi - m)  # θ > π − m
    return torch.where(past_pi, -2.0 - shifted, shifted)


@register_margin
@dataclass(frozen=True)
class NoMargin(Margin):
    """No margin: φ = cos θ for the target too (eq. 13 as written; the inference logits). No parameter."""

    name: ClassVar[str] = "none"
    changes_target: ClassVar[bool] = False

    def phi(self, theta: torch.Tensor) -> torch.Tensor:
        return torch.cos(theta)

    def safe_phi(self, cos: torch.Tensor) -> torch.Tensor:
        return cos


@register_margin
@dataclass(frozen=True)
class CosFace(OneParameterMargin):
    """CosFace, an additive cosine margin: φ = cos θ − m (eq. 5)."""

    name: ClassVar[str] = "cos"

    def phi(self, theta: torch.Tensor) -> torch.Tensor:
        return torch.cos(theta) - self.m

    def safe_phi(self, cos: torch.Tensor) -> torch.Tensor:
        return cos - self.m


@register_margin
@dataclass(frozen=True)
class ArcFace(OneParameterMargin):
    """ArcFace, an additive angular margin: φ = cos(θ + m) (eq. 6), continued as −2 − cos(θ + m) past θ + m > π (the
    L-Softmax k = 1 branch: continuous, monotone and finite). `safe_phi`: `arc_phi`, sin θ from cos θ without acos."""

    name: ClassVar[str] = "arc"

    def phi(self, theta: torch.Tensor) -> torch.Tensor:
        shifted = torch.cos(theta + self.m)
        return torch.where(theta + self.m > math.pi, -2.0 - shifted, shifted)

    def safe_phi(self, cos: torch.Tensor) -> torch.Tensor:
        return arc_phi(cos, self.m)


@register_margin
@dataclass(frozen=True)
class LSoftmax(OneParameterMargin):
    """L-Softmax, a multiplicative angular margin with an integer m >= 1: φ = ψ(θ) = (−1)^k cos(mθ) − 2k for
    θ ∈ [kπ/m, (k+1)π/m] (eqs. 7–8), monotone in θ. `safe_phi`: `lsm_psi`, a Chebyshev polynomial of cos θ."""

    name: ClassVar[str] = "lsm"
    example: ClassVar[dict] = {"m": 2}

    m: int = 1

    def check(self) -> None:
        super().check()
        check_number("m", self.m, minimum=1, integer=True)

    def phi(self, theta: torch.Tensor) -> torch.Tensor:
        k = torch.clamp(torch.floor(theta * self.m / math.pi), max=self.m - 1)
        return (1.0 - 2.0 * torch.remainder(k, 2)) * torch.cos(self.m * theta) - 2.0 * k

    def safe_phi(self, cos: torch.Tensor) -> torch.Tensor:
        return lsm_psi(cos, self.m)


MARGINS = tuple(MARGIN_TYPES)  # the built-in margin types: ("none", "cos", "arc", "lsm")


# ----------------------------------------------------------------------------- f, g (eqs. 9-12)


@component_base("word_norm")
@dataclass(frozen=True)
class WordNorm(Component, ABC):
    """f(c), the norm of class c's word vector in eq. 13 (eq. 9): one registered component class per word norm. A
    subclass sets `name`, defines `reference` and overrides `values` where the library computes f another way."""

    needs_counts: ClassVar[bool] = True  # whether f needs the training word counts
    identity: ClassVar[bool] = False  # True: f(c) = ‖W_c‖, the vector's own norm (no-mod)
    # True: f(c) reads row c (and its count) alone, so a vocabulary-sharded W computes it on each process
    # (hf_heads.losses.vocab_parallel); False where it reads other rows (the most frequent, the ranks)
    per_row: ClassVar[bool] = False

    @abstractmethod
    def reference(self, weight: torch.Tensor, counts: torch.Tensor | None) -> torch.Tensor:
        """f (V,) of weight (V, H) and counts (V,) (None when `needs_counts` is False), from the definition."""

    def values(self, weight: torch.Tensor, counts: torch.Tensor | None, norms: torch.Tensor) -> torch.Tensor | None:
        """f (V,) as the losses compute it (None: ‖W_c‖, left implicit); `norms` are ‖W_c‖ (V,) in the compute
        dtype, counts (V,) in that dtype or None. No value may be read on the host (a training step)."""
        return self.reference(weight.to(norms.dtype), counts)


@register("word_norm")
@dataclass(frozen=True)
class NoModWordNorm(WordNorm):
    """no-mod: f(c) = ‖W_c‖ (eq. 13 as written)."""

    name: ClassVar[str] = "no-mod"
    needs_counts: ClassVar[bool] = False
    identity: ClassVar[bool] = True
    per_row: ClassVar[bool] = True

    def reference(self, weight, counts):
        return weight.norm(dim=1)

    def values(self, weight, counts, norms):
        return None


def _amax_amin(counts: torch.Tensor, norms: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(‖W_amax‖, ‖W_amin‖) for the most and least frequent ids, gathered on the device (no host read)."""
    amax, amin = counts.argmax().reshape(1), counts.argmin().reshape(1)  # (1,) each
    return norms.gather(0, amax)[0], norms.gather(0, amin)[0]


@register("word_norm")
@dataclass(frozen=True)
class UniformWordNorm(WordNorm):
    """uniform: f(c) = ‖W_amax‖ for every class (eq. 9)."""

    name: ClassVar[str] = "uniform"

    def reference(self, weight, counts):
        return weight.norm(dim=1)[int(counts.argmax())].expand(weight.shape[0])

    def values(self, weight, counts, norms):
        return _amax_amin(counts, norms)[0].expand(weight.shape[0])


@register("word_norm")
@dataclass(frozen=True)
class LogRankWordNorm(WordNorm):
    """log-rank: f(c) = log(exp‖W_amax‖ − v·rank_c), v = (exp‖W_amax‖ − exp‖W_amin‖) / V (eqs. 9, 11); computed as
    logaddexp(‖W_amax‖ + log(1 − r/V), ‖W_amin‖ + log(r/V)), the same value without overflow."""

    name: ClassVar[str] = "log-rank"

    def reference(self, weight, counts):
        norms, vocab = weight.norm(dim=1), weight.shape[0]
        top, bottom = norms[int(counts.argmax())], norms[int(counts.argmin())]
        v = (torch.exp(top) - torch.exp(bottom)) / vocab  # eq. 11
        ids = torch.arange(vocab)
        ahead = (counts[None, :] > counts[:, None]) | ((counts[None, :] == counts[:, None]) & (ids < ids[:, None]))
        rank = ahead.sum(1)  # (V,) the classes counted more often, or as often with a smaller id (0 = most frequent)
        return torch.log(torch.exp(top) - v * rank.to(norms.dtype))

    def values(self, weight, counts, norms):
        top, bottom = _amax_amin(counts, norms)
        frac = frequency_ranks(counts).to(counts.dtype) / weight.shape[0]  # (V,) in [0, 1)
        return torch.logaddexp(top + torch.log1p(-frac), bottom + torch.log(frac))


@register("word_norm")
@dataclass(frozen=True)
class UnigramWordNorm(WordNorm):
    """unigram: f(c) = ‖W_amin‖ + u·c_c, u = (‖W_amax‖ − ‖W_amin‖) / c_max (eqs. 9, 12)."""

    name: ClassVar[str] = "unigram"

    def reference(self, weight, counts):
        norms = weight.norm(dim=1)
        top, bottom = norms[int(counts.argmax())], norms[int(counts.argmin())]
        return bottom + (top - bottom) / counts.max() * counts

    def values(self, weight, counts, norms):
        top, bottom = _amax_amin(counts, norms)
        u = (top - bottom) / counts.max().clamp_min(_EPS)  # eq. 12
        return bottom + u * counts


@register("word_norm")
@dataclass(frozen=True)
class LogUnigramWordNorm(WordNorm):
    """log-unigram: f(c) = log c_c (eq. 9); a class never seen (count 0) is given count 1, i.e. f = 0."""

    name: ClassVar[str] = "log-unigram"
    per_row: ClassVar[bool] = True

    def reference(self, weight, counts):
        return torch.log(counts.clamp_min(1.0))


@component_base("context_norm")
@dataclass(frozen=True)
class ContextNorm(Component, ABC):
    """g(i), the norm of context vector h_i in eq. 13 (eq. 10), one registered component class per context norm. A
    `batch_dependent` norm is replaced outside training by a running value of its `batch_value`."""

    identity: ClassVar[bool] = False  # True: g(i) = ‖h_i‖ (no-mod)
    batch_dependent: ClassVar[bool] = False

    @abstractmethod
    def reference(self, hidden: torch.Tensor, valid: torch.Tensor | None) -> torch.Tensor:
        """g (N,) of hidden (N, H) from the definition; `valid` (N,) marks the rows that count (None: all)."""

    def values(self, hidden: torch.Tensor, valid: torch.Tensor | None) -> torch.Tensor | None:
        """g (N,) as the losses compute it (None: ‖h_i‖, left implicit). Default: the reference."""
        return self.reference(hidden, valid)

    def batch_value(self, hidden: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
        """The batch statistic () a running value follows (`batch_dependent` norms); 0 for a batch without valid
        rows (the heads then keep their running value)."""
        raise NotImplementedError(f"context norm {self.name!r} is not batch dependent")


@register("context_norm")
@dataclass(frozen=True)
class NoModContextNorm(ContextNorm):
    """no-mod: g(i) = ‖h_i‖ (eq. 13 as written)."""

    name: ClassVar[str] = "no-mod"
    identity: ClassVar[bool] = True

    def reference(self, hidden, valid):
        return hidden.norm(dim=1)

    def values(self, hidden, valid):
        return None


@register("context_norm")
@dataclass(frozen=True)
class MaxNormContextNorm(ContextNorm):
    """max-norm: g(i) = max_j ‖h_j‖ over the batch's counted rows (eq. 10)."""

    name: ClassVar[str] = "max-norm"
    batch_dependent: ClassVar[bool] = True

    def reference(self, hidden, valid):
        norms = hidden.norm(dim=1)
        return (norms if valid is None else norms[valid]).max().expand(hidden.shape[0])

    def values(self, hidden, valid):
        return self.batch_value(hidden, valid).expand(hidden.shape[0])

    def batch_value(self, hidden, valid):
        if hidden.shape[0] == 0:
            return hidden.new_zeros(())
        norms = hidden.norm(dim=1)  # (N,)
        if valid is not None:
            norms = norms.masked_fill(~valid, 0.0)  # norms are >= 0: an ignored row never is the maximum
        return norms.max()


WORD_NORMS = tuple(REGISTRIES["word_norm"])  # the built-in word norms
CONTEXT_NORMS = tuple(REGISTRIES["context_norm"])  # the built-in context norms
NEEDS_COUNTS = tuple(name for name, cls in REGISTRIES["word_norm"].items() if cls.needs_counts)


def make_word_norm(value: str | dict | WordNorm) -> WordNorm:
    """The word norm of a config value (a name, `{"type": name, **parameters}` or a `WordNorm`)."""
    return make_component("word_norm", value)


def make_context_norm(value: str | dict | ContextNorm) -> ContextNorm:
    """The context norm of a config value (a name, `{"type": name, **parameters}` or a `ContextNorm`)."""
    return make_component("context_norm", value)


def check_word_counts(word_norm, word_counts, vocab_size: int | None, counts_required: bool = True) -> None:
    """Raise `OptionError` when `word_norm` (a config value or a `WordNorm`) needs counts and has none (and
    `counts_required`), `ValueError` for counts that are not (V,), finite and >= 0."""
    norm = make_word_norm(word_norm)
    if norm.needs_counts and counts_required and word_counts is None:
        raise OptionError("word_norm", component_config(norm), "needs word_counts (a (V,) tensor of training counts)")
    if word_counts is not None:
        if word_counts.dim() != 1:
            raise ValueError(f"word_counts must be 1-D (V,), got shape {tuple(word_counts.shape)}")
        if vocab_size is not None and word_counts.numel() != vocab_size:
            raise ValueError(f"word_counts has {word_counts.numel()} entries but the vocabulary has {vocab_size}")
        ok = torch.isfinite(word_counts).all() & (word_counts >= 0).all()
        if not host_reads_are_free(word_counts.device):
            torch._assert_async(ok, "word_counts must be finite and >= 0")  # no host sync in a training step
        elif not bool(ok):
            raise ValueError("word_counts must be finite and >= 0")


def word_norm_values(
    weight: torch.Tensor, word_norm, word_counts: torch.Tensor | None, norms: torch.Tensor | None = None
) -> torch.Tensor | None:
    """f(c) for every class (eq. 9), shape (V,); None for no-mod (f = ‖W_c‖, left implicit). `word_norm`: a config
    value or a `WordNorm`; `norms`: ‖W_c‖ (V,) when the caller has them. No value is read on the host."""
    norm = make_word_norm(word_norm)
    if norm.identity:
        return None
    dtype = compute_dtype(weight)  # float32 for a half weight
    counts = None if word_counts is None else word_counts.to(device=weight.device, dtype=dtype)
    norms = torch.linalg.vector_norm(weight, dim=1, dtype=dtype) if norms is None else norms  # (V,)
    return norm.values(weight, counts, norms)


def context_norm_values(
    hidden: torch.Tensor,
    context_norm,
    context_norm_value: float | torch.Tensor | None = None,
    valid: torch.Tensor | None = None,
) -> torch.Tensor | None:
    """g(i) for every row (eq. 10), shape (N,); None for no-mod. A batch-dependent norm takes `context_norm_value` when
    given (the running value outside training); `valid` (N,) marks the rows its statistic is over (None: all)."""
    norm = make_context_norm(context_norm)
    if norm.identity:
        return None
    if context_norm_value is not None and norm.batch_dependent:
        value = torch.as_tensor(context_norm_value, dtype=hidden.dtype, device=hidden.device)
        return value.expand(hidden.shape[0])
    return norm.values(hidden, valid)


class _WeightNormsAndTargets(torch.autograd.Function):
    """‖W_c‖ (V,) and the target rows W[y] (N, H) of weight (V, H) with one (V, H) gradient buffer for both. Given a
    `WeightGradSlot`, also W (a view) for the fused loss, whose gradient then takes the norms' and rows' parts in
    place."""

    @staticmethod
    def forward(ctx, weight, target, dtype, slot):
        norms = torch.linalg.vector_norm(weight, dim=1, dtype=dtype)  # (V,), accumulated in `dtype`
        ctx.save_for_backward(weight, target, norms)
        ctx.slot = slot
        rows = None if target is None else weight[target].to(dtype)
        return norms, rows, None if slot is None else weight.view_as(weight)

    @staticmethod
    def backward(ctx, grad_norms, grad_rows, grad_weight):
        weight, target, norms = ctx.saved_tensors
        # the fused loss's own (V, H) buffer is extended in place; any other gradient may be shared: never written into
        own = ctx.slot is not None and ctx.slot.take(grad_weight)
        grad = grad_weight
        if grad_norms is not None:  # d‖w_c‖ / d w_c = w_c / ‖w_c‖ (0 for a zero row, as torch's norm)
            per_row = torch.where(norms > 0, grad_norms / norms, 0.0).to(weight.dtype)[:, None]  # (V, 1)
            if grad is None:
                grad = weight * per_row  # (V, H) in the weight's dtype
            elif own:
                grad.addcmul_(weight, per_row)
            else:
                grad = torch.addcmul(grad, weight, per_row)
            own = True
        if grad_rows is not None:
            if grad is None:
                grad = torch.zeros_like(weight)
            elif not own:
                grad = grad.clone(memory_format=torch.contiguous_format)
            grad.index_add_(0, target, grad_rows.to(grad.dtype))
        return grad, None, None, None


def weight_norms_and_targets(
    weight: torch.Tensor,
    target: torch.Tensor | None,
    dtype: torch.dtype | None = None,
    slot: WeightGradSlot | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
    """(‖W_c‖ (V,), W[target] (N, H) or None, W for the fused loss or None) in `dtype` (default: the weight's),
    differentiable in `weight` with one (V, H) gradient buffer (`_WeightNormsAndTargets`)."""
    return _WeightNormsAndTargets.apply(weight, target, dtype or weight.dtype, slot)


# ----------------------------------------------------------------------------- the scorer (eq. 13)


@dataclass(frozen=True)
class Scorer:
    """Eq. 13's scorer with the checkpoint's output transform (module docstring), validated on construction; `Scorer()`
    is the plain linear layer W h + b.

    Its data, given per call (`given`) and not compared: `word_counts` (V,); `context_norm_value`, a fixed g for a
    batch context norm; `posterior`, a map of the (n, V) scores and their column offset to the logits of the model's
    distribution, applied after the transform (the sampled family's corrected posterior, sampling paper eqs. 2-22)."""

    margin: Margin = NoMargin()
    scale: float | None = None
    word_norm: WordNorm = NoModWordNorm()
    context_norm: ContextNorm = NoModContextNorm()
    gain: float = 1.0
    logit_multiplier: float = 1.0
    softcap: float | None = None
    word_counts: torch.Tensor | None = dataclasses.field(default=None, compare=False, repr=False)
    context_norm_value: float | torch.Tensor | None = dataclasses.field(default=None, compare=False, repr=False)
    posterior: object = dataclasses.field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        if not isinstance(self.margin, Margin):
            raise TypeError(
                f"Scorer.margin must be a Margin (e.g. ArcFace(m=0.2)), got {self.margin!r}; "
                "Scorer.from_options(margin=..., m=...) builds one from a margin name"
            )
        # a name or a config dict of the norms is read as the component (Scorer(word_norm="log-unigram"))
        object.__setattr__(self, "word_norm", make_word_norm(self.word_norm))
        object.__setattr__(self, "context_norm", make_context_norm(self.context_norm))
        if self.scale is not None:
            check_number("scale", self.scale, exclusive_minimum=0)
            if not self.word_norm.identity or not self.context_norm.identity:
                field = "word_norm" if not self.word_norm.identity else "context_norm"
                raise OptionError(
                    field,
                    component_config(getattr(self, field)),
                    f"is not allowed with scale={self.scale!r}: the scale fixes ‖W‖=1 and ‖h‖=scale (eqs. 5-6), so "
                    "word_norm and context_norm must be 'no-mod'",
                )
        check_number("gain", self.gain, exclusive_minimum=0)
        check_transform(self.logit_multiplier, self.softcap)

    @classmethod
    def from_options(
        cls,
        margin: str | dict | Margin = "none",
        m: float | None = None,
        scale: float | None = None,
        word_norm: str | dict | WordNorm = "no-mod",
        context_norm: str | dict | ContextNorm = "no-mod",
        gain: float = 1.0,
        logit_multiplier: float = 1.0,
        softcap: float | None = None,
    ) -> Scorer:
        """The scorer of these option values, each component a config value or an object; `m` is the flat margin
        parameter of the older option form (`margin="arc", m=0.2` is `margin={"type": "arc", "m": 0.2}`)."""
        return cls(make_margin(margin, m), scale, word_norm, context_norm, gain, logit_multiplier, softcap)

    def without_margin(self) -> Scorer:
        """The same scorer with no margin (the inference logits)."""
        return dataclasses.replace(self, margin=NoMargin())

    def given(self, **data) -> Scorer:
        """The same scorer with its data set (class docstring)."""
        unknown = set(data) - {"word_counts", "context_norm_value", "posterior"}
        if unknown:
            raise TypeError(f"Scorer.given takes word_counts, context_norm_value and posterior, not {sorted(unknown)}")
        return dataclasses.replace(self, **data)

    @property
    def identity(self) -> bool:
        """Whether l(c, i) = W_c · h_i + b_c as it is (no margin, norms, gain, transform or posterior)."""
        return self == Scorer() and self.posterior is None

    @property
    def needs_counts(self) -> bool:
        """Whether the word norm f needs the training word counts."""
        return self.scale is None and self.word_norm.needs_counts

    def check_counts(self, word_counts: torch.Tensor | None, vocab_size: int | None = None) -> None:
        """Raise when the word norm needs counts and has none, or the counts do not fit the vocabulary."""
        check_word_counts(self.word_norm, word_counts, vocab_size, self.scale is None)

    def factors(
        self,
        hidden: torch.Tensor,
        weight: torch.Tensor,
        bias: torch.Tensor | None,
        target: torch.Tensor | None,
        word_counts: torch.Tensor | None = None,
        context_norm_value: float | torch.Tensor | None = None,
        valid: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor | None, torch.Tensor | None, torch.Tensor | None, torch.Tensor | None]:
        """Eq. 13 split into row scales a (N,), column scales s (V,), the target logit t (N,) and the bias b (V,) so
        that l(c, i) = a_i · s_c · (h_i · W_c) + b_c for c != y_i and l(y_i, i) = t_i, for hidden (N, H), weight (V,
        H), bias (V,) or None and target (N,) or None; None stands for ones (a, s), no target logit of its own, no
        bias. The soft-cap is the caller's. `valid` (N,): the rows that count. Computed in float32 (float64 for float64
        inputs)."""
        return self.fused_factors(hidden, weight, bias, target, word_counts, context_norm_value, valid)[:4]

    def fused_factors(
        self,
        hidden: torch.Tensor,
        weight: torch.Tensor,
        bias: torch.Tensor | None,
        target: torch.Tensor | None,
        word_counts: torch.Tensor | None = None,
        context_norm_value: float | torch.Tensor | None = None,
        valid: torch.Tensor | None = None,
        weight_grad: WeightGradSlot | None = None,
    ) -> tuple[torch.Tensor | None, torch.Tensor | None, torch.Tensor | None, torch.Tensor | None, torch.Tensor]:
        """`factors` (a, s, t, b), then W for the fused loss: with `weight_grad` (given to `chunked_loss` too) a view
        of W whose gradient also takes the norms' and target rows' part in place; without it W itself."""
        compute = compute_dtype(hidden, weight)
        hidden = hidden.to(compute)  # (N, H)
        h_norm = hidden.norm(dim=1).clamp_min(_EPS)  # (N,)
        with_target = target is not None and self.margin.changes_target
        # (V,), (N, H) or None, W for the fused loss (with `weight_grad`) or None
        raw_norm, w_y, fused_weight = weight_norms_and_targets(
            weight, target if with_target else None, compute, weight_grad
        )
        w_norm = raw_norm.clamp_min(_EPS)  # (V,)
        if self.scale is not None:
            g, f = torch.full_like(h_norm, float(self.scale)), torch.ones_like(w_norm)
        else:
            g = context_norm_values(hidden, self.context_norm, context_norm_value, valid)  # (N,) or None
            f = word_norm_values(weight, self.word_norm, word_counts, raw_norm)  # (V,) or None
        if self.gain != 1.0:
            g = (h_norm if g is None else g) * self.gain  # (N,)
        a = None if g is None else g / h_norm  # (N,)
        s = None if f is None else f / w_norm  # (V,)
        t = None
        if with_target:
            cos = (hidden * w_y).sum(1) / (h_norm * w_norm[target])  # (N,)
            g_y = h_norm if g is None else g
            f_y = w_norm[target] if f is None else f[target]
            t = g_y * f_y * self.margin.safe_phi(cos)  # (N,)
            if bias is not None:
                t = t + bias[target]
        if self.logit_multiplier != 1.0:
            a = torch.full_like(h_norm, self.logit_multiplier) if a is None else a * self.logit_multiplier
            t = None if t is None else t * self.logit_multiplier
            bias = None if bias is None else bias * self.logit_multiplier
        return a, s, t, bias, weight if fused_weight is None else fused_weight

    def scaled_inputs(
        self,
        hidden: torch.Tensor,
        weight: torch.Tensor,
        bias: torch.Tensor | None,
        target: torch.Tensor,
        word_counts: torch.Tensor | None = None,
        context_norm_value: float | torch.Tensor | None = None,
        valid: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor, torch.Tensor | None]:
        """(a·h (N, H), s (V,) or None, the soft-capped target logit (N,), b (V,) or None) for a criterion over
        candidate classes: the logit of class c is cap(a_i · s_c · (h_i · W_c) + b_c), the target's the returned
        one."""
        a, s, t, bias = self.factors(hidden, weight, bias, target, word_counts, context_norm_value, valid)
        h = hidden if a is None else hidden * a[:, None]  # (N, H)
        if t is None:
            w_y = weight[target].to(h.dtype) if s is None else weight[target] * s[target, None]  # (N, H)
            t = (h * w_y).sum(1) + (0 if bias is None else bias[target])
        return h, s, soft_cap(t, self.softcap), bias


# ----------------------------------------------------------------------------- the losses' keyword options

# The options the loss functions also take as keyword arguments, with their defaults.
SCORER_OPTIONS = {
    "margin": "none",
    "m": 0.0,
    "scale": None,
    "word_norm": "no-mod",
    "context_norm": "no-mod",
    "gain": 1.0,
    "logit_multiplier": 1.0,
    "softcap": None,
}


def resolve_scorer(scorer: Scorer | None = None, **options) -> Scorer:
    """The scorer a loss runs: `scorer`, or else the one of the keyword `options` (`SCORER_OPTIONS`). With a scorer the
    options must stay at their defaults."""
    unknown = set(options) - set(SCORER_OPTIONS)
    if unknown:
        allowed = ", ".join(SCORER_OPTIONS)
        raise TypeError(f"unexpected margin option(s) {', '.join(sorted(unknown))}; allowed: {allowed}")
    if scorer is None:
        return Scorer.from_options(**options)
    if not isinstance(scorer, Scorer):
        raise TypeError(f"scorer must be a Scorer, got {type(scorer).__name__}")
    for key, value in options.items():
        default = SCORER_OPTIONS[key]
        if value is not default and value != default:
            raise OptionError(
                key, value, f"must be left at its default ({default!r}) when scorer is given (scorer={scorer!r})"
            )
    return scorer


def validate_margin_options(
    margin: str | dict | Margin,
    m: float | None,
    scale: float | None,
    word_norm: str | dict | WordNorm,
    context_norm: str | dict | ContextNorm,
    word_counts: torch.Tensor | None = None,
    vocab_size: int | None = None,
    *,
    counts_required: bool = True,
) -> None:
    """Raise `OptionError` naming the field for any invalid margin option, `ValueError` for bad counts."""
    scorer = Scorer.from_options(margin, m, scale, word_norm, context_norm)
    check_word_counts(scorer.word_norm, word_counts, vocab_size, counts_required and scorer.needs_counts)
