"""`reduction="none"` returns the labels' shape in every functional loss, as `F.cross_entropy` does: (B, T) for
(B, T) labels, () for one row (the heads: tests/heads/test_contract.py)."""

import pytest
import torch
import torch.nn.functional as F
from conftest import chunked, family_heads, with_impl

from hf_heads.losses import cosine_softmax_loss, presets, sparse_softmax_cross_entropy

corrected_nll = with_impl(presets.corrected_nll)
margin_cross_entropy = with_impl(presets.margin_cross_entropy)
sampled_loss = with_impl(presets.sampled_loss)
sparse_linear_cross_entropy = with_impl(presets.sparse_linear_cross_entropy)

H, V = 6, 13
LINEAR_LOSSES = {
    "fused_linear_cross_entropy": lambda h, w, b, y, **kw: chunked(h, w, b, y, **kw),
    "fused, top-k": lambda h, w, b, y, **kw: chunked(h, w, b, y, top_k=4, **kw),
    "fused, bce": lambda h, w, b, y, **kw: chunked(h, w, b, y, criterion="bce", **kw),
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


@pytest.mark.parametrize("name", list(LINEAR_LOSSES))
def test_the_loss_dtype_follows_torchs_rule_for_half_inputs(name):
    """bf16 inputs outside autocast: a bf16 loss (what `F.cross_entropy` of their logits gives), accumulated in
    float32 and rounded once; under autocast float32; float64 stays float64."""
    g = torch.Generator().manual_seed(0)
    h32, w32, b32 = torch.randn(2, 3, H, generator=g), torch.randn(V, H, generator=g), torch.randn(V, generator=g)
    y = torch.randint(0, V, (2, 3), generator=g)
    h, w, b = (x.bfloat16() for x in (h32, w32, b32))
    half = LINEAR_LOSSES[name](h, w, b, y)
    assert half.dtype == F.cross_entropy((h @ w.T + b).reshape(-1, V), y.reshape(-1)).dtype == torch.bfloat16
    # the same bf16 values in float32: the loss rounded once from its float32 accumulation
    full = LINEAR_LOSSES[name](h.float(), w.float(), b.float(), y)
    torch.testing.assert_close(half.float(), full, rtol=1e-2, atol=1e-2)
    assert LINEAR_LOSSES[name](h, w, b, y, reduction="none").dtype == torch.bfloat16
    with torch.autocast("cpu", dtype=torch.bfloat16):  # float32 (F.cross_entropy autocasts), half inputs or not
        assert LINEAR_LOSSES[name](h32, w32, b32, y).dtype == torch.float32
        assert LINEAR_LOSSES[name](h, w, b, y).dtype == torch.float32
    assert LINEAR_LOSSES[name](h32.double(), w32.double(), b32.double(), y).dtype == torch.float64
    assert sparse_softmax_cross_entropy((h @ w.T + b), y, 4).dtype == torch.bfloat16


@pytest.mark.parametrize("family", list(family_heads(discrete=True)))
def test_a_half_heads_loss_is_float32_as_transformers_losses(family):
    """A head of a model cast to bf16 returns a float32 loss (transformers' loss functions upcast the logits)."""
    from hf_heads.heads import make_head

    head = make_head(H, V, family_heads(discrete=True)[family]).to(torch.bfloat16)
    if head.needs_counts:
        head.set_word_counts(torch.arange(1.0, V + 1))
    h = torch.randn(2, 3, H, dtype=torch.bfloat16)
    y = torch.randint(0, V, (2, 3))
    assert head.loss(h, y).dtype == torch.float32
    assert head.eval().loss(h, y).dtype == torch.float32


def test_the_dtype_rule_reads_autocast_where_no_loss_switched_it_off():
    """`loss_dtype` called directly under autocast (outside the losses' `autocast_off`): float32 as well."""
    from hf_heads.losses.precision import loss_dtype

    half = torch.zeros(2, dtype=torch.bfloat16)
    assert loss_dtype(half, None) == torch.bfloat16
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert loss_dtype(half, None) == torch.float32
