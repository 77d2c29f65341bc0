"""Property tests (hypothesis) over every loss family: finite for any finite input, the softmax limits,
the margin invariances, ignored rows, reductions and num_items_in_batch, and half-precision inputs."""

import math

import pytest
import torch
import torch.nn.functional as F
from conftest import chunked, with_impl
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hf_heads.components import REGISTRIES, component_config
from hf_heads.losses import presets, sparse_softmax_cross_entropy, syn_margin_loss, vmf_nll

margin_cross_entropy = with_impl(presets.margin_cross_entropy)
sampled_loss = with_impl(presets.sampled_loss)

SETTINGS = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
# from the registries (a component registered later is sampled too): every margin type with its example parameters,
# every word norm x context norm with ArcFace, the face-recognition scale; every sampling method with CE and BCE
MARGINS = [
    *(dict(margin=component_config(cls(**cls.example))) for cls in REGISTRIES["margin"].values()),
    *(dict(margin="arc", m=0.5, word_norm=w, context_norm=c) for w in REGISTRIES["word_norm"]
      for c in REGISTRIES["context_norm"]),
    dict(margin="cos", m=0.3, scale=30.0),
]  # fmt: skip
SAMPLED = [(c, m) for c in ("ce", "bce") for m, cls in REGISTRIES["sampling_method"].items() if cls.draws_samples]


def _inputs(seed: int, n: int, v: int, h: int, scale: float, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    hidden = (torch.randn(n, h, generator=g) * scale).to(dtype)
    weight = (torch.randn(v, h, generator=g) * scale).to(dtype)
    bias = (torch.randn(v, generator=g) * scale).to(dtype)
    target = torch.randint(0, v, (n,), generator=g)
    counts = torch.randint(1, 1000, (v,), generator=g).double()
    return hidden, weight, bias, target, counts


case = st.tuples(
    st.integers(0, 10_000),
    st.integers(1, 9),
    st.integers(3, 40),
    st.integers(2, 12),
    st.sampled_from([1e-4, 1e-2, 1.0, 30.0, 1e3]),
)


@SETTINGS
@given(case=case, options=st.sampled_from(MARGINS))
def test_margin_losses_finite_for_any_finite_input(case, options):
    hidden, weight, bias, target, counts = _inputs(*case)
    kw = dict(options, word_counts=counts)  # read by the word norms that need counts
    hidden.requires_grad_()
    loss = margin_cross_entropy(hidden, weight, bias, target, **kw)
    loss.backward()
    assert torch.isfinite(loss) and torch.isfinite(hidden.grad).all()


@SETTINGS
@given(case=case, crit=st.sampled_from(SAMPLED))
def test_sampled_losses_finite_for_any_finite_input(case, crit):
    hidden, weight, bias, target, _ = _inputs(*case)
    v = weight.shape[0]
    hidden.requires_grad_()
    loss = sampled_loss(
        hidden,
        weight,
        bias,
        target,
        criterion=crit[0],
        method=crit[1],
        num_samples=max(1, v // 2),
        noise_probs=torch.full((v,), 1.0 / v),
        generator=torch.Generator().manual_seed(0),
    )
    loss.backward()
    assert torch.isfinite(loss) and torch.isfinite(hidden.grad).all()


@SETTINGS
@given(case=case, k=st.integers(1, 50), smoothing=st.sampled_from([0.0, 0.1]))
def test_sparse_loss_finite_and_k_at_least_v_is_softmax(case, k, smoothing):
    hidden, weight, bias, target, _ = _inputs(*case)
    z = hidden @ weight.T + bias
    loss = sparse_softmax_cross_entropy(z, target, k, label_smoothing=smoothing)
    assert torch.isfinite(loss)
    fused = chunked(hidden, weight, bias, target, top_k=k, label_smoothing=smoothing)
    torch.testing.assert_close(fused, loss, rtol=1e-4, atol=1e-4 * max(1.0, float(loss.abs())))
    if k >= z.shape[1]:
        ce = F.cross_entropy(z, target, label_smoothing=smoothing)
        torch.testing.assert_close(loss, ce, rtol=1e-5, atol=1e-5 * max(1.0, float(ce.abs())))


@SETTINGS
@given(case=case, d=st.integers(2, 300), norm=st.sampled_from([1e-4, 1e-2, 1.0, 50.0, 1e3, 1e5]))
def test_continuous_losses_finite_for_any_norm(case, d, norm):
    g = torch.Generator().manual_seed(case[0])
    pred = F.normalize(torch.randn(case[1], d, generator=g), dim=-1) * norm
    target = F.normalize(torch.randn(case[1], d, generator=g), dim=-1)
    pred.requires_grad_()
    for loss in (
        vmf_nll(pred, target),
        syn_margin_loss(pred, target, negative="projection"),
        syn_margin_loss(pred, target, negative="difference"),
    ):
        (grad,) = torch.autograd.grad(loss, pred)
        assert torch.isfinite(loss) and torch.isfinite(grad).all()


@SETTINGS
@given(seed=st.integers(0, 10_000), scale=st.sampled_from([1.0, 16.0, 64.0]), kind=st.sampled_from(["cos", "arc"]))
def test_cosface_arcface_with_zero_margin_equal_normalised_softmax(seed, scale, kind):
    hidden, weight, bias, target, _ = _inputs(seed, 6, 11, 5, 1.0)
    ours = margin_cross_entropy(hidden, weight, None, target, margin=kind, m=0.0, scale=scale)
    normalised = scale * F.normalize(hidden, dim=-1) @ F.normalize(weight, dim=-1).T
    torch.testing.assert_close(ours, F.cross_entropy(normalised, target), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(
        margin_cross_entropy(hidden, weight, bias, target),
        F.cross_entropy(hidden @ weight.T + bias, target),
        rtol=1e-5,
        atol=1e-5,
    )


@SETTINGS
@given(seed=st.integers(0, 10_000), v=st.integers(3, 30), target_class=st.integers(0, 2))
def test_importance_sampling_over_every_other_class_is_full_ce(seed, v, target_class):
    """The K = V - 1 limit of CE-IS: every class but the target drawn once, uniform D = 1/V. The target is kept
    in the denominator with the samples' transform s - log(K·D), so the denominator is Σ_c exp(s_c) · V/(V-1):
    CE-IS = CE + log(V / (V - 1)) exactly."""
    hidden, weight, bias, _, _ = _inputs(seed, 7, v, 6, 1.0)
    target = torch.full((7,), target_class)
    others = torch.tensor([c for c in range(v) if c != target_class])
    loss = sampled_loss(
        hidden,
        weight,
        bias,
        target,
        criterion="ce",
        method="is",
        num_samples=v - 1,
        noise_probs=torch.full((v,), 1.0 / v),
        samples=others,
    )
    expected = F.cross_entropy(hidden @ weight.T + bias, target) + math.log(v / (v - 1))
    torch.testing.assert_close(loss, expected, rtol=1e-5, atol=1e-5)


LOSSES = {
    "margin": lambda h, w, b, y, **kw: margin_cross_entropy(h, w, b, y, margin="arc", m=0.2, **kw),
    "sparse": lambda h, w, b, y, **kw: chunked(h, w, b, y, top_k=3, **kw),
    "sampled": lambda h, w, b, y, **kw: sampled_loss(
        h,
        w,
        b,
        y,
        criterion="bce",
        method="nce",
        num_samples=4,
        noise_probs=torch.full((9,), 1 / 9),
        samples=torch.tensor([0, 2, 2, 5]),
        **kw,
    ),
}


@SETTINGS
@given(seed=st.integers(0, 10_000), family=st.sampled_from(list(LOSSES)), extra=st.integers(1, 50))
def test_ignored_rows_reductions_and_num_items(seed, family, extra):
    hidden, weight, bias, target, _ = _inputs(seed, 8, 9, 5, 1.0)
    fn = LOSSES[family]
    y = target.clone()
    y[[1, 4]] = -100
    rows = fn(hidden, weight, bias, y, reduction="none")
    assert rows.shape == (8,) and rows[1] == 0 and rows[4] == 0
    kept = fn(hidden[y != -100], weight, bias, y[y != -100], reduction="none")
    torch.testing.assert_close(rows[y != -100], kept, rtol=1e-5, atol=1e-6)
    garbage = hidden.clone()
    garbage[[1, 4]] = 1e6  # what an ignored row holds does not matter
    torch.testing.assert_close(fn(garbage, weight, bias, y), fn(hidden, weight, bias, y), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(fn(hidden, weight, bias, y, reduction="sum"), rows.sum(), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(fn(hidden, weight, bias, y), rows.sum() / 6, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(
        fn(hidden, weight, bias, y, num_items_in_batch=6 + extra), rows.sum() / (6 + extra), rtol=1e-5, atol=1e-6
    )


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("family", ["softmax", "margin", "sparse", "sampled", "vmf", "smp"])
def test_half_precision_inputs_are_computed_in_float32(dtype, family):
    """bf16 / fp16 inputs: no NaN/inf, gradients in the input dtype, and the loss accumulated in float32 is the
    float32 loss of the float32 copies of the half-precision values: to float32 tolerance where the products run in
    float32 (continuous), within 0.2% where the products of h and W run in the inputs' half dtype and only the logits
    are rounded to it (softmax, sparse and margin through hf_heads.losses.fused_linear, the margin's factors in
    float32; the sampled criteria's (N, K) candidate scores; a dropped term or a half-precision softmax is further
    off). The discrete losses return it rounded once to the inputs' dtype by default (torch's rule), float32 with
    `loss_dtype=torch.float32`; the continuous ones return float32."""
    hidden, weight, bias, target, _ = _inputs(3, 16, 40, 8, 3.0)
    hidden, weight, bias = hidden.to(dtype), weight.to(dtype), bias.to(dtype)
    discrete = family in ("softmax", "sparse", "margin", "sampled")

    def loss(h, w, b, **kw):
        if family == "softmax":
            return chunked(h, w, b, target, **kw)
        if family == "margin":
            return margin_cross_entropy(h, w, b, target, margin="cos", m=0.2, scale=30.0, **kw)
        if family == "sparse":
            return chunked(h, w, b, target, top_k=5, label_smoothing=0.1, **kw)
        if family == "sampled":
            return sampled_loss(
                h,
                w,
                b,
                target,
                criterion="ce",
                method="cps",
                num_samples=8,
                noise_probs=torch.full((40,), 1 / 40),
                samples=torch.arange(0, 40, 5),
                **kw,
            )
        table = F.normalize(w[:, :8].float(), dim=-1)
        return vmf_nll(h, table[target]) if family == "vmf" else syn_margin_loss(h, table[target])

    h = hidden.clone().requires_grad_()
    half = loss(h, weight, bias, **({"loss_dtype": torch.float32} if discrete else {}))
    half.backward()
    full = loss(hidden.float(), weight.float(), bias.float())
    assert half.dtype == torch.float32 and torch.isfinite(half) and torch.isfinite(h.grad).all()
    assert h.grad.dtype == dtype
    torch.testing.assert_close(half, full, rtol=2e-3 if discrete else 1e-5, atol=1e-6)
    if discrete:  # by default: the same float32 loss, rounded once to the inputs' dtype
        assert torch.equal(loss(hidden, weight, bias), half.detach().to(dtype))


def _bad_values(annotation: str) -> list:
    if "bool" in annotation:
        return ["yes", 1]
    if "int" in annotation:
        return [-5, 2.5, "three"]
    if "float" in annotation:
        return [-1.0, float("nan"), "x"]
    return ["bogus", 3]


def _option_cases():
    from dataclasses import fields

    from hf_heads.heads import FAMILIES

    for family, entry in FAMILIES.items():
        for f in fields(entry.options):
            for value in _bad_values(str(f.type)):
                yield family, f.name, value


@pytest.mark.parametrize("family, name, value", list(_option_cases()))
def test_every_head_option_error_names_the_field(family, name, value):
    """Each option of each family, given a value of the wrong type or outside its range, is refused with a
    ValueError that names `head.<option>`; a true / false option says that it takes nothing else."""
    from dataclasses import fields

    from hf_heads.heads import FAMILIES, head_options

    with pytest.raises(ValueError) as err:
        head_options({"family": family, name: value})
    assert f"head.{name}" in str(err.value), str(err.value)
    if "bool" in next(str(f.type) for f in fields(FAMILIES[family].options) if f.name == name):
        assert str(err.value) == f"head.{name}={value!r} must be true or false"
