"""Large-margin softmax for language models: L-Softmax, ArcFace, CosFace with word- and
context-vector norm scaling.

Paper: Huo, Gao, Wang, Schlüter, Ney, "Investigation of Large-Margin Softmax in Neural Language
Modeling", Interspeech 2020 (shared/papers/large_margin_softmax_lm.md).

The logit of class c at position i is (eq. 13)

    l(c, i) = g(i) · f(c) · φ_c(cos θ_{c,i}) + b_c

with φ_c = cos for every non-target class and, for the target y (eq. 14):
`cos` cos θ − m (CosFace, eq. 5), `arc` cos(θ + m) (ArcFace, eq. 6), `lsm` ψ(θ) = (−1)^k cos(mθ) − 2k
(L-Softmax, eqs. 7–8), `none` cos θ. The word-vector norm f (eq. 9, with v and u of eqs. 11–12)
and the context norm g (eq. 10) are:

    f: no-mod ‖W_y‖ · uniform ‖W_amax‖ · log-rank log(exp‖W_amax‖ − v·rank_y)
       unigram ‖W_amin‖ + u·c_y · log-unigram log c_y
    g: no-mod ‖h_i‖ · max-norm max_j ‖h_j‖ over the batch

`scale=s` is the face-recognition setting of eqs. 5–6 / table 1: both vectors normalised, ‖W‖ = 1,
‖h‖ = s (then f and g must stay `no-mod`).

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
- A checkpoint's output transform (hf_heads.losses.transforms: `logit_scale`, `softcap`) applies to every logit
  of eq. 13 as the architecture applies it to its plain logits: l' = cap·tanh(scale·l / cap), the margin's target
  logit included. So the margin is taken on the raw logit and the cap bounds the result: near the cap a margin
  changes the target logit less (tanh saturates), which is what the checkpoint's own logits do to a large score.
  `gain` and `logit_scale` both multiply g·f·φ; the scale also multiplies the bias, the gain does not.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import torch
from torch import nn

from hf_heads.losses._checks import OptionError, check_choice, check_number
from hf_heads.losses._rows import (
    autocast_off,
    check_labels,
    compute_dtype,
    frequency_ranks,
    linear_rows,
    reduce_rows,
)
from hf_heads.losses.fused_linear import fused_linear_cross_entropy
from hf_heads.losses.transforms import check_transform, soft_cap

MARGINS = ("none", "cos", "arc", "lsm")
WORD_NORMS = ("no-mod", "uniform", "log-rank", "unigram", "log-unigram")
CONTEXT_NORMS = ("no-mod", "max-norm")
NEEDS_COUNTS = ("uniform", "log-rank", "unigram", "log-unigram")
_EPS = 1e-12


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
    check_choice("margin", margin, MARGINS)
    check_choice("word_norm", word_norm, WORD_NORMS)
    check_choice("context_norm", context_norm, CONTEXT_NORMS)
    if margin == "lsm":
        check_number("m", m, minimum=1, integer=True)
    else:
        check_number("m", m, minimum=0)
    if scale is not None:
        check_number("scale", scale, exclusive_minimum=0)
        if word_norm != "no-mod" or context_norm != "no-mod":
            field, value = ("word_norm", word_norm) if word_norm != "no-mod" else ("context_norm", context_norm)
            raise OptionError(
                field,
                value,
                f"is not allowed with scale={scale!r}: the scale fixes ‖W‖=1 and ‖h‖=scale (eqs. 5-6), so word_norm "
                "and context_norm must be 'no-mod'",
            )
    _check_word_counts(word_norm, word_counts, vocab_size, counts_required)


def _check_word_counts(word_norm: str, word_counts, vocab_size: int | None, counts_required: bool) -> None:
    if word_norm in NEEDS_COUNTS and counts_required and word_counts is None:
        raise OptionError("word_norm", word_norm, "needs word_counts (a (V,) tensor of training counts)")
    if word_counts is not None:
        if word_counts.dim() != 1:
            raise ValueError(f"word_counts must be 1-D (V,), got shape {tuple(word_counts.shape)}")
        if vocab_size is not None and word_counts.numel() != vocab_size:
            raise ValueError(f"word_counts has {word_counts.numel()} entries but the vocabulary has {vocab_size}")
        if not bool(torch.isfinite(word_counts).all()) or bool((word_counts < 0).any()):
            raise ValueError("word_counts must be finite and >= 0")


@dataclass(frozen=True)
class MarginSpec:
    """The options of eq. 13's scorer, validated on construction (an invalid spec never exists): the target's
    φ (`margin`, `m`), the face-recognition `scale`, the norms f (`word_norm`) and g (`context_norm`) and the
    `gain` on g (module docstring). The word counts and a fixed g value are data, passed beside it."""

    margin: str = "none"
    m: float = 0.0
    scale: float | None = None
    word_norm: str = "no-mod"
    context_norm: str = "no-mod"
    gain: float = 1.0
    logit_scale: float = 1.0
    softcap: float | None = None

    def __post_init__(self) -> None:
        validate_margin_options(
            self.margin, self.m, self.scale, self.word_norm, self.context_norm, counts_required=False
        )
        check_number("gain", self.gain, exclusive_minimum=0)
        check_transform(self.logit_scale, self.softcap, "logit_scale")

    def without_margin(self) -> MarginSpec:
        """The same scorer with no margin (the inference logits)."""
        return dataclasses.replace(self, margin="none", m=0.0)

    def check_counts(self, word_counts: torch.Tensor | None, vocab_size: int | None = None) -> None:
        """Raise when the word norm needs counts and has none, or the counts do not fit the vocabulary."""
        _check_word_counts(self.word_norm, word_counts, vocab_size, True)


_SPEC_DEFAULTS = {f.name: f.default for f in dataclasses.fields(MarginSpec)}


def _resolve_spec(spec: MarginSpec | None, **options) -> MarginSpec:
    """`spec`, or a spec built from the individual margin keyword arguments (which must stay at their
    defaults when `spec` is given)."""
    unknown = set(options) - set(_SPEC_DEFAULTS)
    if unknown:
        raise TypeError(
            f"unexpected margin option(s) {', '.join(sorted(unknown))}; allowed: {', '.join(_SPEC_DEFAULTS)}"
        )
    if spec is None:
        return MarginSpec(**options)
    if not isinstance(spec, MarginSpec):
        raise TypeError(f"spec must be a MarginSpec, got {type(spec).__name__}")
    for name, value in options.items():
        default = _SPEC_DEFAULTS[name]
        if value is not default and value != default:
            raise OptionError(
                name, value, f"must be left at its default ({default!r}) when spec is given (spec={spec!r})"
            )
    return spec


# ----------------------------------------------------------------------------- φ (eq. 14)


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


def target_phi(cos: torch.Tensor, margin: str, m: float) -> torch.Tensor:
    """φ(θ_{y,i}) for the target class (eq. 14)."""
    if margin == "cos":
        return cos - m
    if margin == "arc":
        return arc_phi(cos, m)
    if margin == "lsm":
        return lsm_psi(cos, int(m))
    return cos


# ----------------------------------------------------------------------------- f, g (eqs. 9-12)


def word_norm_values(weight: torch.Tensor, word_norm: str, word_counts: torch.Tensor | None) -> torch.Tensor | None:
    """f(c) for every class (eq. 9), shape (V,); None for no-mod (f = ‖W_c‖, left implicit)."""
    if word_norm == "no-mod":
        return None
    counts = word_counts.to(device=weight.device, dtype=weight.dtype)
    if word_norm == "log-unigram":
        return torch.log(counts.clamp_min(1.0))
    norms = weight.norm(dim=1)  # (V,)
    amax, amin = int(torch.argmax(counts)), int(torch.argmin(counts))
    top, bottom = norms[amax], norms[amin]
    if word_norm == "uniform":
        return top.expand(weight.shape[0])
    if word_norm == "unigram":
        u = (top - bottom) / counts[amax].clamp_min(_EPS)  # eq. 12
        return bottom + u * counts
    # log-rank: log(exp(top) − v·r), v = (exp(top) − exp(bottom)) / V  (eqs. 9, 11)
    vocab = weight.shape[0]
    frac = frequency_ranks(counts).to(weight.dtype) / vocab  # (V,) in [0, 1)
    return torch.logaddexp(top + torch.log1p(-frac), bottom + torch.log(frac))


def context_norm_values(
    hidden: torch.Tensor, context_norm: str, context_norm_value: float | torch.Tensor | None = None
) -> torch.Tensor | None:
    """g(i) for every row (eq. 10), shape (N,); None for no-mod (g = ‖h_i‖, left implicit)."""
    if context_norm == "no-mod":
        return None
    if context_norm_value is not None:
        value = torch.as_tensor(context_norm_value, dtype=hidden.dtype, device=hidden.device)
        return value.expand(hidden.shape[0])
    if hidden.shape[0] == 0:
        return hidden.new_zeros(0)
    return hidden.norm(dim=1).max().expand(hidden.shape[0])


# ----------------------------------------------------------------------------- logits


def _margin_parts(hidden, weight, bias, target, spec: MarginSpec, word_counts, g_value):
    """Split eq. 13 into row scales a (N,), column scales s (V,), the target logit t (N,) and the bias b (V,) so
    that l(c, i) = a_i · s_c · (h_i · W_c) + b_c for c != y_i and l(y_i, i) = t_i. `spec.gain` multiplies g(i);
    `spec.logit_scale` multiplies every logit (a, t and b; the soft-cap is the caller's, on the result)."""
    h_norm = hidden.norm(dim=1).clamp_min(_EPS)  # (N,)
    w_norm = weight.norm(dim=1).clamp_min(_EPS)  # (V,)
    if spec.scale is not None:
        g, f = torch.full_like(h_norm, float(spec.scale)), torch.ones_like(w_norm)
    else:
        g = context_norm_values(hidden, spec.context_norm, g_value)
        f = word_norm_values(weight, spec.word_norm, word_counts)
    if spec.gain != 1.0:
        g = (h_norm if g is None else g) * spec.gain  # (N,)
    a = None if g is None else g / h_norm  # (N,)
    s = None if f is None else f / w_norm  # (V,)
    t = None
    if target is not None and spec.margin != "none":
        w_y = weight[target]  # (N, H)
        cos = (hidden * w_y).sum(1) / (h_norm * w_norm[target])  # (N,)
        g_y = h_norm if g is None else g
        f_y = w_norm[target] if f is None else f[target]
        t = g_y * f_y * target_phi(cos, spec.margin, spec.m)  # (N,)
        if bias is not None:
            t = t + bias[target]
    if spec.logit_scale != 1.0:
        a = torch.full_like(h_norm, spec.logit_scale) if a is None else a * spec.logit_scale
        t = None if t is None else t * spec.logit_scale
        bias = None if bias is None else bias * spec.logit_scale
    return a, s, t, bias


def _scaled(hidden, weight, a, s):
    return (hidden if a is None else hidden * a[:, None]), (weight if s is None else weight * s[:, None])


@autocast_off
def margin_logits(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    target: torch.Tensor | None = None,
    *,
    margin: str = "none",
    m: float = 0.0,
    scale: float | None = None,
    word_norm: str = "no-mod",
    context_norm: str = "no-mod",
    word_counts: torch.Tensor | None = None,
    context_norm_value: float | torch.Tensor | None = None,
    gain: float = 1.0,
    spec: MarginSpec | None = None,
) -> torch.Tensor:
    """All logits l(c, i) of eq. 13, shape (*, V) for hidden (*, H), weight (V, H), bias (V,).

    With `target` (*,) the target class gets φ of eq. 14 (rows equal to -100 get no margin);
    without it, the logits are the inference logits (no margin). The options come as keyword arguments or as
    one `spec` (then the keyword arguments stay at their defaults). Materialises (N, V): use
    `margin_cross_entropy` for training. Computed in float32 (float64 for float64 inputs, also under
    autocast) and returned in the dtype `hidden @ weight.T` would have outside autocast.
    """
    spec = _resolve_spec(
        spec, margin=margin, m=m, scale=scale, word_norm=word_norm, context_norm=context_norm, gain=gain
    )
    spec.check_counts(word_counts, weight.shape[0])
    lead = hidden.shape[:-1]
    out_dtype = torch.promote_types(hidden.dtype, weight.dtype)
    compute = compute_dtype(hidden, weight)
    h = hidden.reshape(-1, hidden.shape[-1]).to(compute)
    weight, bias = weight.to(compute), None if bias is None else bias.to(compute)
    y = None if target is None else target.reshape(-1)
    if y is not None:
        check_labels(y, weight.shape[0], -100)
    safe_y = None if y is None else y.clamp_min(0)
    a, s, t, bias = _margin_parts(h, weight, bias, safe_y, spec, word_counts, context_norm_value)
    h2, w2 = _scaled(h, weight, a, s)
    logits = h2 @ w2.T  # (N, V)
    if bias is not None:
        logits = logits + bias
    if t is not None:
        keep = y != -100
        rows = torch.arange(h.shape[0], device=h.device)[keep]
        logits = logits.index_put((rows, y[keep]), t[keep])
    logits = soft_cap(logits, spec.softcap)
    return logits.reshape(*lead, weight.shape[0]).to(out_dtype)


@autocast_off
def margin_cross_entropy(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    target: torch.Tensor,
    *,
    margin: str = "none",
    m: float = 0.0,
    scale: float | None = None,
    word_norm: str = "no-mod",
    context_norm: str = "no-mod",
    word_counts: torch.Tensor | None = None,
    context_norm_value: float | torch.Tensor | None = None,
    reduction: str = "mean",
    ignore_index: int = -100,
    num_items_in_batch: int | torch.Tensor | None = None,
    chunk_size: int | None = None,
    top_k: int | None = None,
    label_smoothing: float = 0.0,
    gain: float = 1.0,
    spec: MarginSpec | None = None,
) -> torch.Tensor:
    """Cross-entropy (eq. 4) of the large-margin logits of eq. 13, computed in chunks of tokens
    without materialising the (N, V) logits. Arguments as in `margin_logits`; `reduction`,
    `ignore_index` as in `F.cross_entropy`; `num_items_in_batch` divides the sum instead of the
    number of non-ignored tokens (exact gradient accumulation). With margin="none", scale=None and
    both norms no-mod this is `F.cross_entropy(hidden @ weight.T + bias, target)`.
    """
    spec = _resolve_spec(
        spec, margin=margin, m=m, scale=scale, word_norm=word_norm, context_norm=context_norm, gain=gain
    )
    spec.check_counts(word_counts, weight.shape[0])
    h, w, b, y, valid = linear_rows(hidden, weight, bias, target, ignore_index, reduction)
    h_v, y_v = h[valid], y[valid]
    a, s, t, b = _margin_parts(h_v, w, b, y_v, spec, word_counts, context_norm_value)
    h2, w2 = _scaled(h_v, w, a, s)
    loss = fused_linear_cross_entropy(
        h2,
        w2,
        b,
        y_v,
        target_logit=t,
        softcap=spec.softcap,
        top_k=top_k,
        label_smoothing=label_smoothing,
        reduction=reduction,
        num_items_in_batch=num_items_in_batch,
        chunk_size=chunk_size,
    )
    return reduce_rows(loss, valid, target.shape, "none") if reduction == "none" else loss


class MarginCrossEntropy(nn.Module):
    """`margin_cross_entropy` as a module: options at construction (`spec`), tensors at call time."""

    def __init__(
        self,
        margin: str = "none",
        m: float = 0.0,
        scale: float | None = None,
        word_norm: str = "no-mod",
        context_norm: str = "no-mod",
        word_counts: torch.Tensor | None = None,
        reduction: str = "mean",
        ignore_index: int = -100,
        chunk_size: int | None = None,
    ) -> None:
        super().__init__()
        self.spec = MarginSpec(margin, m, scale, word_norm, context_norm)
        self.spec.check_counts(word_counts)
        self.reduction, self.ignore_index, self.chunk_size = reduction, ignore_index, chunk_size
        self.register_buffer("word_counts", word_counts, persistent=False)

    def forward(self, hidden, weight, bias, target, num_items_in_batch=None, context_norm_value=None):
        return margin_cross_entropy(
            hidden,
            weight,
            bias,
            target,
            spec=self.spec,
            word_counts=self.word_counts,
            context_norm_value=context_norm_value,
            reduction=self.reduction,
            ignore_index=self.ignore_index,
            num_items_in_batch=num_items_in_batch,
            chunk_size=self.chunk_size,
        )
