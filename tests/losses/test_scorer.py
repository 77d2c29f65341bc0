"""The scorer of the margin paper's eq. 13 (hf_heads.losses.scorer): a new margin type is one registered class
(a toy one here trains a head and matches a naive φ), unknown names are refused with the allowed ones, the scorer is
frozen and built once per head, every built-in margin's gradient-safe form is its φ, and the losses' keyword
options give the same numbers as a scorer."""

import dataclasses
import math
from dataclasses import dataclass
from typing import ClassVar

import pytest
import torch
from conftest import with_impl

from hf_heads.heads import make_head
from hf_heads.losses import (
    MARGIN_TYPES,
    ArcFace,
    CosFace,
    LSoftmax,
    Margin,
    NoMargin,
    OneParameterMargin,
    OptionError,
    OutputLayerLoss,
    Scorer,
    margin_logits,
    noise_distribution,
    presets,
    register_margin,
)

corrected_nll = with_impl(presets.corrected_nll)
margin_cross_entropy = with_impl(presets.margin_cross_entropy)
sampled_loss = with_impl(presets.sampled_loss)

N, H, V = 11, 5, 13


@dataclass(frozen=True)
class AngularPenalty(OneParameterMargin):
    """A toy margin type: φ(θ) = cos θ − m·θ/π (only `phi`: the default gradient-safe form goes through acos)."""

    name: ClassVar[str] = "toy-angular"

    def phi(self, theta: torch.Tensor) -> torch.Tensor:
        return torch.cos(theta) - self.m * theta / math.pi


@pytest.fixture
def toy():
    register_margin(AngularPenalty)
    yield AngularPenalty
    del MARGIN_TYPES[AngularPenalty.name]


def _data(dtype=torch.float64, seed=0):
    g = torch.Generator().manual_seed(seed)
    h = torch.randn(N, H, generator=g, dtype=dtype, requires_grad=True)
    w = (torch.randn(V, H, generator=g, dtype=dtype) * 0.7).requires_grad_()
    b = (torch.randn(V, generator=g, dtype=dtype) * 0.3).requires_grad_()
    y = torch.randint(0, V, (N,), generator=g)
    y[3] = -100
    counts = torch.randint(0, 40, (V,), generator=g).to(dtype)
    return h, w, b, y, counts


def naive_toy_loss(h, w, b, y, m):
    """Eq. 13 with no-mod norms and the toy φ on the target, θ from acos, one row at a time."""
    losses = []
    for i in range(N):
        if y[i] == -100:
            continue
        logits = h[i] @ w.T + b  # ‖h‖‖W_c‖ cos θ_c + b_c
        t = int(y[i])
        cos = (h[i] @ w[t]) / (h[i].norm() * w[t].norm())
        target = h[i].norm() * w[t].norm() * (torch.cos(torch.acos(cos)) - m * torch.acos(cos) / math.pi) + b[t]
        logits = torch.cat([logits[:t], target[None], logits[t + 1 :]])
        losses.append(torch.logsumexp(logits, 0) - logits[t])
    return torch.stack(losses).mean()


# ----------------------------------------------------------------------------- a new margin type


def test_a_new_margin_type_is_one_registered_class(toy):
    h, w, b, y, _ = _data()
    ours = margin_cross_entropy(h, w, b, y, margin=toy.name, m=0.8, chunk_size=4)
    ref = naive_toy_loss(h, w, b, y, 0.8)
    torch.testing.assert_close(ours, ref)
    for a, r in zip(torch.autograd.grad(ours, (h, w, b)), torch.autograd.grad(ref, (h, w, b)), strict=True):
        torch.testing.assert_close(a, r)
    scorer = Scorer(margin=toy(m=0.8))
    assert torch.equal(margin_cross_entropy(h, w, b, y, scorer=scorer, chunk_size=4), ours)
    assert torch.autograd.gradcheck(lambda h_: margin_cross_entropy(h_, w, b, y, scorer=scorer), (h,))
    plain = margin_cross_entropy(h, w, b, y)
    assert ours > plain  # a margin makes the target harder
    # the sampled criteria run the same scorer: full CE is the margin loss
    full = sampled_loss(h, w, b, y, criterion="ce", method="full", scorer=scorer)
    assert torch.equal(full, margin_cross_entropy(h, w, b, y, scorer=scorer))


def test_a_new_margin_type_trains_a_head_from_its_name(toy):
    torch.manual_seed(0)
    head = make_head(H, V, {"family": "margin", "margin": toy.name, "m": 0.8}).double()
    assert head.scorer(True).margin == toy(m=0.8) and head.scorer(False).margin == NoMargin()
    h, _, _, y, _ = _data()
    h = h.detach()
    head.train()
    loss = head.loss(h, y)
    torch.testing.assert_close(loss, naive_toy_loss(h, head.weight, head.bias, y, 0.8))
    optimizer = torch.optim.SGD(head.parameters(), lr=0.5)
    loss.backward()
    optimizer.step()
    assert head.loss(h, y) < loss
    head.eval()  # inference never carries the margin
    torch.testing.assert_close(head.logits(h), h @ head.weight.T + head.bias)
    with pytest.raises(ValueError, match="head.m=-1.0 must be >= 0"):
        make_head(H, V, {"family": "margin", "margin": toy.name, "m": -1.0})


def test_the_registry_refuses_unknown_names_and_bad_classes(toy):
    with pytest.raises(OptionError) as err:
        Scorer.from_options(margin="triplet")
    assert (err.value.field, err.value.value) == ("margin", "triplet")
    allowed = ", ".join(repr(name) for name in MARGIN_TYPES)  # the built-ins and the toy, in registration order
    assert str(err.value) == f"margin='triplet' is not allowed; allowed: {allowed}" and allowed.endswith(
        f"'{toy.name}'"
    )
    with pytest.raises(ValueError, match="head.margin='triplet' is not allowed; allowed: 'none', 'cos'"):
        make_head(H, V, {"family": "margin", "margin": "triplet"})
    with pytest.raises(OptionError, match="margin='triplet' is not allowed"):
        margin_cross_entropy(*_data()[:4], margin="triplet")

    @dataclass(frozen=True)
    class Other(Margin):
        name: ClassVar[str] = "arc"

        def phi(self, theta):
            return torch.cos(theta)

    with pytest.raises(ValueError, match="margin 'arc' is already registered"):
        register_margin(Other)
    assert register_margin(toy) is toy  # registering the same class again is harmless
    with pytest.raises(TypeError, match="Margin subclass with a name"):
        register_margin(dataclasses.replace)
    with pytest.raises(TypeError, match="abstract"):
        Margin()


@pytest.mark.parametrize(
    "margin, message",
    [
        (lambda: CosFace(m=-0.1), "m=-0.1 must be >= 0"),
        (lambda: ArcFace(m=float("nan")), "m=nan must be finite"),
        (lambda: LSoftmax(m=1.5), "m=1.5 must be an integer"),
        (lambda: LSoftmax(m=0), "m=0 must be >= 1"),
        (lambda: AngularPenalty(m="x"), "m='x' must be a number"),
    ],
)
def test_each_margin_checks_its_option(margin, message):
    with pytest.raises(OptionError, match=f"^{message}") as err:
        margin()
    assert err.value.field == "m"


@pytest.mark.parametrize(
    "margin", [NoMargin(), CosFace(m=0.35), ArcFace(m=0.5), ArcFace(m=2.0), LSoftmax(m=1), LSoftmax(m=4)], ids=repr
)
def test_each_margins_gradient_safe_form_is_its_phi(margin):
    theta = torch.linspace(0, math.pi, 2001, dtype=torch.float64)
    # ArcFace's sin θ = sqrt(max(1 − cos² θ, 1e-12)) is >= 1e-6: within 1e-6 of φ at θ = 0 and π
    torch.testing.assert_close(margin.safe_phi(torch.cos(theta)), margin.phi(theta), rtol=0, atol=1e-6)
    values = margin.safe_phi(torch.cos(theta))
    assert torch.all(values[1:] <= values[:-1] + 1e-9)  # non-increasing in θ
    x = torch.tensor([1.0, -1.0, 1 - 1e-9, -1 + 1e-9], dtype=torch.float32, requires_grad=True)
    (grad,) = torch.autograd.grad(margin.safe_phi(x).sum(), x)
    assert torch.all(torch.isfinite(grad))


# ----------------------------------------------------------------------------- the scorer object


def test_the_scorer_is_frozen_and_validated_on_construction():
    scorer = Scorer(margin=ArcFace(m=0.3), word_norm="log-rank", gain=1.5)
    with pytest.raises(dataclasses.FrozenInstanceError):
        scorer.gain = 2.0
    with pytest.raises(dataclasses.FrozenInstanceError):
        scorer.margin.m = 0.5
    assert hash(scorer) == hash(Scorer(margin=ArcFace(m=0.3), word_norm="log-rank", gain=1.5))
    assert scorer.without_margin() == Scorer(word_norm="log-rank", gain=1.5)
    assert (
        Scorer.from_options("arc", 0.3, word_norm="log-rank", gain=1.5)
        == scorer
        == Scorer.from_options("arc", 0.3, None, "log-rank", gain=1.5)
    )
    with pytest.raises(OptionError, match="^word_norm='zipf' is not allowed"):
        Scorer(word_norm="zipf")
    with pytest.raises(OptionError, match="word_norm and context_norm must be 'no-mod'"):
        Scorer(scale=8.0, context_norm="max-norm")
    with pytest.raises(OptionError, match="^logit_multiplier=0.0 must be > 0"):
        Scorer(logit_multiplier=0.0)
    with pytest.raises(TypeError, match="Scorer.margin must be a Margin"):
        Scorer(margin="arc")


def test_a_head_builds_its_scorer_once_per_options_object():
    head = make_head(H, V, {"family": "margin", "margin": "arc", "m": 0.2, "logit_multiplier": 0.5})
    train, inference = head.scorer(True), head.scorer(False)
    assert train == Scorer(margin=ArcFace(m=0.2), logit_multiplier=0.5) and inference == train.without_margin()
    h, _, _, y, _ = _data(torch.float32)
    head.train()
    head.loss(h, y)
    head.eval()
    head.loss(h, y), head.logits(h)
    assert head.scorer(True) is train and head.scorer(False) is inference  # the same objects: never rebuilt
    head.options = dataclasses.replace(head.options, warm_start_gain=2.0)  # what calibration does
    assert head.scorer(True) == dataclasses.replace(train, gain=2.0)
    assert head.options.scorer() is head.scorer(True)


# ----------------------------------------------------------------------------- keyword options = scorer


OPTIONS = [
    dict(),
    dict(margin="cos", m=0.3),
    dict(margin="arc", m=0.2, word_norm="log-rank", context_norm="max-norm", gain=1.5),
    dict(margin="lsm", m=3, word_norm="unigram"),
    dict(margin="arc", m=0.1, scale=8.0),
]


@pytest.mark.parametrize("options", OPTIONS, ids=lambda o: o.get("margin", "none"))
def test_keyword_options_give_the_numbers_of_the_scorer(options):
    h, w, b, y, counts = _data()
    scorer = Scorer.from_options(**options)
    data = dict(word_counts=counts)
    pairs = [
        (lambda **kw: margin_logits(h, w, b, y, **data, **kw)),
        (lambda **kw: margin_cross_entropy(h, w, b, y, chunk_size=4, **data, **kw)),
        (lambda **kw: corrected_nll(h, w, b, y, criterion="bce", method="full", **data, **kw)),
        (lambda **kw: sampled_loss(h, w, b, y, criterion="bce", method="full", **data, **kw)),
    ]
    noise = noise_distribution("uniform", V)
    for method in ("mcs", "nce"):
        sampled = dict(
            criterion="ce", method=method, num_samples=4, noise_probs=noise, samples=torch.tensor([0, 2, 2, 7])
        )
        pairs.append(lambda sampled=sampled, **kw: sampled_loss(h, w, b, y, **sampled, **data, **kw))
    for call in pairs:
        expected = call(**options)
        assert torch.equal(call(scorer=scorer), expected)
    expected = margin_cross_entropy(h, w, b, y, **data, **options)
    assert torch.equal(OutputLayerLoss(scorer=scorer.given(word_counts=counts))(h, w, b, y), expected)


def test_a_scorer_and_keyword_options_do_not_mix():
    h, w, b, y, _ = _data()
    scorer = Scorer(margin=CosFace(m=0.2))
    with pytest.raises(OptionError, match=r"m=0\.3 must be left at its default \(0\.0\) when scorer is given") as err:
        margin_cross_entropy(h, w, b, y, scorer=scorer, m=0.3)
    assert err.value.field == "m"
    with pytest.raises(TypeError, match="unexpected margin option"):
        margin_logits(h, w, b, y, scorer=scorer, spec=scorer)
    with pytest.raises(TypeError, match="scorer must be a Scorer, got dict"):
        margin_logits(h, w, b, y, scorer={"margin": "cos"})
    with pytest.raises(TypeError, match="unexpected margin option"):
        corrected_nll(h, w, b, y, criterion="bce", method="full", temperature=2.0)


def test_the_weight_rows_the_scorer_reads_have_the_gradients_of_norm_and_gather():
    """`weight_norms_and_targets` (‖W_c‖ and W[y] with one (V, H) gradient buffer) against torch's norm and
    indexing, forward and backward, float64 gradcheck, a zero row included (gradient 0 there, as torch's norm), and
    no target."""
    from hf_heads.losses.scorer import weight_norms_and_targets

    g = torch.Generator().manual_seed(0)
    w = torch.randn(7, 3, generator=g, dtype=torch.float64)
    w[4] = 0.0
    w.requires_grad_()
    y = torch.tensor([1, 4, 1, 6])
    norms, rows, _ = weight_norms_and_targets(w, y)
    g_n, g_r = torch.randn(7, generator=g, dtype=torch.float64), torch.randn(4, 3, generator=g, dtype=torch.float64)
    got = torch.autograd.grad((norms * g_n).sum() + (rows * g_r).sum(), w)[0]
    want_n, want_r = w.norm(dim=1), w[y]
    want = torch.autograd.grad((want_n * g_n).sum() + (want_r * g_r).sum(), w)[0]
    torch.testing.assert_close((norms, rows), (want_n, want_r))
    torch.testing.assert_close(got, want)
    assert weight_norms_and_targets(w, None)[1] is None
    w_ok = torch.randn(7, 3, generator=g, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda w_: weight_norms_and_targets(w_, y)[:2], (w_ok,))
    assert torch.autograd.gradcheck(lambda w_: weight_norms_and_targets(w_, None)[0], (w_ok,))
    # with a slot, W passes on as a third output; a gradient reaching it from anything but the fused loss is never
    # written into (here the sum's gradient: one expanded tensor shared by every entry), only added to
    from hf_heads.losses.fused_linear import WeightGradSlot

    for other in (lambda v: v.sum(), lambda v: (v * 3.0).sum()):
        norms, rows, w_pass = weight_norms_and_targets(w, y, slot=WeightGradSlot())
        got = torch.autograd.grad((norms * g_n).sum() + (rows * g_r).sum() + other(w_pass), w)[0]
        torch.testing.assert_close(got, want + torch.autograd.grad(other(w), w)[0])
