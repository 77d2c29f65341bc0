"""The contract of every registered component, generated from the registries (hf_heads.components.REGISTRIES): the
built-in ones and those of every module under tests/extension (a user's package; adding a component there adds its
cases here, with no test file edited). Each component runs with its `example` parameters against its own
reference, the naive dense computation from its definition:

- margin (φ of eq. 14): `safe_phi(cos θ)` equals `phi(acos cos θ)` in value and gradient inside (−1, 1) and stays
  finite at ±1; the margin loss over the full logits of eq. 13 equals cross-entropy of the dense logits whose target
  entry is g·f·phi(θ) + b, forward and backward;
- word norm f (eq. 9) and context norm g (eq. 10): `values` equal `reference` (value and gradient), and the loss
  with f or g equals the dense reference built from `reference`;
- sampling method: the criterion (CE and BCE, and MSE for a method over every class) equals the method's
  per-position `reference` summed over the rows, forward and backward, with and without accidental hits removed;
- noise D: `distribution` equals `reference`, is > 0, sums to 1, and the draw follows it;
- float64 gradcheck of each loss in hidden states and every output parameter; reductions and ignored rows.

The margin and the norms enter the chunk kernels only through the row scale, the column scale and the target
logit (hf_heads.losses.scorer.Scorer.factors), which tests/losses/test_kernels.py holds every kernel to for every
option; here every available kernel runs the component's loss, the eager one in the default suite and the compiled and
Triton-interpreted ones (seconds per case) in `make test-all`. Registering a component without its reference is an
error (the last tests).
"""

from __future__ import annotations

import dataclasses
import math
from typing import ClassVar

import pytest
import torch
import torch.nn.functional as F
from conftest import chunked, with_impl
from extensions import COMPONENTS, EXTENSIONS, KERNELS
from extensions import kernel as extension_kernel

from hf_heads.components import REGISTRIES, component_base, component_config, register
from hf_heads.heads.registry import component_modules
from hf_heads.losses import CHUNK_KERNELS, Impl, output_loss, presets
from hf_heads.losses.chunks import ChunkKernel, register_kernel
from hf_heads.losses.continuous_losses import ContinuousBatch, ContinuousLoss
from hf_heads.losses.kernels import EagerKernel
from hf_heads.losses.noise import Noise
from hf_heads.losses.parts import Criterion, make_criterion
from hf_heads.losses.sampled import SamplingMethod
from hf_heads.losses.scorer import ContextNorm, Margin, Scorer, WordNorm

margin_cross_entropy = with_impl(presets.margin_cross_entropy)
sampled_loss = with_impl(presets.sampled_loss)

SLOW_KERNELS = ("compiled", "triton", "triton-half")  # compiled per option set, or run interpreted: `make test-all`


def _cases(kind: str, kernels: bool = False) -> list:
    out = []
    for cls in COMPONENTS[kind]:
        for kernel in KERNELS if kernels else [None]:
            marks = [pytest.mark.slow] if kernel in SLOW_KERNELS else []
            suffix = "" if kernel is None else f"-{kernel}"
            out.append(pytest.param(cls, kernel, id=f"{cls.name}{suffix}", marks=marks))
    return out


def example(cls: type):
    """The component with the parameters it asks the contract suite to run it with."""
    return cls(**cls.example)


def test_the_extension_package_adds_one_component_of_each_kind_it_shows():
    names = {kind: [cls.name for cls in classes] for kind, classes in EXTENSIONS.items()}
    assert "toy-arc-cos" in names["margin"] and "toy-log1p-unigram" in names["word_norm"]
    assert "toy-tempered-is" in names["sampling_method"] and "toy-cosine-distance" in names["continuous_loss"]
    assert "toy-arc-cos" not in REGISTRIES["margin"]  # the rest of the suite sees the built-ins only


# ----------------------------------------------------------------------------- the dense reference of eq. 13

N, H, V = 9, 5, 11


def _data(seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    h = torch.randn(N, H, generator=g, dtype=torch.float64)
    h[2] *= 4.0  # the ignored row has the largest ‖h‖: a batch statistic over the counted rows must leave it out
    h.requires_grad_()
    w = (torch.randn(V, H, generator=g, dtype=torch.float64) * 0.7).requires_grad_()
    b = (torch.randn(V, generator=g, dtype=torch.float64) * 0.3).requires_grad_()
    y = torch.randint(0, V, (N,), generator=g)
    y[2] = -100
    counts = torch.randint(0, 50, (V,), generator=g).double()
    counts[4] = 0.0  # a word never seen in training
    return h, w, b, y, counts


def dense_logits(h, w, b, y, scorer: Scorer, counts, valid):
    """l(c, i) = g(i) f(c) φ_c(cos θ) + b_c (eq. 13) on the full (N, V) logits, f and g from the components'
    references and the target's φ from the margin's definition `phi` (θ from acos)."""
    cos = (h @ w.T) / (h.norm(dim=1)[:, None] * w.norm(dim=1)[None, :])  # (N, V)
    g = scorer.context_norm.reference(h, valid)  # (N,)
    f = scorer.word_norm.reference(w, counts if scorer.word_norm.needs_counts else None)  # (V,)
    logits = g[:, None] * f[None, :] * cos
    rows = torch.nonzero(valid).squeeze(1)
    theta = torch.acos(cos[rows, y[rows]].clamp(-1, 1))
    logits = logits.index_put((rows, y[rows]), g[rows] * f[y[rows]] * scorer.margin.phi(theta))
    return logits + b


def _check_scorer(scorer: Scorer, kernel: str | None):
    h, w, b, y, counts = _data()
    valid = y != -100
    kernel = extension_kernel(kernel or "eager")
    loss = margin_cross_entropy(h, w, b, y, scorer=scorer, word_counts=counts, chunk_size=4, kernel=kernel)
    expected = F.cross_entropy(dense_logits(h, w, b, y, scorer, counts, valid), y)
    torch.testing.assert_close(loss, expected, rtol=1e-6, atol=1e-8)
    got = torch.autograd.grad(loss, (h, w, b))
    want = torch.autograd.grad(expected, (h, w, b))
    for a, e in zip(got, want, strict=True):
        torch.testing.assert_close(a, e, rtol=1e-5, atol=1e-8)
    if kernel.name == "eager":  # float64 gradcheck, and the reductions and ignored rows of the same loss

        def f(hidden, weight, bias):
            return margin_cross_entropy(hidden, weight, bias, y, scorer=scorer, word_counts=counts, chunk_size=4)

        assert torch.autograd.gradcheck(f, (h, w, b), fast_mode=True)
        rows = margin_cross_entropy(h, w, b, y, scorer=scorer, word_counts=counts, reduction="none")
        assert rows.shape == y.shape and float(rows[2]) == 0.0
        torch.testing.assert_close(rows.sum() / valid.sum(), loss)


# ----------------------------------------------------------------------------- margins


@pytest.mark.parametrize("cls, kernel", _cases("margin", kernels=True))
def test_margin_loss_equals_its_dense_reference(cls, kernel):
    _check_scorer(Scorer(margin=example(cls)), kernel)


@pytest.mark.parametrize("cls, kernel", _cases("margin"))
def test_margin_safe_phi_is_its_definition_and_finite(cls, kernel):
    margin = example(cls)
    cos = torch.linspace(-0.999, 0.999, 41, dtype=torch.float64, requires_grad=True)
    safe = margin.safe_phi(cos)
    torch.testing.assert_close(safe, margin.phi(torch.acos(cos)), rtol=1e-6, atol=1e-6)
    ends = torch.tensor([-1.0, 1.0], dtype=torch.float64, requires_grad=True)
    value = margin.safe_phi(ends)
    (grad,) = torch.autograd.grad(value.sum(), ends)
    assert torch.isfinite(value).all() and torch.isfinite(grad).all()
    assert component_config(margin) == ({"type": cls.name, **cls.example} if cls.example else cls.name)


# ----------------------------------------------------------------------------- norms f and g


@pytest.mark.parametrize("cls, kernel", _cases("word_norm", kernels=True))
def test_word_norm_loss_equals_its_dense_reference(cls, kernel):
    _check_scorer(Scorer(margin=REGISTRIES["margin"]["arc"](0.2), word_norm=example(cls)), kernel)


@pytest.mark.parametrize("cls, kernel", _cases("context_norm", kernels=True))
def test_context_norm_loss_equals_its_dense_reference(cls, kernel):
    _check_scorer(Scorer(context_norm=example(cls)), kernel)


@pytest.mark.parametrize("cls, kernel", _cases("word_norm"))
def test_word_norm_values_are_its_reference(cls, kernel):
    norm = example(cls)
    h, w, b, y, counts = _data()
    counts = counts if norm.needs_counts else None
    values = norm.values(w, counts, w.norm(dim=1))
    reference = norm.reference(w, counts)
    if values is None:  # f = ‖W_c‖ left implicit: the reference says so
        assert norm.identity
        torch.testing.assert_close(reference, w.norm(dim=1))
        return
    torch.testing.assert_close(values, reference)
    if reference.requires_grad:
        probe = torch.randn_like(reference)
        (a,) = torch.autograd.grad((values * probe).sum(), w)
        (e,) = torch.autograd.grad((reference * probe).sum(), w)
        torch.testing.assert_close(a, e)


@pytest.mark.parametrize("cls, kernel", _cases("context_norm"))
def test_context_norm_values_are_its_reference(cls, kernel):
    norm = example(cls)
    h, w, b, y, counts = _data()
    valid = y != -100
    values = norm.values(h, valid)
    reference = norm.reference(h, valid)
    if values is None:
        assert norm.identity
        torch.testing.assert_close(reference, h.norm(dim=1))
        return
    torch.testing.assert_close(values, reference)
    if norm.batch_dependent:  # one statistic for the batch: the running value follows it
        torch.testing.assert_close(norm.batch_value(h, valid).expand(N), reference)


# ----------------------------------------------------------------------------- sampling methods


def _sampled_reference(method: SamplingMethod, criterion, h, w, b, y, samples, probs, remove_hits):
    """Σ over counted rows of the method's per-position reference, / the number of counted rows."""
    s = h @ w.T + b  # (N, V)
    K = None if samples is None else samples.numel()
    total, count = 0.0, 0
    for n in range(N):
        if y[n] == -100:
            continue
        target = int(y[n])
        if samples is None:  # every other class is a candidate
            others = torch.tensor([c for c in range(V) if c != target])
            log_kd_t, log_kd = torch.zeros((), dtype=s.dtype), torch.zeros(V - 1, dtype=s.dtype)
        else:
            others = torch.tensor(
                [int(c) for c in samples if not (remove_hits and int(c) == target)], dtype=torch.long
            )
            log_kd_t = torch.log(K * probs[target])
            log_kd = torch.log(K * probs[others])
        criterion_object = make_criterion(criterion)
        total = total + method.reference(criterion_object, s[n, target], s[n, others], log_kd_t, log_kd, K, V)
        count += 1
    return total / count


def _sampled_cases() -> list:
    out = []
    for cls in COMPONENTS["sampling_method"]:
        criteria = ("ce", "bce") if cls.draws_samples else ("ce", "bce", "mse")
        for criterion in criteria:
            for remove in (False, True) if cls.draws_samples else (False,):
                out.append(pytest.param(cls, criterion, remove, id=f"{cls.name}-{criterion}" + ("-no-hits" * remove)))
    return out


@pytest.mark.parametrize("cls, criterion, remove_hits", _sampled_cases())
def test_sampling_method_equals_its_per_position_reference(cls, criterion, remove_hits):
    method = example(cls)
    h, w, b, y, counts = _data(1)
    probs = (counts + 1) / (counts + 1).sum()  # D > 0 everywhere
    samples = torch.tensor([0, 3, 3, 7, int(y[0])]) if method.draws_samples else None  # y[0]: an accidental hit
    options = dict(criterion=criterion, method=method, remove_accidental_hits=remove_hits)
    if samples is not None:
        options.update(num_samples=samples.numel(), noise_probs=probs, samples=samples)

    def loss_of(hidden, weight, bias):
        return sampled_loss(hidden, weight, bias, y, **options, chunk_size=4)

    loss = loss_of(h, w, b)
    expected = _sampled_reference(method, criterion, h, w, b, y, samples, probs, remove_hits)
    torch.testing.assert_close(loss, expected, rtol=1e-6, atol=1e-8)
    for a, e in zip(torch.autograd.grad(loss, (h, w, b)), torch.autograd.grad(expected, (h, w, b)), strict=True):
        torch.testing.assert_close(a, e, rtol=1e-5, atol=1e-8)
    assert torch.autograd.gradcheck(loss_of, (h, w, b), fast_mode=True)
    rows = sampled_loss(h, w, b, y, **options, reduction="none")
    assert rows.shape == y.shape and float(rows[2]) == 0.0


# ----------------------------------------------------------------------------- criteria


@pytest.mark.parametrize("cls, kernel", _cases("criterion", kernels=True))
def test_criterion_over_every_class_equals_its_reference(cls, kernel):
    """Every registered criterion (at its `example`) over `Full` candidates, in chunks with every kernel: its own
    `reference` on the dense logits (the paper's equation), forward, backward, reduced over the counted rows, and
    float64 gradcheck."""
    criterion = example(cls)
    h, w, b, y, _ = _data(3)
    valid = y != -100
    impl = Impl(kernel=extension_kernel(kernel or "eager"), chunk_size=4)
    loss = output_loss(h, w, b, y, criterion=criterion, impl=impl)
    expected = criterion.reference((h @ w.T + b)[valid], y[valid]).mean()
    torch.testing.assert_close(loss, expected, rtol=1e-6, atol=1e-8)
    for a, e in zip(torch.autograd.grad(loss, (h, w, b)), torch.autograd.grad(expected, (h, w, b)), strict=True):
        torch.testing.assert_close(a, e, rtol=1e-5, atol=1e-8)
    assert torch.autograd.gradcheck(
        lambda h_, w_, b_: output_loss(h_, w_, b_, y, criterion=criterion, impl=impl), (h, w, b), fast_mode=True
    )


# ----------------------------------------------------------------------------- noise distributions


@pytest.mark.parametrize("cls, kernel", _cases("noise"))
def test_noise_distribution_is_its_reference_and_a_distribution(cls, kernel):
    noise = example(cls)
    counts = _data()[4] + 1.0  # every class seen: a noise may refuse a class it could never draw
    probs = noise.distribution(V, counts, None)
    torch.testing.assert_close(probs, noise.reference(V, counts, None))
    assert probs.shape == (V,) and probs.dtype == torch.float64 and bool((probs > 0).all())
    assert math.isclose(float(probs.sum()), 1.0, rel_tol=1e-9)
    draws = torch.multinomial(probs.float(), 4000, replacement=True, generator=torch.Generator().manual_seed(0))
    frequencies = torch.bincount(draws, minlength=V).double() / 4000  # the draw follows D
    assert float((frequencies - probs).abs().max()) < 0.05


# ----------------------------------------------------------------------------- continuous losses


# the settings every continuous loss runs in: its defaults, its `example` parameters, each of its `variants`, and its
# example with an output vocabulary
def _continuous_settings(cls: type) -> dict[str, tuple[dict, bool]]:
    """{setting: (the loss's parameters, whether an output vocabulary restricts the rows)}."""
    out = {"defaults": ({}, False), "example": (dict(cls.example), False)}
    out.update({f"variant-{i}": (dict(v), False) for i, v in enumerate(cls.variants)})
    out["output-vocabulary"] = (dict(cls.example), True)
    return out


def _continuous_batch(candidates: bool) -> ContinuousBatch:
    g = torch.Generator().manual_seed(3)
    n, d, v = 7, 6, 13
    table = F.normalize(torch.randn(v, d, generator=g, dtype=torch.float64), dim=1)  # (V, d) unit rows
    pred = (torch.randn(n, d, generator=g, dtype=torch.float64) * 3).requires_grad_()  # (n, d)
    ids = torch.tensor([0, 4, 4, 9, 12, 2, 9])  # repeated targets: in-batch candidates are the distinct ones
    mask = torch.arange(v) % 3 != 1 if candidates else None  # word 4 is outside, and a target: always a candidate
    return ContinuousBatch(pred, ids, table, scale=4.0, candidates=mask)


def _continuous_cases() -> list:
    return [pytest.param(cls, setting, id=f"{cls.name}-{setting}") for cls in COMPONENTS["continuous_loss"]
            for setting in _continuous_settings(cls)]  # fmt: skip


@pytest.mark.parametrize("cls, setting", _continuous_cases())
def test_continuous_loss_equals_its_reference(cls, setting):
    """`row_losses` against the naive `reference`, in value and gradient (from the same random state: the random
    negatives and the extra in-batch draws are drawn alike), and float64 gradcheck of `row_losses`."""
    parameters, candidates = _continuous_settings(cls)[setting]
    loss, batch = cls(**parameters), _continuous_batch(candidates)

    def row_losses_of(pred):
        torch.manual_seed(11)
        return loss.row_losses(dataclasses.replace(batch, pred=pred))

    got = row_losses_of(batch.pred)
    torch.manual_seed(11)
    want = loss.reference(batch)
    assert got.shape == want.shape == batch.ids.shape
    torch.testing.assert_close(got, want, rtol=1e-7, atol=1e-9)
    weights = torch.linspace(0.5, 1.5, batch.ids.numel(), dtype=torch.float64)
    (a,) = torch.autograd.grad((got * weights).sum(), batch.pred)
    (e,) = torch.autograd.grad((want * weights).sum(), batch.pred)
    torch.testing.assert_close(a, e, rtol=1e-6, atol=1e-9)
    if cls.exact_gradient:  # SMD's detached negative moves with û: its numerical gradient differs by design
        assert torch.autograd.gradcheck(row_losses_of, (batch.pred,), fast_mode=True)


def test_the_continuous_losses_are_the_family_s_choices():
    from hf_heads.heads import ContinuousHeadOptions

    for cls in COMPONENTS["continuous_loss"]:
        assert cls.title
    built_in = list(REGISTRIES["continuous_loss"])
    assert built_in[0] == "vmf" and "cosine-softmax" in built_in
    with pytest.raises(ValueError, match=r"loss='no-such-loss' is not allowed; allowed: 'vmf', 'syn-margin-proj"):
        ContinuousHeadOptions(loss="no-such-loss")


# ----------------------------------------------------------------------------- what every component must have


@pytest.mark.parametrize("kind", list(REGISTRIES))
def test_every_component_builds_from_its_config_value_and_names_its_parameters(kind):
    for cls in COMPONENTS[kind]:
        component = example(cls)
        assert dataclasses.is_dataclass(component) and cls.name
        for field in dataclasses.fields(component):
            assert field.name in component.parameters()


@pytest.mark.parametrize(
    "base, reference", [(Margin, "phi"), (WordNorm, "reference"), (ContextNorm, "reference"),
                        (SamplingMethod, "reference"), (Noise, "reference"), (Criterion, "reference")],
)  # fmt: skip
def test_registering_a_component_without_its_reference_is_an_error(base, reference):
    @dataclasses.dataclass(frozen=True)
    class NoReference(base):
        name: ClassVar[str] = "no-reference"

    kind = base.kind
    with pytest.raises(TypeError, match=f"does not define {reference}: every {kind} component defines its reference"):
        register(kind)(NoReference)
    assert "no-reference" not in REGISTRIES[kind]

    class NotFrozen(base):
        name: ClassVar[str] = "not-frozen"

    with pytest.raises(TypeError, match="must be a frozen dataclass"):
        register(kind)(NotFrozen)


def test_registering_a_continuous_loss_without_its_reference_is_an_error():
    @dataclasses.dataclass(frozen=True)
    class NoReference(ContinuousLoss):
        name: ClassVar[str] = "no-reference"

        def row_losses(self, batch):
            return batch.pred.norm(dim=-1)

    with pytest.raises(TypeError, match="does not define reference: every continuous_loss component defines its ref"):
        register("continuous_loss")(NoReference)
    assert "no-reference" not in REGISTRIES["continuous_loss"]


def test_a_misspelled_component_kind_is_refused_naming_every_kind():
    """A base class or a component declared for an unknown kind is refused with the kinds that exist, spelled out."""
    kinds = "margin, word_norm, context_norm, sampling_method, noise, criterion, continuous_loss, kernel"
    with pytest.raises(ValueError) as base_err:
        component_base("critrion")
    assert str(base_err.value) == f"unknown component kind 'critrion'; kinds: {kinds}"
    with pytest.raises(ValueError) as component_err:
        register("critrion")
    assert str(component_err.value) == f"unknown component kind 'critrion'; kinds: {kinds}, family"


def test_a_chunk_kernel_is_a_component_and_a_head_records_where_its_kernel_comes_from():
    @dataclasses.dataclass(frozen=True)
    class LossOnly(ChunkKernel):
        name: ClassVar[str] = "loss-only"

        def loss(self, h, w, b, y, t, opts, lse=None, pred=None, ent=None):
            return torch.zeros(h.shape[0])

    with pytest.raises(
        TypeError, match="does not define available, loss_and_grads: every kernel component defines wh"
    ):
        register("kernel")(LossOnly)
    assert "loss-only" not in CHUNK_KERNELS

    class Written(EagerKernel):  # a kernel class as written before kernels were components: not a dataclass
        name = "user-eager"

    head = {"family": "softmax", "chunk_kernel": "user-eager", "chunk_size": 4}
    try:
        register_kernel(Written)
        assert list(CHUNK_KERNELS)[-1] == "user-eager" and CHUNK_KERNELS["user-eager"].name == "user-eager"
        assert component_modules(head) == {"chunk_kernel": __name__}  # saved with the config, copied with the model
        assert component_modules({**head, "chunk_kernel": "eager"}) == component_modules({"family": "softmax"}) == {}
        h, y = torch.randn(10, 6, dtype=torch.float64), torch.randint(0, 13, (10,))
        w = torch.randn(13, 6, dtype=torch.float64)
        mine = chunked(h, w, None, y, chunk_size=4, kernel="user-eager")
        torch.testing.assert_close(mine, F.cross_entropy(h @ w.T, y))
    finally:
        REGISTRIES["kernel"].pop("user-eager", None)
    with pytest.raises(ValueError, match="chunk_kernel='user-eager' is not allowed; allowed: 'eager', 'compiled'"):
        component_modules(head)


def test_a_component_has_any_number_of_parameters_each_checked_and_named():
    arc_cos = next(cls for cls in COMPONENTS["margin"] if cls.name == "toy-arc-cos")
    margin = arc_cos(m1=0.2, m2=0.1)
    cos = torch.tensor([0.5], dtype=torch.float64)
    torch.testing.assert_close(margin.safe_phi(cos), torch.cos(torch.acos(cos) + 0.2) - 0.1)
    with pytest.raises(ValueError, match=r"m2=-0.1 must be >= 0"):
        arc_cos(m1=0.2, m2=-0.1)
    assert math.isclose(margin.m1, 0.2)
