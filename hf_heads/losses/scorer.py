"""The scorer of the large-margin softmax: the logit of class c for the context vector h_i,

    l(c, i) = g(i) · f(c) · φ_c(cos θ_{c,i}) + b_c            (margin paper, eq. 13)

with φ_c = cos for every class but the target y, whose φ is the margin (eq. 14), then the checkpoint's output
transform cap · tanh(multiplier · l / cap). Paper: Huo, Gao, Wang, Schlüter, Ney, "Investigation of Large-Margin
Softmax in Neural Language Modeling", Interspeech 2020 (shared/papers/large_margin_softmax_lm.md).

- `Margin`: φ of the target, one small class per margin type registered by name (`register_margin`,
  `MARGIN_TYPES`), as the sampling methods are: `NoMargin` cos θ, `CosFace` cos θ − m (eq. 5), `ArcFace`
  cos(θ + m) (eq. 6), `LSoftmax` ψ(θ) = (−1)^k cos(mθ) − 2k for θ ∈ [kπ/m, (k+1)π/m] (eqs. 7–8). Each holds m,
  checks it (`check`), defines φ(θ) (`phi`) and computes it from cos θ in a form whose value and gradient are
  finite on all of [−1, 1] (`safe_phi`, what the losses use). A new margin type is one such class.
- f (eq. 9, with v and u of eqs. 11–12) and g (eq. 10): `word_norm_values`, `context_norm_values`:

      f: no-mod ‖W_y‖ · uniform ‖W_amax‖ · log-rank log(exp‖W_amax‖ − v·rank_y)
         unigram ‖W_amin‖ + u·c_y · log-unigram log c_y
      g: no-mod ‖h_i‖ · max-norm max_j ‖h_j‖ over the batch

- `Scorer`: frozen, validated on construction, built once per head from its options: the margin, the
  face-recognition `scale` (eqs. 5–6 / table 1: ‖W‖ = 1, ‖h‖ = s; f and g must then stay no-mod), the norms f
  (`word_norm`) and g (`context_norm`), the warm-start `gain` and the checkpoint's output transform
  (`logit_multiplier`, `softcap`). The word counts and a fixed g value are data, passed beside it.
  `resolve_scorer` is the one place that turns the losses' keyword options into a scorer.

Choices where the paper is silent (each is tested):
- amax / amin are the ids with the largest / smallest count; `rank` is the frequency rank taken
  from the counts (0 = most frequent), not the token id, so Hub subword vocabularies work too.
- u (eq. 12) divides by the largest count c_max, so f(amax) = ‖W_amax‖ exactly.
- log-rank is evaluated as logaddexp(‖W_amax‖ + log(1 − r/V), ‖W_amin‖ + log(r/V)), the same
  value as eq. 9 written without overflow.
- log-unigram: a word with count 0 (never seen in training) is given count 1, i.e. f = 0 and its
  logit is its bias; every seen word gets log c_y exactly.
- f and g are recomputed from the current weights at every call and gradients flow through them
  ("dynamically updated in each update step"); max-norm takes the maximum over the rows passed in
  (non-ignored tokens), or `context_norm_value` when given (the heads pass a running maximum at
  inference so a prediction does not depend on the rest of its batch).
- ArcFace past θ + m > π continues as −2 − cos(θ + m) (the L-Softmax k = 1 branch), which keeps the
  target logit continuous, monotonically decreasing in θ and finite; sin θ is computed from
  cos θ with its square clamped away from 0 so gradients stay finite at |cos θ| → 1.
- L-Softmax computes cos(mθ) with the Chebyshev polynomial T_m(cos θ) and k from cos θ thresholds
  (no acos), so its gradient is a polynomial and finite everywhere.
- The margin is applied only when targets are given (training); inference logits never carry it.
- `gain` (default 1, eq. 13 as written) multiplies g(i), i.e. the whole g·f·φ term but not the bias. It is not
  in the paper: `HeadsForCausalLM.from_base` fits it once so that a norm-scaled head (f or g not no-mod), whose
  f(c) = log c_y or g(i) = max ‖h‖ replace the checkpoint's norms, starts at the checkpoint's distribution as
  closely as one global factor allows; it is then a fixed part of the model (saved in its head section).
- A checkpoint's output transform (hf_heads.losses.transforms: `logit_multiplier`, `softcap`) applies to every
  logit of eq. 13 as the architecture applies it to its plain logits: l' = cap·tanh(multiplier·l / cap), the
  margin's target logit included. So the margin is taken on the raw logit and the cap bounds the result: near the
  cap a margin changes the target logit less (tanh saturates), which is what the checkpoint's own logits do to a
  large score. `gain` and `logit_multiplier` both multiply g·f·φ; the multiplier also multiplies the bias, the
  gain does not.
"""

from __future__ import annotations

import dataclasses
import math
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import ClassVar

import torch

from hf_heads.losses._rows import compute_dtype, frequency_ranks, host_reads_are_free
from hf_heads.losses.fused_linear import WeightGradSlot
from hf_heads.losses.transforms import check_transform, soft_cap
from hf_heads.validation import OptionError, check_choice, check_number

WORD_NORMS = ("no-mod", "uniform", "log-rank", "unigram", "log-unigram")
CONTEXT_NORMS = ("no-mod", "max-norm")
NEEDS_COUNTS = ("uniform", "log-rank", "unigram", "log-unigram")
_EPS = 1e-12
_ACOS_EPS = 1e-7  # the default `safe_phi` keeps cos θ this far inside (−1, 1), where acos' derivative is finite


# ----------------------------------------------------------------------------- φ of the target (eq. 14)


@dataclass(frozen=True)
class Margin(ABC):
    """φ of the target class (eq. 14) with its margin m: one subclass per margin type, registered with
    `register_margin`. A subclass sets `name`, defines `phi` and, where φ(acos(cos θ)) is not gradient-safe,
    `safe_phi`; it overrides `check` when m has other rules than a number >= 0."""

    name: ClassVar[str] = ""  # the option value: margin="cos"
    integer_m: ClassVar[bool] = False  # whether m is an integer (head options read a JSON / command-line 2.0 as 2)
    changes_target: ClassVar[bool] = True  # False: φ = cos, the target logit is computed like every other

    m: float = 0.0

    def __post_init__(self) -> None:
        self.check()

    def check(self) -> None:
        """Raise `OptionError` naming `m`, its value and what is allowed (default: a finite number >= 0)."""
        check_number("m", self.m, minimum=0)

    @abstractmethod
    def phi(self, theta: torch.Tensor) -> torch.Tensor:
        """φ(θ) (*,) for angles θ (*,) in [0, π]: the definition (eq. 14)."""

    def safe_phi(self, cos: torch.Tensor) -> torch.Tensor:
        """φ from cos θ (*,), the form the losses use: value and gradient finite for every cos θ in [−1, 1].
        Default: `phi(acos(cos θ))` with cos θ kept inside (−1, 1) (a zero gradient in the last 1e-7)."""
        return self.phi(torch.acos(cos.clamp(-1.0 + _ACOS_EPS, 1.0 - _ACOS_EPS)))


MARGIN_TYPES: dict[str, type[Margin]] = {}  # name -> margin class, in registration order


def register_margin(cls: type[Margin]) -> type[Margin]:
    """Class decorator: make the `Margin` subclass `cls` the margin type `cls.name` for the losses, the scorer and
    the head options (margin=cls.name in a head section)."""
    if not (isinstance(cls, type) and issubclass(cls, Margin)) or not cls.name:
        raise TypeError(f"register_margin takes a Margin subclass with a name, got {cls!r}")
    if MARGIN_TYPES.get(cls.name, cls) is not cls:
        raise ValueError(f"margin {cls.name!r} is already registered ({MARGIN_TYPES[cls.name].__qualname__})")
    MARGIN_TYPES[cls.name] = cls
    return cls


def margin_type(name: str) -> type[Margin]:
    """The registered margin class called `name` (`OptionError` on field `margin` for an unknown name)."""
    check_choice("margin", name, MARGIN_TYPES)
    return MARGIN_TYPES[name]


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
    """No margin: φ = cos θ for the target too (eq. 13 as written; the inference logits)."""

    name: ClassVar[str] = "none"
    changes_target: ClassVar[bool] = False

    def phi(self, theta: torch.Tensor) -> torch.Tensor:
        return torch.cos(theta)

    def safe_phi(self, cos: torch.Tensor) -> torch.Tensor:
        return cos


@register_margin
@dataclass(frozen=True)
class CosFace(Margin):
    """CosFace, an additive cosine margin: φ = cos θ − m (eq. 5)."""

    name: ClassVar[str] = "cos"

    def phi(self, theta: torch.Tensor) -> torch.Tensor:
        return torch.cos(theta) - self.m

    def safe_phi(self, cos: torch.Tensor) -> torch.Tensor:
        return cos - self.m


@register_margin
@dataclass(frozen=True)
class ArcFace(Margin):
    """ArcFace, an additive angular margin: φ = cos(θ + m) (eq. 6), continued as −2 − cos(θ + m) past θ + m > π
    (monotone and finite; module docstring). `safe_phi`: `arc_phi`, sin θ from cos θ without acos."""

    name: ClassVar[str] = "arc"

    def phi(self, theta: torch.Tensor) -> torch.Tensor:
        shifted = torch.cos(theta + self.m)
        return torch.where(theta + self.m > math.pi, -2.0 - shifted, shifted)

    def safe_phi(self, cos: torch.Tensor) -> torch.Tensor:
        return arc_phi(cos, self.m)


@register_margin
@dataclass(frozen=True)
class LSoftmax(Margin):
    """L-Softmax, a multiplicative angular margin with an integer m >= 1: φ = ψ(θ) = (−1)^k cos(mθ) − 2k for
    θ ∈ [kπ/m, (k+1)π/m] (eqs. 7–8), monotone in θ. `safe_phi`: `lsm_psi`, a Chebyshev polynomial of cos θ."""

    name: ClassVar[str] = "lsm"
    integer_m: ClassVar[bool] = True

    m: int = 1

    def check(self) -> None:
        check_number("m", self.m, minimum=1, integer=True)

    def phi(self, theta: torch.Tensor) -> torch.Tensor:
        k = torch.clamp(torch.floor(theta * self.m / math.pi), max=self.m - 1)
        return (1.0 - 2.0 * torch.remainder(k, 2)) * torch.cos(self.m * theta) - 2.0 * k

    def safe_phi(self, cos: torch.Tensor) -> torch.Tensor:
        return lsm_psi(cos, self.m)


MARGINS = tuple(MARGIN_TYPES)  # the built-in margin types: ("none", "cos", "arc", "lsm")


# ----------------------------------------------------------------------------- f, g (eqs. 9-12)


def check_word_counts(word_norm: str, word_counts, vocab_size: int | None, counts_required: bool = True) -> None:
    """Raise `OptionError` when `word_norm` needs counts and has none (and `counts_required`), `ValueError` for
    counts that are not (V,), finite and >= 0."""
    if word_norm in NEEDS_COUNTS and counts_required and word_counts is None:
        raise OptionError("word_norm", word_norm, "needs word_counts (a (V,) tensor of training counts)")
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
    weight: torch.Tensor, word_norm: str, word_counts: torch.Tensor | None, norms: torch.Tensor | None = None
) -> torch.Tensor | None:
    """f(c) for every class (eq. 9), shape (V,); None for no-mod (f = ‖W_c‖, left implicit). `norms`: ‖W_c‖ (V,)
    when the caller has them. No value is read on the host (amax / amin are gathered on the device)."""
    if word_norm == "no-mod":
        return None
    counts = word_counts.to(device=weight.device, dtype=compute_dtype(weight))  # float32 for a half weight
    if word_norm == "log-unigram":
        return torch.log(counts.clamp_min(1.0))
    norms = torch.linalg.vector_norm(weight, dim=1, dtype=counts.dtype) if norms is None else norms  # (V,)
    amax, amin = counts.argmax().reshape(1), counts.argmin().reshape(1)  # (1,) each
    top, bottom = norms.gather(0, amax)[0], norms.gather(0, amin)[0]
    if word_norm == "uniform":
        return top.expand(weight.shape[0])
    if word_norm == "unigram":
        u = (top - bottom) / counts.gather(0, amax)[0].clamp_min(_EPS)  # eq. 12
        return bottom + u * counts
    # log-rank: log(exp(top) − v·r), v = (exp(top) − exp(bottom)) / V  (eqs. 9, 11)
    vocab = weight.shape[0]
    frac = frequency_ranks(counts).to(counts.dtype) / vocab  # (V,) in [0, 1)
    return torch.logaddexp(top + torch.log1p(-frac), bottom + torch.log(frac))


def context_norm_values(
    hidden: torch.Tensor,
    context_norm: str,
    context_norm_value: float | torch.Tensor | None = None,
    valid: torch.Tensor | None = None,
) -> torch.Tensor | None:
    """g(i) for every row (eq. 10), shape (N,); None for no-mod (g = ‖h_i‖, left implicit). max-norm's maximum is
    over the rows `valid` (N,) marks (None: all), or `context_norm_value` when given."""
    if context_norm == "no-mod":
        return None
    if context_norm_value is not None:
        value = torch.as_tensor(context_norm_value, dtype=hidden.dtype, device=hidden.device)
        return value.expand(hidden.shape[0])
    if hidden.shape[0] == 0:
        return hidden.new_zeros(0)
    norms = hidden.norm(dim=1)  # (N,)
    if valid is not None:
        norms = norms.masked_fill(~valid, 0.0)  # norms are >= 0: an ignored row never is the maximum
    return norms.max().expand(hidden.shape[0])


class _WeightRows(torch.autograd.Function):
    """‖W_c‖ (V,) and the target rows W[y] (N, H) of weight (V, H): what the scorer reads of W, with one (V, H)
    gradient buffer for both (autograd's norm and gather backwards would each allocate one, then add them). Given a
    `WeightGradSlot`, also W itself as a third output (a view) for the fused loss: the (V, H) gradient that loss hands
    over then comes back here, and the norms' and rows' parts are added into it in place (no second (V, H) buffer)."""

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


def weight_rows(
    weight: torch.Tensor,
    target: torch.Tensor | None,
    dtype: torch.dtype | None = None,
    slot: WeightGradSlot | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
    """(‖W_c‖ (V,), W[target] (N, H) or None, W for the fused loss or None) in `dtype` (default: the weight's),
    differentiable in `weight` with one (V, H) gradient buffer; a half-precision weight is read as it is (the norms
    accumulated in `dtype`). With `slot`, the third is a view of W to give the fused loss with `weight_grad=slot`:
    its weight gradient then also takes the norms' and rows' parts in place."""
    return _WeightRows.apply(weight, target, dtype or weight.dtype, slot)


# ----------------------------------------------------------------------------- the scorer (eq. 13)


@dataclass(frozen=True)
class Scorer:
    """Eq. 13's scorer with the checkpoint's output transform (module docstring), validated on construction (an
    invalid scorer never exists). `Scorer.from_options` builds one from option values (margin given by name)."""

    margin: Margin = NoMargin()
    scale: float | None = None
    word_norm: str = "no-mod"
    context_norm: str = "no-mod"
    gain: float = 1.0
    logit_multiplier: float = 1.0
    softcap: float | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.margin, Margin):
            raise TypeError(
                f"Scorer.margin must be a Margin (e.g. ArcFace(m=0.2)), got {self.margin!r}; "
                "Scorer.from_options(margin=..., m=...) builds one from a margin name"
            )
        check_choice("word_norm", self.word_norm, WORD_NORMS)
        check_choice("context_norm", self.context_norm, CONTEXT_NORMS)
        if self.scale is not None:
            check_number("scale", self.scale, exclusive_minimum=0)
            if self.word_norm != "no-mod" or self.context_norm != "no-mod":
                field = "word_norm" if self.word_norm != "no-mod" else "context_norm"
                raise OptionError(
                    field,
                    getattr(self, field),
                    f"is not allowed with scale={self.scale!r}: the scale fixes ‖W‖=1 and ‖h‖=scale (eqs. 5-6), so "
                    "word_norm and context_norm must be 'no-mod'",
                )
        check_number("gain", self.gain, exclusive_minimum=0)
        check_transform(self.logit_multiplier, self.softcap)

    @classmethod
    def from_options(
        cls,
        margin: str = "none",
        m: float = 0.0,
        scale: float | None = None,
        word_norm: str = "no-mod",
        context_norm: str = "no-mod",
        gain: float = 1.0,
        logit_multiplier: float = 1.0,
        softcap: float | None = None,
    ) -> Scorer:
        """The scorer of these option values, the margin type given by its registered name."""
        return cls(margin_type(margin)(m), scale, word_norm, context_norm, gain, logit_multiplier, softcap)

    def without_margin(self) -> Scorer:
        """The same scorer with no margin (the inference logits)."""
        return dataclasses.replace(self, margin=NoMargin())

    @property
    def needs_counts(self) -> bool:
        """Whether the word norm f needs the training word counts."""
        return self.word_norm in NEEDS_COUNTS

    def check_counts(self, word_counts: torch.Tensor | None, vocab_size: int | None = None) -> None:
        """Raise when the word norm needs counts and has none, or the counts do not fit the vocabulary."""
        check_word_counts(self.word_norm, word_counts, vocab_size)

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
        """Eq. 13 split into row scales a (N,), column scales s (V,), the target logit t (N,) and the bias b (V,)
        so that l(c, i) = a_i · s_c · (h_i · W_c) + b_c for c != y_i and l(y_i, i) = t_i, for hidden (N, H),
        weight (V, H), bias (V,) or None and target (N,) or None. None stands for ones (a, s), for no target
        logit of its own (t: no target, or a margin that leaves it alone) and for no bias. `gain` multiplies g(i);
        `logit_multiplier` every logit (a, t and b); the soft-cap is the caller's, on the result. `valid` (N,): the
        rows that count (max-norm's maximum is theirs; None: all). Computed in float32 (float64 for float64 inputs)
        whatever the dtype of hidden and weight; a half-precision W is read in its dtype, never copied to float32."""
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
        """`factors` (a, s, t, b), then W as the fused loss should take it: with `weight_grad` (a `WeightGradSlot`,
        given to `fused_linear_cross_entropy` too) a view of W whose gradient from that loss also takes the norms'
        and target rows' part in place (no second (V, H) buffer); without it W itself."""
        compute = compute_dtype(hidden, weight)
        hidden = hidden.to(compute)  # (N, H)
        h_norm = hidden.norm(dim=1).clamp_min(_EPS)  # (N,)
        with_target = target is not None and self.margin.changes_target
        # (V,), (N, H) or None, W for the fused loss (with `weight_grad`) or None
        raw_norm, w_y, fused_weight = weight_rows(weight, target if with_target else None, compute, weight_grad)
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

    def scaled_rows(
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
        candidate classes: the logit of class c is cap(a_i · s_c · (h_i · W_c) + b_c) (`factors`), the target's
        the returned one, margin applied."""
        a, s, t, bias = self.factors(hidden, weight, bias, target, word_counts, context_norm_value, valid)
        h = hidden if a is None else hidden * a[:, None]  # (N, H)
        if t is None:
            w_y = weight[target].to(h.dtype) if s is None else weight[target] * s[target, None]  # (N, H)
            t = (h * w_y).sum(1) + (0 if bias is None else bias[target])
        return h, s, soft_cap(t, self.softcap), bias


# ----------------------------------------------------------------------------- the losses' keyword options

# The options the loss functions also take as keyword arguments, with their defaults. `spec` is the old name of
# `scorer`, `logit_scale` the old name of `logit_multiplier` (both kept for existing code).
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
_OLD_NAMES = {"logit_scale": "logit_multiplier"}


def resolve_scorer(scorer: Scorer | None = None, *, spec: Scorer | None = None, **options) -> Scorer:
    """The scorer a loss runs: `scorer` (or `spec`, its old name), or else the one of the keyword `options`
    (`SCORER_OPTIONS`, by `Scorer.from_options`). With a scorer the options must stay at their defaults. The one
    place where keyword options become a scorer."""
    for old, new in _OLD_NAMES.items():
        if old in options:
            if new in options:
                raise TypeError(f"give {new} or its old name {old}, not both")
            check_transform(options[old], None, old)
            options[new] = options.pop(old)
    unknown = set(options) - set(SCORER_OPTIONS)
    if unknown:
        allowed = ", ".join([*SCORER_OPTIONS, *_OLD_NAMES])
        raise TypeError(f"unexpected margin option(s) {', '.join(sorted(unknown))}; allowed: {allowed}")
    if scorer is not None and spec is not None:
        raise TypeError("give scorer or its old name spec, not both")
    given, name = (scorer, "scorer") if spec is None else (spec, "spec")
    if given is None:
        return Scorer.from_options(**options)
    if not isinstance(given, Scorer):
        raise TypeError(f"{name} must be a Scorer, got {type(given).__name__}")
    for key, value in options.items():
        default = SCORER_OPTIONS[key]
        if value is not default and value != default:
            raise OptionError(
                key, value, f"must be left at its default ({default!r}) when {name} is given ({name}={given!r})"
            )
    return given


def MarginSpec(*args, logit_scale: float = 1.0, **options) -> Scorer:
    """The `Scorer` of these options: the old name of `Scorer.from_options`, with its argument order (margin, m,
    scale, word_norm, context_norm, gain, logit_scale, softcap); `logit_scale` is `logit_multiplier`."""
    if len(args) > 6:  # logit_scale (and softcap) given by position
        logit_scale, options = args[6], {**options, **dict(zip(["softcap"], args[7:], strict=False))}
    check_transform(logit_scale, None, "logit_scale")
    return Scorer.from_options(*args[:6], logit_multiplier=logit_scale, **options)


def validate_margin_options(
    margin: str,
    m: float,
    scale: float | None,
    word_norm: str,
    context_norm: str,
    word_counts: torch.Tensor | None = None,
    vocab_size: int | None = None,
    *,
    counts_required: bool = True,
) -> None:
    """Raise `OptionError` naming the field for any invalid option or combination of margin options, and
    `ValueError` for word counts of the wrong shape or with negative / non-finite entries."""
    scorer = Scorer.from_options(margin, m, scale, word_norm, context_norm)
    check_word_counts(scorer.word_norm, word_counts, vocab_size, counts_required)
