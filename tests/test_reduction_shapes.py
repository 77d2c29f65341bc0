"""`reduction="none"` returns the labels' shape in every functional loss, as `F.cross_entropy` does: (B, T) for
(B, T) labels, () for one row (the heads: tests/test_contract.py)."""

import pytest
import torch
import torch.nn.functional as F

from hf_heads.losses import (
    corrected_nll,
    cosine_softmax_loss,
    fused_linear_cross_entropy,
    margin_cross_entropy,
    sampled_loss,
    sparse_linear_cross_entropy,
    sparse_softmax_cross_entropy,
)

H, V = 6, 13
LINEAR_LOSSES = {
    "fused_linear_cross_entropy": lambda h, w, b, y, **kw: fused_linear_cross_entropy(h, w, b, y, **kw),
    "fused, top-k": lambda h, w, b, y, **kw: fused_linear_cross_entropy(h, w, b, y, top_k=4, **kw),
    "fused, bce": lambda h, w, b, y, **kw: fused_linear_cross_entropy(h, w, b, y, criterion="bce", **kw),
    "sparse_linear_cross_entropy": lambda h, w, b, y, **kw: sparse_linear_cross_entropy(h, w, b, y, 4, **kw),
    "margin_cross_entropy": lambda h, w, b, y, **kw: margin_cross_entropy(h, w, b, y, margin="arc", m=0.2, **kw),
    "sampled_loss": lambda h, w, b, y, **kw: sampled_loss(
        h,
        w,
        b,
        y,
        criterion="ce",
        method="is",
        num_samples=5,
        noise_probs=torch.full((V,), 1 / V),
        generator=torch.Generator().manual_seed(1),
        **kw,
    ),  # fmt: skip
    "corrected_nll": lambda h, w, b, y, **kw: corrected_nll(
        h, w, b, y, criterion="bce", method="nce", num_samples=5, noise_probs=torch.full((V,), 1 / V), **kw
    ),
}


@pytest.mark.parametrize("name", list(LINEAR_LOSSES))
@pytest.mark.parametrize("shape", [(2, 3), (5,), ()], ids=["(B, T)", "(N,)", "one row"])
def test_reduction_none_has_the_labels_shape(name, shape):
    g = torch.Generator().manual_seed(0)
    h = torch.randn(*shape, H, generator=g, requires_grad=True)
    w, b = torch.randn(V, H, generator=g), torch.randn(V, generator=g)
    y = torch.randint(0, V, shape, generator=g)
    if len(shape) == 2:
        y[1, 2] = -100
    rows = LINEAR_LOSSES[name](h, w, b, y, reduction="none", chunk_size=2)
    assert rows.shape == y.shape
    if not shape:  # torch's own one-row shape
        assert F.cross_entropy(h.detach() @ w.T + b, y, reduction="none").shape == ()
    if len(shape) == 2:
        assert rows[1, 2] == 0  # the ignored position
        mean = LINEAR_LOSSES[name](h, w, b, y, chunk_size=2)
        torch.testing.assert_close(rows.sum() / (y != -100).sum(), mean)
    rows.sum().backward()
    assert h.grad.shape == h.shape


@pytest.mark.parametrize("shape", [(2, 3), ()], ids=["(B, T)", "one row"])
def test_reduction_none_of_the_logit_and_embedding_losses_has_the_labels_shape(shape):
    g = torch.Generator().manual_seed(0)
    y = torch.randint(0, V, shape, generator=g)
    z = torch.randn(*shape, V, generator=g)
    assert sparse_softmax_cross_entropy(z, y, 4, reduction="none").shape == y.shape
    table = F.normalize(torch.randn(V, 4, generator=g), dim=-1)
    pred = torch.randn(*shape, 4, generator=g)
    assert cosine_softmax_loss(pred, y, table, reduction="none").shape == y.shape
