"""Large-margin softmax (margin paper eqs. 5-14) against a literal reference, forward and backward; the
margin spec, the option errors and the row bookkeeping every loss shares."""

import dataclasses
import math
import pickle

import pytest
import torch
import torch.nn.functional as F
from conftest import chunked, with_impl
from references import reference_margin_logits

from hf_heads.data import frequency_rank
from hf_heads.losses import (
    CrossEntropy,
    Impl,
    OptionError,
    OutputLayerLoss,
    Scorer,
    arc_phi,
    lsm_psi,
    margin_logits,
    output_loss,
    presets,
    sparse_softmax_cross_entropy,
    validate_margin_options,
    vmf_nll,
)
from hf_heads.losses import noise as noise_module
from hf_heads.losses.noise import frequency_ranks
from hf_heads.losses.reduction import reduce_rows, valid_rows
from hf_heads.training.trainer import safe_exp

margin_cross_entropy = with_impl(presets.margin_cross_entropy)
sampled_loss = with_impl(presets.sampled_loss)

N, H, V = 29, 6, 17


OPTIONS = [
    dict(),
    dict(margin="cos", m=0.3),
    dict(margin="arc", m=0.5),
    dict(margin="lsm", m=1),
    dict(margin="lsm", m=2),
    dict(margin="lsm", m=4),
    dict(margin="cos", m=0.35, scale=8.0),
    dict(margin="arc", m=0.5, scale=8.0),
    dict(margin="none", m=0.0, scale=8.0),
    *[dict(word_norm=w) for w in ("uniform", "log-rank", "unigram", "log-unigram")],
    dict(context_norm="max-norm"),
    dict(margin="arc", m=0.2, word_norm="log-unigram", context_norm="max-norm"),
    dict(margin="cos", m=0.1, word_norm="log-rank", context_norm="max-norm"),
    dict(margin="lsm", m=3, word_norm="unigram"),
]


def _inputs(dtype=torch.float64, seed=0):
    g = torch.Generator().manual_seed(seed)
    h = torch.randn(N, H, dtype=dtype, generator=g).requires_grad_()
    W = (torch.randn(V, H, dtype=dtype, generator=g) * 0.7).requires_grad_()
    b = (torch.randn(V, dtype=dtype, generator=g) * 0.1).requires_grad_()
    y = torch.randint(0, V, (N,), generator=g)
    counts = torch.randint(0, 500, (V,), generator=g).to(dtype)
    counts[3] = 0  # a word never seen in training
    return h, W, b, y, counts


def _kw(opts, counts):
    return {**opts, "word_counts": counts if opts.get("word_norm", "no-mod") != "no-mod" else None}


@pytest.mark.parametrize("opts", OPTIONS, ids=lambda o: "-".join(f"{k}={v}" for k, v in o.items()) or "plain")
def test_logits_and_loss_match_reference(opts):
    h, W, b, y, counts = _inputs()
    ref = reference_margin_logits(h, W, b, y, counts=counts, **opts)
    ours = margin_logits(h, W, b, y, **_kw(opts, counts))
    torch.testing.assert_close(ours, ref, rtol=1e-10, atol=1e-10)
    ref_loss = F.cross_entropy(ref, y)
    loss = margin_cross_entropy(h, W, b, y, chunk_size=4, **_kw(opts, counts))
    torch.testing.assert_close(loss, ref_loss, rtol=1e-10, atol=1e-10)
    g_ref = torch.autograd.grad(ref_loss, (h, W, b))
    g_ours = torch.autograd.grad(loss, (h, W, b))
    for a, c in zip(g_ours, g_ref, strict=False):
        torch.testing.assert_close(a, c, rtol=1e-8, atol=1e-10)
    no_margin = margin_logits(h, W, b, None, **_kw(opts, counts))
    torch.testing.assert_close(no_margin, reference_margin_logits(h, W, b, None, counts=counts, **opts))


SPEC_OPTIONS = [
    dict(margin="arc", m=0.2, word_norm="log-unigram", context_norm="max-norm", gain=1.5),
    dict(margin="cos", m=0.3, gain=2.0, logit_multiplier=0.5),
    dict(margin="lsm", m=2, word_norm="unigram", logit_multiplier=2.0),
]


@pytest.mark.parametrize("opts", SPEC_OPTIONS, ids=lambda o: "-".join(f"{k}={v}" for k, v in o.items()))
def test_gain_and_the_checkpoints_multiplier_match_reference(opts):
    """The warm-start gain multiplies g(i) only; the checkpoint's output multiplier every logit, the bias included
    (module docstring): logits, loss and gradients against the literal reference."""
    h, W, b, y, counts = _inputs()
    spec = Scorer.from_options(**opts)
    ref_opts = {k: v for k, v in opts.items() if k != "logit_multiplier"}
    ref = reference_margin_logits(h, W, b, y, counts=counts, multiplier=opts.get("logit_multiplier", 1.0), **ref_opts)
    wc = counts if opts.get("word_norm", "no-mod") != "no-mod" else None
    torch.testing.assert_close(margin_logits(h, W, b, y, scorer=spec, word_counts=wc), ref, rtol=1e-10, atol=1e-10)
    ref_loss = F.cross_entropy(ref, y)
    loss = margin_cross_entropy(h, W, b, y, chunk_size=4, scorer=spec, word_counts=wc)
    torch.testing.assert_close(loss, ref_loss, rtol=1e-10, atol=1e-10)
    for a, c in zip(torch.autograd.grad(loss, (h, W, b)), torch.autograd.grad(ref_loss, (h, W, b)), strict=True):
        torch.testing.assert_close(a, c, rtol=1e-8, atol=1e-10)


@pytest.mark.parametrize("m", [0.5, 1.0])
def test_arcface_past_pi_is_continued_monotonically(m):
    """Rows whose target angle θ is beyond π − m: φ = −2 − cos(θ + m) (so φ keeps decreasing in θ), against the
    reference; the rows span θ over (0, π)."""
    theta = torch.linspace(0.01, math.pi - 0.01, 41, dtype=torch.float64)  # (the ends: sin θ is clamped there)
    W = torch.tensor([[1.0, 0.0], [0.0, 1.0]], dtype=torch.float64)
    h = torch.stack([torch.cos(theta), torch.sin(theta)], dim=1) * 2.0  # angle θ to class 0
    y = torch.zeros(theta.shape[0], dtype=torch.long)
    b = torch.zeros(2, dtype=torch.float64)
    assert bool((theta > math.pi - m).sum() >= 5)
    ours = margin_logits(h, W, b, y, margin="arc", m=m)[:, 0]  # (41,) = ‖h‖‖W_0‖·φ(θ)
    torch.testing.assert_close(
        ours, reference_margin_logits(h, W, b, y, margin="arc", m=m)[:, 0], rtol=1e-9, atol=1e-9
    )
    assert bool((ours[1:] < ours[:-1]).all()), "φ must decrease over θ ∈ [0, π]"


@pytest.mark.parametrize("opts", OPTIONS, ids=lambda o: "-".join(f"{k}={v}" for k, v in o.items()) or "plain")
def test_gradcheck_float64(opts):
    h, W, b, y, counts = _inputs()
    y[5] = -100
    kw = _kw(opts, counts)

    def mean_loss(h, W, b):
        return margin_cross_entropy(h, W, b, y, chunk_size=7, **kw)

    def weighted_rows(h, W, b):
        rows = margin_cross_entropy(h, W, b, y, chunk_size=7, reduction="none", **kw)
        return (rows * torch.linspace(0.5, 2.0, N, dtype=rows.dtype)).sum()

    assert torch.autograd.gradcheck(mean_loss, (h, W, b))
    assert torch.autograd.gradcheck(weighted_rows, (h, W, b))


@pytest.mark.parametrize("reduction", ["mean", "none"])
def test_the_norms_gradient_goes_into_the_fused_losss_weight_gradient(reduction):
    """The norms' and target rows' part of d W is added into the fused loss's (V, H) gradient in place: the
    backward allocates no (V, H) buffer (the fused loss's is allocated before it: in the forward for "mean", in its
    own backward for "none", one), and d W is still the reference's (float64), up to float32 rounding relative to
    the gradient's size: "none" sums 29 rows, a gradient ~29x the mean's. The inputs come from their own generator,
    not the global one, whose state depends on the tests run before (a fixed tolerance of 1e-6 failed "none" on 15 of
    300 draws: errors of up to 2.1e-6 of the largest entry, for either reduction)."""
    g = torch.Generator().manual_seed(0)
    big_w = torch.randn(2048, 32, generator=g).requires_grad_()  # (V, H): larger than every other buffer of the step
    big_h = torch.randn(N, 32, generator=g).requires_grad_()
    y = torch.randint(0, 2048, (N,), generator=g)
    counts = torch.randint(1, 500, (2048,), generator=g).float()
    kw = dict(margin="arc", m=0.2, word_norm="log-unigram", context_norm="max-norm")
    loss = margin_cross_entropy(big_h, big_w, None, y, reduction=reduction, word_counts=counts, **kw).sum()
    with torch.profiler.profile(profile_memory=True) as prof:
        loss.backward()
    vh_bytes = big_w.numel() * big_w.element_size()
    allocations = [e.name for e in prof.events() if e.self_cpu_memory_usage >= vh_bytes]
    assert len(allocations) == (0 if reduction == "mean" else 1), allocations
    w64 = big_w.detach().double().requires_grad_()
    logits = margin_logits(big_h.detach().double(), w64, None, y, word_counts=counts.double(), **kw)
    want = torch.autograd.grad(F.cross_entropy(logits, y, reduction="sum" if reduction == "none" else "mean"), w64)[0]
    torch.testing.assert_close(big_w.grad.double(), want, rtol=1e-4, atol=1e-5 * float(want.abs().max()))


def test_a_weight_used_elsewhere_too_gets_both_gradients():
    """W also in another term of the loss (tied embeddings): autograd sums that gradient with the margin loss's,
    whose in-place norms' gradient never writes into a buffer it does not own."""
    h, W, b, y, counts = _inputs()
    kw = _kw(dict(margin="arc", m=0.2, word_norm="unigram", context_norm="max-norm"), counts)
    for other in (lambda w: (w**2).sum(), lambda w: w[y].sum(), lambda w: w.sum() * 0.5):
        got = torch.autograd.grad(other(W) + margin_cross_entropy(h, W, b, y, **kw), W)[0]
        got_after = torch.autograd.grad(margin_cross_entropy(h, W, b, y, **kw) + other(W), W)[0]
        want = torch.autograd.grad(other(W) + F.cross_entropy(margin_logits(h, W, b, y, **kw), y), W)[0]
        torch.testing.assert_close(got, want)
        torch.testing.assert_close(got_after, want)


@pytest.mark.parametrize("opts", OPTIONS[:8], ids=str)
def test_float32_matches_float64_reference(opts):
    h, W, b, y, counts = _inputs()
    ref = F.cross_entropy(reference_margin_logits(h, W, b, y, counts=counts, **opts), y)
    h32, W32, b32 = (t.detach().float().requires_grad_() for t in (h, W, b))
    loss = margin_cross_entropy(h32, W32, b32, y, **_kw(opts, counts.float()))
    assert loss.dtype == torch.float32
    torch.testing.assert_close(loss.double(), ref.detach(), rtol=1e-5, atol=1e-5)


def test_plain_case_equals_torch_cross_entropy():
    h, W, b, y, _ = _inputs(torch.float32)
    y[:3] = -100
    ref = F.cross_entropy(h @ W.T + b, y)
    ours = margin_cross_entropy(h, W, b, y, margin="none", scale=None, word_norm="no-mod", context_norm="no-mod")
    torch.testing.assert_close(ours, ref)
    torch.testing.assert_close(torch.autograd.grad(ours, (h, W, b)), torch.autograd.grad(ref, (h, W, b)))


@pytest.mark.skipif(
    not hasattr(torch.nn, "LinearCrossEntropyOptions"), reason="torch's linear_cross_entropy options: torch >= 2.13"
)
def test_torch_linear_cross_entropy_agrees():
    h, W, b, y, _ = _inputs(torch.float32)
    opts = torch.nn.LinearCrossEntropyOptions()
    ref = F.linear_cross_entropy(h, W, y, linear_bias=b, options=opts)
    torch.testing.assert_close(chunked(h, W, b, y), ref)


@pytest.mark.parametrize("chunk", [1, 3, N, 1000])
def test_chunked_equals_unchunked(chunk):
    h, W, b, y, counts = _inputs()
    kw = dict(margin="arc", m=0.3, word_norm="log-unigram", context_norm="max-norm", word_counts=counts)
    full = margin_cross_entropy(h, W, b, y, chunk_size=N, **kw)
    part = margin_cross_entropy(h, W, b, y, chunk_size=chunk, **kw)
    torch.testing.assert_close(part, full, rtol=1e-12, atol=1e-12)
    for a, c in zip(torch.autograd.grad(part, (h, W, b)), torch.autograd.grad(full, (h, W, b)), strict=False):
        torch.testing.assert_close(a, c, rtol=1e-12, atol=1e-12)


def test_reductions_and_num_items_in_batch():
    h, W, b, y, _ = _inputs()
    y[:4] = -100
    kw = dict(margin="cos", m=0.2)
    rows = margin_cross_entropy(h, W, b, y, reduction="none", **kw)
    assert rows.shape == (N,) and torch.all(rows[:4] == 0)
    total = margin_cross_entropy(h, W, b, y, reduction="sum", **kw)
    mean = margin_cross_entropy(h, W, b, y, reduction="mean", **kw)
    torch.testing.assert_close(rows.sum(), total)
    torch.testing.assert_close(mean, total / (N - 4))
    torch.testing.assert_close(margin_cross_entropy(h, W, b, y, num_items_in_batch=50, **kw), total / 50)


def test_gradient_accumulation_halves_equal_full_batch():
    h, W, b, y, _ = _inputs()
    y[2] = y[20] = -100
    n_items = int((y != -100).sum())
    full = margin_cross_entropy(h, W, b, y, margin="arc", m=0.1)
    g_full = torch.autograd.grad(full, (h, W, b))
    halves = [
        margin_cross_entropy(h[s], W, b, y[s], margin="arc", m=0.1, num_items_in_batch=n_items)
        for s in (slice(0, 10), slice(10, N))
    ]
    g_acc = torch.autograd.grad(halves[0] + halves[1], (h, W, b))
    for a, c in zip(g_acc, g_full, strict=False):
        torch.testing.assert_close(a, c)


def test_all_ignored_gives_zero_loss_and_zero_grads():
    h, W, b, _, counts = _inputs(torch.float32)
    y = torch.full((N,), -100)
    for kw in (
        dict(),
        dict(margin="arc", m=0.5, word_norm="log-unigram", context_norm="max-norm", word_counts=counts),
    ):
        loss = margin_cross_entropy(h, W, b, y, **kw)
        assert loss.item() == 0.0
        grads = torch.autograd.grad(loss, (h, W, b))
        assert all(torch.all(g == 0) for g in grads)


def test_margin_logits_take_any_ignore_index():
    """The rows labelled `ignore_index` get no margin, whatever its value (-100, -1, or a label past the classes)."""
    h, W, b, y, counts = _inputs(torch.float32)
    kw = dict(margin="arc", m=0.5, word_norm="log-unigram", word_counts=counts)
    ignored = torch.arange(N) % 3 == 0
    want = margin_logits(h, W, b, y.masked_fill(ignored, -100), **kw)
    torch.testing.assert_close(want[ignored], margin_logits(h, W, b, **kw)[ignored])  # no margin there
    for index in (-1, W.shape[0] + 5):
        got = margin_logits(h, W, b, y.masked_fill(ignored, index), ignore_index=index, **kw)
        torch.testing.assert_close(got, want)


def test_arcface_monotonic_and_finite_past_pi():
    cos = torch.cos(torch.linspace(0, math.pi, 2001, dtype=torch.float64))
    for m in (0.0, 0.5, 1.0, 2.0):
        phi = arc_phi(cos, m)
        assert torch.all(torch.isfinite(phi))
        assert torch.all(phi[1:] <= phi[:-1] + 1e-12)  # non-increasing in θ
    x = torch.tensor([1.0, -1.0, 1 - 1e-9, -1 + 1e-9], dtype=torch.float32, requires_grad=True)
    (g,) = torch.autograd.grad(arc_phi(x, 0.5).sum(), x)
    assert torch.all(torch.isfinite(g))


def test_lsm_matches_definition_and_is_monotonic():
    theta = torch.linspace(0, math.pi, 1001, dtype=torch.float64)
    for m in (1, 2, 3, 4):
        psi = lsm_psi(torch.cos(theta), m)
        k = torch.clamp(torch.floor(theta * m / math.pi), max=m - 1)
        torch.testing.assert_close(psi, (-1) ** k * torch.cos(m * theta) - 2 * k, rtol=1e-9, atol=1e-9)
        assert torch.all(psi[1:] <= psi[:-1] + 1e-9)
    x = torch.tensor([1.0, -1.0], requires_grad=True)
    (g,) = torch.autograd.grad(lsm_psi(x, 3).sum(), x)
    assert torch.all(torch.isfinite(g))


def test_lsm_m1_and_zero_margins_are_plain():
    h, W, b, y, _ = _inputs()
    plain = margin_cross_entropy(h, W, b, y)
    torch.testing.assert_close(margin_cross_entropy(h, W, b, y, margin="lsm", m=1), plain)
    for margin in ("cos", "arc"):
        torch.testing.assert_close(
            margin_cross_entropy(h, W, b, y, margin=margin, m=0.0, scale=4.0),
            margin_cross_entropy(h, W, b, y, scale=4.0),
        )


def test_larger_margin_larger_loss():
    h, W, b, y, _ = _inputs()
    losses = [margin_cross_entropy(h, W, b, y, margin="cos", m=m, scale=8.0).item() for m in (0.0, 0.1, 0.3)]
    assert losses[0] < losses[1] < losses[2]


def test_module_wrapper_same_as_function():
    h, W, b, y, counts = _inputs()
    scorer = Scorer.from_options(margin="arc", m=0.2, word_norm="log-unigram").given(word_counts=counts)
    mod = OutputLayerLoss(scorer=scorer, reduction="sum")
    ref = margin_cross_entropy(
        h, W, b, y, margin="arc", m=0.2, word_norm="log-unigram", word_counts=counts, reduction="sum"
    )
    torch.testing.assert_close(mod(h, W, b, y), ref)


def test_bfloat16_inputs_computed_in_float32():
    h, W, b, y, _ = _inputs(torch.float32)
    ref = margin_cross_entropy(h, W, b, y, margin="arc", m=0.2)
    out = margin_cross_entropy(h.bfloat16(), W.bfloat16(), b.bfloat16(), y, margin="arc", m=0.2)
    assert out.dtype == torch.bfloat16 and torch.isfinite(out)  # torch's rule: a bf16 loss outside autocast
    torch.testing.assert_close(out.float(), ref, rtol=3e-2, atol=3e-2)


@pytest.mark.parametrize(
    "kwargs, field",
    [
        (dict(margin="lsm", m=1.5), "m=1.5"),
        (dict(margin="lsm", m=0), "m=0"),
        (dict(margin="cos", m=-0.1), "m=-0.1"),
        (dict(margin="arc", m=0.1, scale=0.0), "scale=0.0"),
        (dict(margin="triplet"), "margin='triplet'"),
        (dict(word_norm="zipf"), "word_norm='zipf'"),
        (dict(context_norm="mean"), "context_norm='mean'"),
        (dict(word_norm="log-unigram"), "word_norm='log-unigram' needs word_counts"),
        (dict(word_norm="log-rank"), "word_norm='log-rank' needs word_counts"),
        (dict(word_norm="unigram", word_counts=torch.ones(V + 1)), f"vocabulary has {V}"),
        (dict(scale=8.0, word_norm="uniform", word_counts=torch.ones(V)), "word_norm and context_norm must be"),
    ],
)
def test_bad_options_name_the_field(kwargs, field):
    h, W, b, y, _ = _inputs(torch.float32)
    with pytest.raises(ValueError, match=field.replace("(", r"\(").replace(".", r"\.")):
        margin_cross_entropy(h, W, b, y, **kwargs)


def test_labels_out_of_range():
    h, W, b, y, _ = _inputs(torch.float32)
    y[0] = V
    with pytest.raises(ValueError, match=f"found {V}, allowed 0 <= label < {V}"):
        margin_cross_entropy(h, W, b, y, margin="arc", m=0.1)


@pytest.mark.parametrize("opts", [dict(margin="cos", m=0.3), dict(margin="arc", m=0.2, context_norm="max-norm")])
def test_top_k_with_a_margin_matches_the_sparse_loss_of_the_margin_logits(opts):
    """The chunked pass's dense top-k branch (a replaced target logit with top_k): eq. 5 of the sparse-softmax
    paper over the logits of eq. 13."""
    h, W, b, y, _ = _inputs()
    y[4] = -100
    scorer, impl = Scorer.from_options(**opts), Impl(chunk_size=6)
    ours = output_loss(h, W, b, y, scorer=scorer, criterion=CrossEntropy(top_k=5, label_smoothing=0.1), impl=impl)
    ref = sparse_softmax_cross_entropy(margin_logits(h, W, b, y, **opts), y, 5, label_smoothing=0.1)
    torch.testing.assert_close(ours, ref, rtol=1e-10, atol=1e-10)
    for a, c in zip(torch.autograd.grad(ours, (h, W, b)), torch.autograd.grad(ref, (h, W, b)), strict=True):
        torch.testing.assert_close(a, c, rtol=1e-8, atol=1e-10)
    assert torch.autograd.gradcheck(
        lambda h_, W_, b_: output_loss(h_, W_, b_, y, scorer=scorer, criterion=CrossEntropy(top_k=5), impl=impl),
        (h, W, b),
    )


# ----------------------------------------------------------------------------- the margin spec


def test_spec_gives_the_same_numbers_as_the_keyword_arguments():
    h, W, b, y, counts = _inputs()
    kw = dict(margin="arc", m=0.3, word_norm="log-rank", context_norm="max-norm", gain=1.5)
    spec = Scorer.from_options(**kw)
    assert torch.equal(
        margin_logits(h, W, b, y, scorer=spec, word_counts=counts),
        margin_logits(h, W, b, y, word_counts=counts, **kw),
    )
    assert torch.equal(
        margin_cross_entropy(h, W, b, y, scorer=spec, word_counts=counts),
        margin_cross_entropy(h, W, b, y, word_counts=counts, **kw),
    )
    assert spec.without_margin() == Scorer.from_options(word_norm="log-rank", context_norm="max-norm", gain=1.5)
    assert torch.equal(
        margin_logits(h, W, b, None, scorer=spec, word_counts=counts),
        margin_logits(h, W, b, y, scorer=spec.without_margin(), word_counts=counts),
    )
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.m = 0.5


@pytest.mark.parametrize(
    "kwargs, field, message",
    [
        (dict(margin="lsm", m=1.5), "m", "m=1.5 must be an integer"),
        (dict(margin="cos", m=-1), "m", "m=-1 must be >= 0"),
        (dict(margin="x"), "margin", "margin='x' is not allowed; allowed: 'none', 'cos', 'arc'"),
        (dict(scale=8.0, word_norm="uniform"), "word_norm", "word_norm and context_norm must be 'no-mod'"),
        (dict(scale=8.0, context_norm="max-norm"), "context_norm", "word_norm and context_norm must be 'no-mod'"),
        (dict(gain=0.0), "gain", "gain=0.0 must be > 0"),
    ],
)
def test_spec_is_validated_on_construction(kwargs, field, message):
    with pytest.raises(OptionError, match=message) as err:
        Scorer.from_options(**kwargs)
    assert err.value.field == field and err.value.value == kwargs[field]
    assert str(err.value).startswith(f"{field}={kwargs[field]!r} ")


def test_a_scorer_and_keyword_arguments_do_not_mix():
    h, W, b, y, counts = _inputs()
    spec = Scorer.from_options(margin="cos", m=0.2)
    with pytest.raises(OptionError, match=r"m=0\.3 must be left at its default \(0\.0\) when scorer is given") as err:
        margin_cross_entropy(h, W, b, y, scorer=spec, m=0.3)
    assert err.value.field == "m"
    with pytest.raises(OptionError, match="scale=4.0 must be left at its default"):
        margin_logits(h, W, b, y, scorer=spec, scale=4.0)
    with pytest.raises(OptionError, match="word_norm='log-rank' needs word_counts"):
        margin_cross_entropy(h, W, b, y, scorer=Scorer.from_options(word_norm="log-rank"))
    assert Scorer.from_options(word_norm="log-rank").word_norm.name == "log-rank"  # counts: data, checked at the call


# ----------------------------------------------------------------------------- option errors


def test_option_error_carries_the_field_and_can_be_renamed():
    with pytest.raises(OptionError) as err:
        validate_margin_options("cos", -1, None, "no-mod", "no-mod")
    e = err.value
    assert isinstance(e, ValueError)
    assert (e.field, e.value, e.allowed, e.name) == ("m", -1, "must be >= 0", "m")
    assert str(e) == "m=-1 must be >= 0"
    head = e.renamed("head.m")
    assert str(head) == "head.m=-1 must be >= 0" and (head.field, head.name) == ("m", "head.m")
    assert str(e.renamed("--m")) == "--m=-1 must be >= 0"
    again = pickle.loads(pickle.dumps(head))
    assert (again.field, again.name, str(again)) == ("m", "head.m", "head.m=-1 must be >= 0")
    with pytest.raises(OptionError) as err:
        validate_margin_options("cos", 0.1, None, "log-rank", "no-mod")
    assert err.value.field == "word_norm" and str(err.value).startswith("word_norm='log-rank' needs word_counts")


# ----------------------------------------------------------------------------- shared row bookkeeping


def test_rows_and_reductions():
    with pytest.raises(ValueError, match="hidden has 6 rows but target has 5"):
        valid_rows(torch.zeros(2, 3, 4), torch.zeros(5, dtype=torch.long), -100)
    h, y, valid = valid_rows(torch.zeros(2, 3, 4), torch.tensor([[1, -100, 2], [-100, 0, 0]]), -100)
    assert h.shape == (6, 4) and y.shape == (6,) and valid.tolist() == [True, False, True, False, True, True]
    per_row = torch.tensor([1.0, 2.0, 3.0, 4.0])
    rows = reduce_rows(per_row, valid, (2, 3), "none")
    assert rows.tolist() == [[1.0, 0.0, 2.0], [0.0, 3.0, 4.0]]
    assert reduce_rows(per_row, valid, (2, 3), "sum") == 10.0
    assert reduce_rows(per_row, valid, (2, 3), "mean") == 2.5
    assert reduce_rows(per_row, valid, (2, 3), "mean", 8) == 1.25
    assert reduce_rows(per_row, valid, (2, 3), "mean", torch.tensor(8)) == 1.25
    assert reduce_rows(per_row, valid, (2, 3), "mean", 0) == 10.0  # a divisor is never below 1
    assert reduce_rows(per_row[:0], valid & False, (2, 3), "mean") == 0.0
    assert reduce_rows(per_row, None, (2, 2), "none").shape == (2, 2)


@pytest.mark.parametrize(
    "call",
    [
        lambda h, W, b, y: chunked(h, W, b, y, reduction="x"),
        lambda h, W, b, y: margin_cross_entropy(h, W, b, y, reduction="x"),
        lambda h, W, b, y: sampled_loss(h, W, b, y, criterion="bce", method="full", reduction="x"),
        lambda h, W, b, y: sparse_softmax_cross_entropy(h @ W.T, y, 3, reduction="x"),
        lambda h, W, b, y: vmf_nll(h, h.detach(), reduction="x"),
    ],
)
def test_every_loss_refuses_an_unknown_reduction_with_one_message(call):
    h, W, b, y, _ = _inputs(torch.float32)
    with pytest.raises(OptionError, match="^reduction='x' is not allowed; allowed: 'mean', 'sum', 'none'$"):
        call(h, W, b, y)


def test_the_losses_and_the_data_rank_classes_alike():
    """The losses' `frequency_ranks` (noise, word norms) and the data layer's `frequency_rank` (below the losses, so
    its own) give the same ranks, ties in id order."""
    counts = torch.tensor([5, 50, 0, 20, 50])
    expected = [3, 0, 4, 2, 1]  # ties keep id order
    assert frequency_ranks(counts).tolist() == expected
    assert frequency_ranks(counts.double()).tolist() == expected
    assert noise_module.frequency_ranks is frequency_ranks
    assert frequency_rank(counts).tolist() == expected
    assert frequency_rank(counts.double()).tolist() == expected


def test_safe_exp():
    assert safe_exp(1.0) == math.e
    assert math.isfinite(safe_exp(1e6)) and safe_exp(1e6) == math.exp(700.0)
