"""The one loss entry point, `output_loss(rows, loss, kernel=...)` (hf_heads.losses.entry): every `OutputLoss`
computes what its loss function computes with the same options (forward and backward), and its dense naive form;
the kernel is an explicit argument (the environment only when none is given); a loss that runs no kernel refuses
one; the heads pass the kernel their `chunk_kernel` option names."""

from __future__ import annotations

import dataclasses

import pytest
import torch
import torch.nn.functional as F

from hf_heads.heads import make_head
from hf_heads.losses import (
    CHUNK_KERNELS,
    CorrectedNLL,
    LargeMarginLoss,
    OptionError,
    OutputLoss,
    OutputRows,
    SampledCriterion,
    SoftmaxLoss,
    SparseSoftmaxLoss,
    corrected_log_probs,
    corrected_nll,
    fused_linear_cross_entropy,
    margin_cross_entropy,
    margin_logits,
    output_loss,
    resolve_scorer,
    sampled_loss,
    sparse_linear_cross_entropy,
    sparse_softmax_cross_entropy,
)
from hf_heads.losses.chunks import KERNEL_ENV
from hf_heads.losses.kernels import EagerKernel

V, H = 13, 6
NOISE = torch.full((V,), 1 / V)
SCORER = resolve_scorer(margin="arc", m=0.2, scale=4.0)


def _dense_margin(h, w, b, y):
    return F.cross_entropy(margin_logits(h, w, b, y, scorer=SCORER), y)


def _dense_corrected(h, w, b, y):
    scores = margin_logits(h, w, b, None, scorer=SCORER.without_margin())
    log_p = corrected_log_probs(scores, criterion="bce", method="is", noise_probs=NOISE, num_samples=4)
    return F.nll_loss(log_p, y)


# every concrete OutputLoss: (the loss, its function called with the same options, its dense naive form or None)
CASES = {
    SoftmaxLoss: (
        SoftmaxLoss(z_loss=0.0, label_smoothing=0.1, chunk_size=3),
        lambda h, w, b, y, **kw: fused_linear_cross_entropy(h, w, b, y, label_smoothing=0.1, chunk_size=3, **kw),
        lambda h, w, b, y: F.cross_entropy(h @ w.T + b, y, label_smoothing=0.1),
    ),
    SparseSoftmaxLoss: (
        SparseSoftmaxLoss(k=4, chunk_size=3),
        lambda h, w, b, y, **kw: sparse_linear_cross_entropy(h, w, b, y, 4, chunk_size=3, **kw),
        lambda h, w, b, y: sparse_softmax_cross_entropy(h @ w.T + b, y, 4),
    ),
    LargeMarginLoss: (
        LargeMarginLoss(scorer=SCORER, chunk_size=3),
        lambda h, w, b, y, **kw: margin_cross_entropy(h, w, b, y, scorer=SCORER, chunk_size=3, **kw),
        _dense_margin,
    ),
    SampledCriterion: (
        SampledCriterion(criterion="ce", method="full", scorer=SCORER, chunk_size=3),
        lambda h, w, b, y, **kw: sampled_loss(h, w, b, y, criterion="ce", method="full", scorer=SCORER, **kw),
        _dense_margin,  # CE over every class (eq. 5) of the margin logits
    ),
    CorrectedNLL: (
        CorrectedNLL(criterion="bce", method="is", num_samples=4, noise_probs=NOISE, scorer=SCORER),
        lambda h, w, b, y, **kw: corrected_nll(
            h, w, b, y, criterion="bce", method="is", num_samples=4, noise_probs=NOISE, scorer=SCORER, **kw
        ),
        _dense_corrected,
    ),
}


def _concrete(cls: type) -> set[type]:
    found = set()
    for sub in cls.__subclasses__():
        found |= _concrete(sub)
        if not getattr(sub, "__abstractmethods__", None) and not sub.__name__.startswith("_"):
            found.add(sub)
    return found


def _data(dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    h = torch.randn(2, 4, H, generator=g, dtype=dtype).requires_grad_()
    w = (torch.randn(V, H, generator=g, dtype=dtype) * 0.5).requires_grad_()
    b = (torch.randn(V, generator=g, dtype=dtype) * 0.1).requires_grad_()
    y = torch.randint(0, V, (2, 4), generator=g)
    y[0, 1] = -100
    return h, w, b, y


def test_every_output_loss_has_a_case_here():
    assert _concrete(OutputLoss) == set(CASES)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("cls", list(CASES), ids=lambda c: c.__name__)
def test_the_entry_point_computes_the_loss_functions_result_and_its_dense_form(cls, reduction):
    loss, function, dense = CASES[cls]
    h, w, b, y = _data()
    got = output_loss(OutputRows(h, w, b, y, reduction=reduction, num_items_in_batch=5), loss)
    want = function(h, w, b, y, reduction=reduction, num_items_in_batch=5)
    torch.testing.assert_close(got, want)
    grads = torch.autograd.grad(got.sum(), (h, w, b))
    torch.testing.assert_close(grads, torch.autograd.grad(want.sum(), (h, w, b)))
    if reduction == "mean":  # the dense form averages over the 7 counted rows
        dense_loss = dense(h.reshape(-1, H), w, b, y.reshape(-1))
        torch.testing.assert_close(got * 5 / 7, dense_loss, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("cls", list(CASES), ids=lambda c: c.__name__)
def test_the_entry_point_passes_a_float64_gradcheck(cls):
    loss, _, _ = CASES[cls]
    h, w, b, y = _data(torch.float64, seed=1)
    loss = dataclasses.replace(loss, **({"scorer": SCORER} if "scorer" in loss.options() else {}))
    assert torch.autograd.gradcheck(lambda h, w, b: output_loss(OutputRows(h, w, b, y), loss), (h, w, b))


def test_the_kernel_is_an_explicit_argument(monkeypatch):
    """`kernel=` runs the kernel named (a `ChunkKernel` as it is) whatever HF_HEADS_CHUNK_KERNEL says; without it the
    environment's; a loss that runs no kernel for its rows refuses one, naming why."""
    ran = []

    class Spy(EagerKernel):
        def loss_and_grads(self, *args, **kwargs):
            ran.append(self.name)
            return super().loss_and_grads(*args, **kwargs)

    h, w, b, y = _data()
    rows = OutputRows(h, w, b, y)
    monkeypatch.setenv(KERNEL_ENV, "fast")  # not a kernel: read only where no kernel is given
    for loss in (CASES[SoftmaxLoss][0], CASES[LargeMarginLoss][0], CASES[SampledCriterion][0]):
        ran.clear()
        output_loss(rows, loss, kernel=Spy())
        assert ran == ["eager"] * 3  # the 7 counted rows in chunks of 3, 3 and 1
    with pytest.raises(OptionError, match="HF_HEADS_CHUNK_KERNEL='fast' is not a chunk kernel"):
        output_loss(rows, CASES[SoftmaxLoss][0])
    with pytest.raises(OptionError, match="kernel='eager' is not used by the corrected NLL"):
        output_loss(rows, CASES[CorrectedNLL][0], kernel="eager")
    sampling = SampledCriterion(criterion="ce", method="is", num_samples=4, noise_probs=NOISE)
    assert not sampling.runs_kernel(rows) and CASES[SampledCriterion][0].runs_kernel(rows)
    with pytest.raises(OptionError, match="kernel='eager' is for method='full'"):
        output_loss(rows, sampling, kernel="eager")


def test_rows_and_losses_are_checked_and_frozen():
    h, w, b, y = _data()
    with pytest.raises(OptionError, match="reduction='avg' is not allowed"):
        OutputRows(h, w, b, y, reduction="avg")
    with pytest.raises(TypeError, match="rows: expected an OutputRows, got tuple"):
        output_loss((h, w, b, y), SoftmaxLoss())
    with pytest.raises(TypeError, match="loss: expected an OutputLoss"):
        output_loss(OutputRows(h, w, b, y), "softmax")
    with pytest.raises(dataclasses.FrozenInstanceError):
        SoftmaxLoss().z_loss = 1.0
    with pytest.raises(TypeError):
        SoftmaxLoss(0.1)  # keyword arguments only


def test_a_head_passes_the_kernel_its_option_names(monkeypatch):
    """`OutputHead.kernel_for`: the head's `chunk_kernel` option, unless HF_HEADS_CHUNK_KERNEL names another; the
    automatic choice without either; None for a loss that runs no kernel (a sampling method's K candidates). The
    heads' losses receive it as `output_loss`'s argument (no ambient state)."""
    monkeypatch.delenv(KERNEL_ENV, raising=False)
    seen = []
    real = output_loss

    def spy(rows, loss, *, kernel=None):
        seen.append(None if kernel is None else kernel.name)
        return real(rows, loss, kernel=kernel)

    monkeypatch.setattr("hf_heads.heads.discrete.output_loss", spy)
    h, _, _, y = _data()
    for family, options in (("softmax", {}), ("margin", {"margin": "cos", "m": 0.1}), ("sparse", {"k": 4})):
        head = make_head(H, V, {"family": family, "chunk_kernel": "compiled", **options}).train()
        rows = OutputRows(h, head.weight, head.bias, y)
        assert head.kernel_for(SoftmaxLoss(), rows) is CHUNK_KERNELS["compiled"]
        head.loss(h, y)
        head.eval().loss(h, y)
        assert seen[-2:] == ["compiled", "compiled"], family
        monkeypatch.setenv(KERNEL_ENV, "eager")
        head.loss(h, y)
        assert seen[-1] == "eager"
        monkeypatch.delenv(KERNEL_ENV)
    plain = make_head(H, V, {"family": "softmax"})
    assert plain.kernel_for(SoftmaxLoss(), OutputRows(h, plain.weight, plain.bias, y)).name == "eager"  # on a CPU
    sampled = make_head(H, V, {"family": "sampled", "criterion": "ce", "method": "is", "num_samples": 4}).train()
    sampled.set_word_counts(torch.ones(V))
    sampled.loss(h, y)
    assert seen[-1] is None
