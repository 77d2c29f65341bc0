"""Sparse-softmax (eqs. 4-5): naive reference forward/backward, gradcheck, k >= C is softmax, the
chunked linear path, the head's truncated inference distribution, bad input."""

import pytest
import torch
import torch.nn.functional as F
from conftest import tiny_llama_config, with_impl

from hf_heads import HeadsConfig, HeadsForCausalLM
from hf_heads.losses import (
    presets,
    sparse_log_softmax,
    sparse_softmax,
    sparse_softmax_cross_entropy,
    truncate_to_top_k,
)

sparse_linear_cross_entropy = with_impl(presets.sparse_linear_cross_entropy)


def reference(z, y, k, eps=0.0):
    """Eq. 5 literally, row by row."""
    out = []
    for row, t in zip(z, y, strict=True):
        omega = sorted(range(len(row)), key=lambda i: -float(row[i].detach()))[:k]
        lse = torch.log(sum(torch.exp(row[i]) for i in omega))
        loss = lse - row[t]
        if eps:
            loss = (1 - eps) * loss + eps * (lse - sum(row[i] for i in omega) / len(omega))
        out.append(loss)
    return torch.stack(out).mean()


@pytest.mark.parametrize("k, eps", [(1, 0.0), (3, 0.0), (3, 0.1), (9, 0.0)])
def test_loss_matches_reference_forward_backward(k, eps):
    g = torch.Generator().manual_seed(0)
    z = torch.randn(6, 9, generator=g, dtype=torch.float64, requires_grad=True)
    y = torch.randint(0, 9, (6,), generator=g)
    ours = sparse_softmax_cross_entropy(z, y, k, label_smoothing=eps)
    ref = reference(z, y, k, eps)
    torch.testing.assert_close(ours, ref)
    torch.testing.assert_close(torch.autograd.grad(ours, z)[0], torch.autograd.grad(ref, z)[0])
    assert torch.autograd.gradcheck(lambda z_: sparse_softmax_cross_entropy(z_, y, k, label_smoothing=eps), (z,))


def test_eq4_and_softmax_limit():
    z = torch.tensor([[1.0, 3.0, 2.0, -1.0]])
    p = sparse_softmax(z, 2)
    torch.testing.assert_close(p, torch.tensor([[0.0, 0.7311, 0.2689, 0.0]]), atol=1e-4, rtol=0)
    assert torch.isinf(sparse_log_softmax(z, 2)[0, 0])
    torch.testing.assert_close(sparse_softmax(z, 4), torch.softmax(z, -1))
    y = torch.tensor([0])
    torch.testing.assert_close(sparse_softmax_cross_entropy(z, y, 10), F.cross_entropy(z, y))
    assert truncate_to_top_k(z, 1).isinf().sum() == 3


def test_chunked_linear_path_equals_logits_path():
    g = torch.Generator().manual_seed(1)
    h = torch.randn(10, 4, generator=g, dtype=torch.float64, requires_grad=True)
    w = torch.randn(15, 4, generator=g, dtype=torch.float64, requires_grad=True)
    b = torch.randn(15, generator=g, dtype=torch.float64, requires_grad=True)
    y = torch.randint(0, 15, (10,), generator=g)
    y[3] = -100
    ours = sparse_linear_cross_entropy(h, w, b, y, 4, label_smoothing=0.1, chunk_size=3)
    ref = sparse_softmax_cross_entropy(h @ w.T + b, y, 4, label_smoothing=0.1)
    torch.testing.assert_close(ours, ref)
    for a, r in zip(torch.autograd.grad(ours, (h, w, b)), torch.autograd.grad(ref, (h, w, b)), strict=True):
        torch.testing.assert_close(a, r)


def test_reductions_and_num_items():
    z = torch.randn(5, 7)
    y = torch.tensor([1, -100, 3, 4, 0])
    rows = sparse_softmax_cross_entropy(z, y, 3, reduction="none")
    assert rows[1] == 0
    torch.testing.assert_close(sparse_softmax_cross_entropy(z, y, 3, reduction="sum"), rows.sum())
    torch.testing.assert_close(sparse_softmax_cross_entropy(z, y, 3), rows.sum() / 4)
    torch.testing.assert_close(sparse_softmax_cross_entropy(z, y, 3, num_items_in_batch=10), rows.sum() / 10)
    all_ignored = sparse_softmax_cross_entropy(z.requires_grad_(), torch.full_like(y, -100), 3)
    all_ignored.backward()
    assert all_ignored.item() == 0 and bool((z.grad == 0).all())


@pytest.mark.parametrize("k", [0, -1, 2.5, True])
def test_bad_k(k):
    with pytest.raises(ValueError, match="k="):
        sparse_softmax_cross_entropy(torch.randn(2, 4), torch.tensor([0, 1]), k)


def test_sparse_head_decodes_with_the_truncated_distribution(tmp_path):
    torch.manual_seed(0)
    model = HeadsForCausalLM(HeadsConfig(backbone=tiny_llama_config().to_dict(), head={"family": "sparse", "k": 5}))
    x = torch.randint(4, 61, (2, 8), generator=torch.Generator().manual_seed(0))
    model.train()
    loss = model(x, labels=x).loss
    loss.backward()
    assert torch.isfinite(loss)
    model.eval()
    with torch.no_grad():
        logits = model(x).logits
    assert bool((torch.isfinite(logits).sum(-1) == 5).all())  # exactly k finite logits per position
    beams = model.generate(x[:, :3], max_new_tokens=4, num_beams=5, do_sample=False)
    assert beams.shape == (2, 7)
    model.save_pretrained(tmp_path)
    assert HeadsForCausalLM.from_pretrained(tmp_path).config.head["k"] == 5
    with pytest.raises(ValueError, match="head.k=0"):
        HeadsConfig(backbone=tiny_llama_config().to_dict(), head={"family": "sparse", "k": 0})


@pytest.mark.parametrize("family", ["softmax", "sparse"])
def test_head_label_smoothing_in_training_only(family):
    """Softmax: F.cross_entropy's label smoothing; sparse: smoothing over the top-k support. Eval losses are the NLL
    of the inference distribution, unsmoothed (sparse: eq. 4's, +inf for a label outside the top k)."""
    from hf_heads.heads import make_head

    torch.manual_seed(0)
    head = make_head(6, 9, {"family": family, "label_smoothing": 0.1, **({"k": 4} if family == "sparse" else {})})
    h, y = torch.randn(5, 6), torch.tensor([0, 3, -100, 8, 2])
    z = h @ head.weight.T + head.bias
    if family == "softmax":
        smooth, plain = F.cross_entropy(z, y, label_smoothing=0.1), F.cross_entropy(z, y)
    else:
        smooth = sparse_softmax_cross_entropy(z, y, 4, label_smoothing=0.1)
        top = z.topk(4, dim=1)
        kept = [i for i in range(5) if int(y[i]) in top.indices[i].tolist()]
        assert 0 < len(kept) < 4  # some labels inside the top 4, some outside
        plain = torch.tensor(float("inf"))
        finite = [float((top.values[i].logsumexp(0) - z[i, y[i]]).detach()) for i in kept]
        torch.testing.assert_close(head.eval().loss(h[kept], y[kept]), torch.tensor(finite).mean())
    torch.testing.assert_close(head.train().loss(h, y), smooth)
    torch.testing.assert_close(head.eval().loss(h, y), plain)
    with pytest.raises(ValueError, match="head.label_smoothing=0.1 is only available for the softmax and sparse"):
        make_head(6, 9, {"family": "margin", "label_smoothing": 0.1})


@pytest.mark.parametrize("reduction", ["mean", "none"])
def test_chunked_sparse_gradient_gradcheck_float64(reduction):
    """The chunked path's sparse backward (k+1 gathered rows of W per token) in float64, targets inside and
    outside the top k, an ignored row, label smoothing, several chunks."""
    g = torch.Generator().manual_seed(3)
    h = torch.randn(7, 5, dtype=torch.float64, generator=g, requires_grad=True)
    w = torch.randn(12, 5, dtype=torch.float64, generator=g, requires_grad=True)
    b = torch.randn(12, dtype=torch.float64, generator=g, requires_grad=True)
    z = (h @ w.T + b).detach()
    top = torch.topk(z, 3, dim=1).indices
    y = torch.tensor([int(top[0, 0]), int(top[1, 2]), -100, 0, 1, 2, 3])  # rows 0-1: target in the top k
    for smoothing in (0.0, 0.2):

        def f(h_, w_, b_, smoothing=smoothing):
            out = sparse_linear_cross_entropy(
                h_, w_, b_, y, 3, label_smoothing=smoothing, chunk_size=2, reduction=reduction
            )
            return out if reduction == "mean" else out * torch.arange(1.0, 8.0, dtype=torch.float64)

        assert torch.autograd.gradcheck(f, (h, w, b))


def test_decode_k_truncates_the_inference_distribution_and_round_trips(tmp_path):
    """The sparse-softmax paper trains with k = 20 and decodes with beam 5 over the top 5: `decode_k` sets the k of
    the inference logits (and so of generate()); the training loss keeps `k`; saved with the config."""
    from conftest import tiny_gpt2_config

    torch.manual_seed(0)
    model = HeadsForCausalLM(
        HeadsConfig(backbone=tiny_gpt2_config().to_dict(), head={"family": "sparse", "k": 20, "decode_k": 5})
    )
    ids = torch.randint(4, 61, (2, 9))
    model.eval()
    logits = model(input_ids=ids).logits
    assert bool((torch.isfinite(logits).sum(-1) == 5).all())
    # the eval loss is the NLL of that distribution: +inf where a label falls outside its row's top 5
    nll = -logits[:, :-1].log_softmax(-1).gather(-1, ids[:, 1:, None]).squeeze(-1)  # (2, 8)
    assert bool(torch.isinf(nll).any()) and bool(torch.isfinite(nll).any())
    torch.testing.assert_close(model(input_ids=ids, labels=ids).loss, nll.mean())
    inside = torch.isfinite(nll)
    labels = torch.where(torch.cat([torch.zeros(2, 1, dtype=torch.bool), inside], 1), ids, -100)
    torch.testing.assert_close(model(input_ids=ids, labels=labels).loss, nll[inside].mean())
    hidden = model.backbone(input_ids=ids).last_hidden_state
    expected = sparse_linear_cross_entropy(hidden[:, :-1], model.head.weight, model.head.bias, ids[:, 1:], 20)
    model.head.train()  # the training loss: eq. 5 over the top k = 20 (the backbone stays in eval mode)
    torch.testing.assert_close(model.head(hidden[:, :-1], ids[:, 1:])[0], expected)
    model.head.eval()
    model.save_pretrained(tmp_path)
    again = HeadsForCausalLM.from_pretrained(tmp_path).eval()
    assert again.config.head["decode_k"] == 5
    torch.testing.assert_close(again(input_ids=ids).logits, logits)
    with pytest.raises(ValueError, match="head.decode_k"):
        HeadsConfig(backbone=tiny_gpt2_config().to_dict(), head={"family": "sparse", "decode_k": 0})
